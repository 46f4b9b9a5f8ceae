#pragma once

// Passing file descriptors (exported cuMem allocations, the CPU backend's shared host segments) between
// the ranks of one host, and only between them: a descriptor maps the job's memory, so a forged one would
// feed the job memory an intruder reads, and one sent to an intruder would hand it the job's data.
//
// Each rank listens on a SOCK_SEQPACKET Unix socket in the abstract namespace, named after the job, its
// rank and a random name drawn by that rank, which no one outside the job learns before the socket exists.
// A sender connects, checks that the listener is the rank it means (its pid and user, from SO_PEERCRED),
// and posts (its rank, a tag, its note key) with the descriptor attached (SCM_RIGHTS). The receiver checks
// the connector the same way and the note key (128 random bits per rank, known only to the job: all three
// were exchanged over the authenticated bootstrap) before it takes the descriptor; it closes every
// descriptor it does not take at once, and names a refused note once per sending process on stderr.
// Ranks in another pid namespace are seen with pid 0: for them the user and the note key decide.

#include <array>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "deadline.hpp"

namespace loom {

using NoteKey = std::array<uint8_t, 16>;

// What every rank told the others over the bootstrap, for its mailbox.
struct MailboxIdentity {
  int32_t pid = 0;        // getpid() of the rank's process
  uint64_t name = 0;      // random part of its socket's name
  NoteKey noteKey{};      // what its notes carry
  static MailboxIdentity drawn();  // this process's pid, with a fresh random name and key
};

class FdMailbox {
 public:
  // `job` names the job's sockets; `peers` holds every rank's identity, this rank's included.
  FdMailbox(uint64_t job, int rank, std::vector<MailboxIdentity> peers);
  ~FdMailbox();
  FdMailbox(const FdMailbox&) = delete;
  FdMailbox& operator=(const FdMailbox&) = delete;

  // The descriptor is duplicated into the peer's process; the caller keeps its own.
  void send(int peer, uint64_t tag, int fd, const Deadline& deadline);
  // The descriptor `peer` sent with `tag`, owned by the caller from now on.
  int receive(int peer, uint64_t tag, const Deadline& deadline);

  // Notes refused so far (forged, malformed, from a process that is no rank of the job).
  uint64_t refusedNotes() const { return refused_; }

 private:
  // Takes one waiting connection's note into pending_; false when none is waiting.
  bool takeOne();
  // Why the note of a connection from `pid` (as SO_PEERCRED gives it) is not taken, or "" to take it.
  std::string refusal(int32_t pid, uint32_t uid, int32_t rank, const NoteKey& key, size_t descriptors) const;
  void noteRefused(int32_t pid, const std::string& why);

  uint64_t job_;
  int rank_;
  std::vector<MailboxIdentity> peers_;
  int socket_ = -1;
  std::map<std::pair<int, uint64_t>, int> pending_;
  std::set<int32_t> reported_;  // processes whose refused notes were named already
  uint64_t refused_ = 0;
};

}  // namespace loom
