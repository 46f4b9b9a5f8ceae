#pragma once

// Passing file descriptors (exported cuMem allocations) between the ranks of one host. Each rank
// binds a datagram Unix socket in the abstract namespace, named after the job and its rank; a
// sender posts (its rank, a tag) with the descriptor attached (SCM_RIGHTS), and the receiver picks
// the one it waits for, keeping any others that arrive first. Nothing touches the file system, and
// the names of two jobs differ in their job key.

#include <cstdint>
#include <map>
#include <utility>

#include "deadline.hpp"

namespace loom {

class FdMailbox {
 public:
  FdMailbox(uint64_t jobKey, int rank);
  ~FdMailbox();
  FdMailbox(const FdMailbox&) = delete;
  FdMailbox& operator=(const FdMailbox&) = delete;

  // The descriptor is duplicated into the peer's process; the caller keeps its own.
  void send(int peer, uint64_t tag, int fd, const Deadline& deadline);
  // The descriptor `peer` sent with `tag`, owned by the caller from now on.
  int receive(int peer, uint64_t tag, const Deadline& deadline);

 private:
  // Moves one waiting message into pending_; false when none is waiting.
  bool takeOne();

  uint64_t jobKey_;
  int rank_;
  int socket_ = -1;
  std::map<std::pair<int, uint64_t>, int> pending_;
};

}  // namespace loom
