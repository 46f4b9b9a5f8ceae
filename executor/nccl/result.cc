#include "result.hpp"

#include <cstring>
#include <mutex>
#include <new>

#include "log.hpp"
#include "loom/error.hpp"
#include "nccl_comm.hpp"

namespace loom::nccl {
namespace {

std::mutex processErrorMutex;
char processError[1024] = "";

void copyText(char* out, size_t size, const std::string& text) {
  const size_t n = std::min(size - 1, text.size());
  std::memcpy(out, text.data(), n);
  out[n] = '\0';
}

ncclResult_t resultOf(ErrorCategory category) {
  switch (category) {
    case ErrorCategory::kInvalidArgument:
      return ncclInvalidArgument;
    case ErrorCategory::kInvalidPlan:
      return ncclInvalidUsage;
    case ErrorCategory::kTimeout:
    case ErrorCategory::kTransport:
      return ncclRemoteError;
    case ErrorCategory::kCuda:
      return ncclUnhandledCudaError;
    case ErrorCategory::kSystem:
      return ncclSystemError;
  }
  return ncclInternalError;
}

}  // namespace

void recordError(ncclComm* comm, const std::string& text) {
  {
    std::lock_guard<std::mutex> lock(processErrorMutex);
    copyText(processError, sizeof(processError), text);
  }
  if (comm != nullptr) {
    std::lock_guard<std::mutex> lock(comm->errorMutex);
    copyText(comm->lastError, sizeof(comm->lastError), text);
  }
}

const char* lastError(ncclComm* comm) {
  if (comm != nullptr) return comm->lastError;
  return processError;
}

ncclResult_t failed(const char* function, ncclComm* comm, std::exception_ptr error) {
  ncclResult_t result = ncclInternalError;
  std::string text;
  try {
    std::rethrow_exception(error);
  } catch (const Failure& failure) {
    result = failure.result();
    text = failure.what();
  } catch (const Error& loomError) {
    result = resultOf(loomError.category());
    text = loomError.what();
  } catch (const std::bad_alloc&) {
    result = ncclSystemError;
    text = "out of host memory";
  } catch (const std::exception& other) {
    text = other.what();
  } catch (...) {
    text = "unknown exception";
  }
  text = std::string(function) + ": " + text;
  recordError(comm, text);
  logLine(LogLevel::kWarn, comm != nullptr ? comm->cudaDevice : -1, text);
  return result;
}

}  // namespace loom::nccl
