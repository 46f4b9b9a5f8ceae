#include "loom/connection.hpp"

#include "loom/error.hpp"

namespace loom {
namespace {

std::string rangeText(uint64_t offset, uint64_t bytes) {
  return "[" + std::to_string(offset) + ", " + std::to_string(offset) + " + " + std::to_string(bytes) + ")";
}

// offset + bytes <= size, without overflow.
bool fits(uint64_t offset, uint64_t bytes, uint64_t size) { return offset <= size && bytes <= size - offset; }

}  // namespace

void Connection::reportFailuresTo(FailureSink sink) {
  std::unique_lock lock(sinkMutex_);
  sink_ = std::move(sink);
  tellOnce(lock);
}

void Connection::failed(const std::string& why) {
  std::unique_lock lock(sinkMutex_);
  if (!failure_.empty()) return;
  failure_ = why.empty() ? "the connection failed" : why;
  tellOnce(lock);
}

void Connection::tellOnce(std::unique_lock<std::mutex>& lock) {
  if (failure_.empty() || !sink_ || reported_) return;
  reported_ = true;
  const FailureSink sink = sink_;
  const std::string why = failure_;
  lock.unlock();  // the sink takes locks of its own
  sink(why);
}

// These run for every proxy trigger: the messages are built only when a check fails.
void Connection::checkWrite(const RegisteredMemory& dst, uint64_t dstOffset, const RegisteredMemory& src,
                            uint64_t srcOffset, uint64_t bytes) const {
  checkDestination(dst, "write");
  if (!src.valid()) throw invalid("write", "src is not a registration");
  if (!src.isLocal()) throw invalid("write", "src is not this process's memory");
  if (!src.transports().has(transport())) {
    throw invalid("write",
                  "src is registered for " + src.transports().toString() + ", not for " + transportName(transport()));
  }
  if (!fits(dstOffset, bytes, dst.bytes())) {
    throw invalid("write", "dst range " + rangeText(dstOffset, bytes) + " is outside its " +
                               std::to_string(dst.bytes()) + " bytes");
  }
  if (!fits(srcOffset, bytes, src.bytes())) {
    throw invalid("write", "src range " + rangeText(srcOffset, bytes) + " is outside its " +
                               std::to_string(src.bytes()) + " bytes");
  }
}

void Connection::checkValue(const RegisteredMemory& dst, uint64_t dstOffset) const {
  checkDestination(dst, "writeValue");
  if (dstOffset % 8 != 0 || !fits(dstOffset, 8, dst.bytes())) {
    throw invalid("writeValue", "offset " + std::to_string(dstOffset) + " is not an 8-byte aligned word inside its " +
                                    std::to_string(dst.bytes()) + " bytes");
  }
}

void Connection::checkDestination(const RegisteredMemory& dst, const char* operation) const {
  if (!dst.valid()) throw invalid(operation, "dst is not a registration");
  if (dst.ownerRank() != remoteRank_) {
    throw invalid(operation, "dst belongs to rank " + std::to_string(dst.ownerRank()) + ", not to the peer");
  }
  if (!dst.transports().has(transport())) {
    throw invalid(operation,
                  "dst is registered for " + dst.transports().toString() + ", not for " + transportName(transport()));
  }
}

Error Connection::invalid(const char* operation, const std::string& detail) const {
  return Error(ErrorCategory::kInvalidArgument, std::string(transportName(transport())) + " connection from rank " +
                                                    std::to_string(localRank_) + " to rank " +
                                                    std::to_string(remoteRank_) + ": " + operation + ": " + detail);
}

}  // namespace loom
