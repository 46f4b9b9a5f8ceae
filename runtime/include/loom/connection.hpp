#pragma once

// A one-way data path from this rank to one peer over one transport, driven by the host (the proxy
// thread of a port channel, or a test). Memory channels do not use it: their GPU threads load and
// store peer memory directly.
//
// Operations are asynchronous and complete in the order they were posted: when the value of a
// writeValue() becomes visible at the peer, every write() posted before it is visible too. That is
// what makes a semaphore update after a put safe. flush() waits until everything posted is done.

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include "loom/error.hpp"
#include "loom/registered_memory.hpp"
#include "loom/transport.hpp"

namespace loom {

class Connection {
 public:
  virtual ~Connection() = default;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  virtual Transport transport() const = 0;
  int localRank() const { return localRank_; }
  int remoteRank() const { return remoteRank_; }

  // Copies `bytes` from src + srcOffset (this rank's memory) to dst + dstOffset (the peer's).
  // Ranges are checked against both registrations; an InvalidArgument error names the side.
  virtual void write(const RegisteredMemory& dst, uint64_t dstOffset, const RegisteredMemory& src, uint64_t srcOffset,
                     uint64_t bytes) = 0;
  // Stores the 64-bit `value` at dst + dstOffset (8-byte aligned) after every earlier write of this
  // connection is visible there. The caller is the only writer of that word through any connection
  // (a semaphore's outbound count), so transports may implement it as an add of the difference.
  virtual void writeValue(const RegisteredMemory& dst, uint64_t dstOffset, uint64_t value) = 0;
  // Waits until every operation posted so far is complete at the peer; a Timeout error after
  // `timeoutMs` names the peer, the transport and what is still outstanding.
  virtual void flush(int64_t timeoutMs) = 0;
  // Waits until no operation posted so far still reads this rank's memory (its source may be reused
  // or freed); by default a flush, which implies it.
  virtual void finishReads(int64_t timeoutMs) { flush(timeoutMs); }

  // Who hears, once, that the link to the peer failed for good (a reset or closed stream, a queue pair
  // in error, a frame it had to refuse): the communicator, so that waits on the peer end at once
  // rather than at their timeout. Called with why, from whichever thread met the failure (at once when
  // the failure came before the sink); a peer's orderly close is not a failure.
  using FailureSink = std::function<void(const std::string& why)>;
  void reportFailuresTo(FailureSink sink);

 protected:
  Connection(int localRank, int remoteRank) : localRank_(localRank), remoteRank_(remoteRank) {}
  // Shared range checks for implementations.
  void checkWrite(const RegisteredMemory& dst, uint64_t dstOffset, const RegisteredMemory& src, uint64_t srcOffset,
                  uint64_t bytes) const;
  void checkValue(const RegisteredMemory& dst, uint64_t dstOffset) const;
  // The link failed: the first failure goes to the sink, once.
  void failed(const std::string& why);

 private:
  void checkDestination(const RegisteredMemory& dst, const char* operation) const;
  Error invalid(const char* operation, const std::string& detail) const;

  // Tells the sink the failure once both are there, with `lock` (of sinkMutex_) let go first.
  void tellOnce(std::unique_lock<std::mutex>& lock);

  int localRank_;
  int remoteRank_;
  std::mutex sinkMutex_;
  FailureSink sink_;
  std::string failure_;  // the first failure; empty while there is none
  bool reported_ = false;
};

}  // namespace loom
