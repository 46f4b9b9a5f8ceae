#pragma once

// Failures as NCCL reports them: an ncclResult_t, and a text for ncclGetLastError that says which
// call failed and why. Every entry point runs its body through `guarded`, so no C++ exception ever
// leaves the library.

#include <nccl.h>

#include <exception>
#include <stdexcept>
#include <string>

struct ncclComm;

namespace loom::nccl {

// A failure with its NCCL code chosen where it happens (invalid usage, a real NCCL error).
class Failure : public std::runtime_error {
 public:
  Failure(ncclResult_t result, const std::string& message) : std::runtime_error(message), result_(result) {}
  ncclResult_t result() const { return result_; }

 private:
  ncclResult_t result_;
};

// The code for the exception in flight (loom::Error by category, Failure as given, bad_alloc as a
// system error); records "<function>: <what>" as the last error (of `comm` too, when given) and logs it.
ncclResult_t failed(const char* function, ncclComm* comm, std::exception_ptr error);

template <class Body>
ncclResult_t guarded(const char* function, ncclComm* comm, Body&& body) {
  try {
    return body();
  } catch (...) {
    return failed(function, comm, std::current_exception());
  }
}

void recordError(ncclComm* comm, const std::string& text);
const char* lastError(ncclComm* comm);

}  // namespace loom::nccl
