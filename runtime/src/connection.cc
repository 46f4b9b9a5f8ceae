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

void Connection::checkWrite(const RegisteredMemory& dst, uint64_t dstOffset, const RegisteredMemory& src,
                            uint64_t srcOffset, uint64_t bytes) const {
  const std::string where = std::string(transportName(transport())) + " connection from rank " +
                            std::to_string(localRank_) + " to rank " + std::to_string(remoteRank_) + ": write";
  if (!dst.valid() || !src.valid()) {
    throw Error(ErrorCategory::kInvalidArgument,
                where + ": " + (dst.valid() ? "src" : "dst") + " is not a registration");
  }
  if (dst.ownerRank() != remoteRank_) {
    throw Error(ErrorCategory::kInvalidArgument,
                where + ": dst belongs to rank " + std::to_string(dst.ownerRank()) + ", not to the peer");
  }
  if (!src.isLocal()) throw Error(ErrorCategory::kInvalidArgument, where + ": src is not this process's memory");
  if (!dst.transports().has(transport())) {
    throw Error(ErrorCategory::kInvalidArgument, where + ": dst is registered for " + dst.transports().toString() +
                                                     ", not for " + transportName(transport()));
  }
  if (!src.transports().has(transport())) {
    throw Error(ErrorCategory::kInvalidArgument, where + ": src is registered for " + src.transports().toString() +
                                                     ", not for " + transportName(transport()));
  }
  if (!fits(dstOffset, bytes, dst.bytes())) {
    throw Error(ErrorCategory::kInvalidArgument, where + ": dst range " + rangeText(dstOffset, bytes) +
                                                     " is outside its " + std::to_string(dst.bytes()) + " bytes");
  }
  if (!fits(srcOffset, bytes, src.bytes())) {
    throw Error(ErrorCategory::kInvalidArgument, where + ": src range " + rangeText(srcOffset, bytes) +
                                                     " is outside its " + std::to_string(src.bytes()) + " bytes");
  }
}

void Connection::checkValue(const RegisteredMemory& dst, uint64_t dstOffset) const {
  const std::string where = std::string(transportName(transport())) + " connection from rank " +
                            std::to_string(localRank_) + " to rank " + std::to_string(remoteRank_) + ": writeValue";
  if (!dst.valid()) throw Error(ErrorCategory::kInvalidArgument, where + ": dst is not a registration");
  if (dst.ownerRank() != remoteRank_) {
    throw Error(ErrorCategory::kInvalidArgument,
                where + ": dst belongs to rank " + std::to_string(dst.ownerRank()) + ", not to the peer");
  }
  if (!dst.transports().has(transport())) {
    throw Error(ErrorCategory::kInvalidArgument, where + ": dst is registered for " + dst.transports().toString() +
                                                     ", not for " + transportName(transport()));
  }
  if (dstOffset % 8 != 0 || !fits(dstOffset, 8, dst.bytes())) {
    throw Error(ErrorCategory::kInvalidArgument, where + ": offset " + std::to_string(dstOffset) +
                                                     " is not an 8-byte aligned word inside its " +
                                                     std::to_string(dst.bytes()) + " bytes");
  }
}

}  // namespace loom
