#include "fd_passing.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>

#include "log.hpp"
#include "loom/error.hpp"

namespace loom {
namespace {

// One note, as it travels; a datagram of any other size is refused.
struct Note {
  int32_t rank;
  uint32_t reserved;
  uint64_t tag;
  NoteKey key;
};

// How many descriptors one note's control data may carry before the kernel truncates it (and closes the
// rest): a note carries one, and every one that comes is closed unless taken.
constexpr size_t kMostDescriptors = 16;
// How long a connection of the job's user may take to post its note once accepted: a sender posts right
// after it connects, so only a process that connects and says nothing waits this long.
constexpr int kNoteWaitMs = 100;
// Processes whose refused notes are named on stderr, at most (one line each).
constexpr size_t kMostReported = 64;

sockaddr_un addressOf(uint64_t job, int rank, uint64_t name, socklen_t* length) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  // Abstract namespace: the name starts with a NUL byte and needs no file.
  int written = std::snprintf(address.sun_path + 1, sizeof(address.sun_path) - 1, "loom-fd-%016llx-%d-%016llx",
                              static_cast<unsigned long long>(job), rank, static_cast<unsigned long long>(name));
  *length = socklen_t(offsetof(sockaddr_un, sun_path) + 1 + written);
  return address;
}

std::string systemError(const std::string& what) { return what + ": " + std::strerror(errno); }

ucred peerCredentials(int socket) {
  ucred credentials{};
  socklen_t length = sizeof(credentials);
  if (::getsockopt(socket, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) {
    throw Error(ErrorCategory::kTransport, systemError("SO_PEERCRED of a descriptor-passing connection"));
  }
  return credentials;
}

// Closes a socket when it goes out of scope.
class ScopedSocket {
 public:
  explicit ScopedSocket(int fd) : fd_(fd) {}
  ~ScopedSocket() {
    if (fd_ >= 0) ::close(fd_);
  }
  ScopedSocket(const ScopedSocket&) = delete;
  ScopedSocket& operator=(const ScopedSocket&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

MailboxIdentity MailboxIdentity::drawn() {
  std::random_device random;  // the OS's random source on Linux
  MailboxIdentity identity;
  identity.pid = int32_t(::getpid());
  identity.name = uint64_t(random()) << 32 | random();
  for (size_t i = 0; i < identity.noteKey.size(); i += 4) {
    const uint32_t word = random();
    std::memcpy(identity.noteKey.data() + i, &word, 4);
  }
  return identity;
}

FdMailbox::FdMailbox(uint64_t job, int rank, std::vector<MailboxIdentity> peers)
    : job_(job), rank_(rank), peers_(std::move(peers)) {
  if (rank < 0 || size_t(rank) >= peers_.size()) {
    throw Error(ErrorCategory::kInvalidArgument, "descriptor passing: rank " + std::to_string(rank) +
                                                     " has no identity among " + std::to_string(peers_.size()));
  }
  socket_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (socket_ < 0) throw Error(ErrorCategory::kSystem, systemError("Unix socket for descriptor passing"));
  socklen_t length = 0;
  sockaddr_un address = addressOf(job, rank, peers_[rank].name, &length);
  if (::bind(socket_, reinterpret_cast<sockaddr*>(&address), length) != 0 || ::listen(socket_, 64) != 0) {
    const std::string message = systemError("binding the descriptor-passing socket of rank " + std::to_string(rank));
    ::close(socket_);
    throw Error(ErrorCategory::kSystem, message);
  }
}

FdMailbox::~FdMailbox() {
  for (auto& [key, fd] : pending_) ::close(fd);
  if (socket_ >= 0) ::close(socket_);
}

void FdMailbox::send(int peer, uint64_t tag, int fd, const Deadline& deadline) {
  const std::string what = "passing a memory descriptor from rank " + std::to_string(rank_) + " to rank " +
                           std::to_string(peer) + " (tag " + std::to_string(tag) + ")";
  if (peer < 0 || size_t(peer) >= peers_.size() || peer == rank_) {
    throw Error(ErrorCategory::kInvalidArgument, what + ": no such peer");
  }
  Note note{rank_, 0, tag, peers_[rank_].noteKey};
  socklen_t length = 0;
  sockaddr_un address = addressOf(job_, peer, peers_[peer].name, &length);
  while (true) {
    ScopedSocket connection(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (connection.get() < 0) throw Error(ErrorCategory::kSystem, systemError(what));
    if (::connect(connection.get(), reinterpret_cast<sockaddr*>(&address), length) == 0) {
      // The listener must be the rank: a process of another user, or another process of this one, that
      // bound the name first would receive the job's memory.
      const ucred listener = peerCredentials(connection.get());
      const bool rankItself = listener.pid == peers_[peer].pid || listener.pid == 0;  // 0: another pid namespace
      if (listener.uid != ::geteuid() || !rankItself) {
        throw Error(ErrorCategory::kTransport,
                    what + ": the socket of rank " + std::to_string(peer) + " is held by process " +
                        std::to_string(listener.pid) + " of user " + std::to_string(listener.uid) +
                        ", not by the rank (process " + std::to_string(peers_[peer].pid) + " of user " +
                        std::to_string(::geteuid()) + "); the descriptor was not sent");
      }
      iovec data{&note, sizeof(note)};
      alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
      msghdr message{};
      message.msg_iov = &data;
      message.msg_iovlen = 1;
      message.msg_control = control;
      message.msg_controllen = sizeof(control);
      cmsghdr* header = CMSG_FIRSTHDR(&message);
      header->cmsg_level = SOL_SOCKET;
      header->cmsg_type = SCM_RIGHTS;
      header->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(header), &fd, sizeof(int));
      if (::sendmsg(connection.get(), &message, MSG_NOSIGNAL) == ssize_t(sizeof(note))) return;
      if (errno != EAGAIN && errno != EINTR) throw Error(ErrorCategory::kTransport, systemError(what));
    } else if (errno != EAGAIN && errno != ECONNREFUSED && errno != ENOENT && errno != EINTR) {
      // Not listening yet (refused), or its queue of connections is full (EAGAIN): try again until the deadline.
      throw Error(ErrorCategory::kTransport, systemError(what));
    }
    if (deadline.expired()) {
      throw Error(ErrorCategory::kTimeout, what + ": rank " + std::to_string(peer) + " did not take it within " +
                                               std::to_string(deadline.timeoutMs()) +
                                               " ms (is it on this host and in this network namespace?)");
    }
    // Peers may be sending to this rank meanwhile, and this rank's queue fills as fast as theirs: take what
    // has come, or two ranks that send to each other wait for each other forever (seen with 5 and more
    // processes of one host).
    while (takeOne()) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

bool FdMailbox::takeOne() {
  const int accepted = ::accept4(socket_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (accepted < 0) {
    if (errno == EINTR || errno == ECONNABORTED) return true;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
    throw Error(ErrorCategory::kTransport, systemError("accepting a descriptor-passing connection"));
  }
  ScopedSocket connection(accepted);
  const ucred sender = peerCredentials(connection.get());
  if (sender.uid != ::geteuid()) {
    // Not read at all: whatever it carries is closed with the connection by the kernel.
    noteRefused(sender.pid, "a connection of user " + std::to_string(sender.uid) + ", not the job's user " +
                                std::to_string(::geteuid()));
    return true;
  }
  pollfd wait{connection.get(), POLLIN, 0};
  if (::poll(&wait, 1, kNoteWaitMs) <= 0) {
    noteRefused(sender.pid, "a connection that posted nothing within " + std::to_string(kNoteWaitMs) + " ms");
    return true;
  }
  Note note{};
  char excess = 0;
  iovec data[2] = {{&note, sizeof(note)}, {&excess, 1}};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMostDescriptors)] = {};
  msghdr message{};
  message.msg_iov = data;
  message.msg_iovlen = 2;
  message.msg_control = control;
  message.msg_controllen = sizeof(control);
  const ssize_t got = ::recvmsg(connection.get(), &message, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  std::vector<int> descriptors;
  if (got >= 0) {
    for (cmsghdr* header = CMSG_FIRSTHDR(&message); header != nullptr; header = CMSG_NXTHDR(&message, header)) {
      if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
      const size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd = -1;
        std::memcpy(&fd, CMSG_DATA(header) + i * sizeof(int), sizeof(int));
        descriptors.push_back(fd);
      }
    }
  }
  std::string why;
  if (got != ssize_t(sizeof(note))) {
    why = got < 0 ? systemError("a note that could not be read")
                  : "a malformed note (" + std::to_string(got) + " bytes, not " + std::to_string(sizeof(note)) + ")";
  } else if ((message.msg_flags & MSG_CTRUNC) != 0) {
    why = "a note with more than " + std::to_string(kMostDescriptors) + " descriptors";
  } else {
    why = refusal(sender.pid, sender.uid, note.rank, note.key, descriptors.size());
  }
  if (!why.empty()) {
    for (int fd : descriptors) ::close(fd);
    noteRefused(sender.pid, why);
    return true;
  }
  auto [it, fresh] = pending_.emplace(std::make_pair(int(note.rank), note.tag), descriptors[0]);
  if (!fresh) ::close(descriptors[0]);  // a duplicate: keep the first
  return true;
}

int FdMailbox::receive(int peer, uint64_t tag, const Deadline& deadline) {
  const auto key = std::make_pair(peer, tag);
  while (true) {
    if (auto it = pending_.find(key); it != pending_.end()) {
      int fd = it->second;
      pending_.erase(it);
      return fd;
    }
    if (takeOne()) continue;
    if (deadline.expired()) {
      throw Error(ErrorCategory::kTimeout, "receiving a memory descriptor from rank " + std::to_string(peer) +
                                               " (tag " + std::to_string(tag) + ") on rank " + std::to_string(rank_) +
                                               ": nothing came within " + std::to_string(deadline.timeoutMs()) +
                                               " ms" + (refused_ > 0 ? " (" + std::to_string(refused_) +
                                                                           " notes were refused: see the warnings)"
                                                                     : std::string()));
    }
    pollfd wait{socket_, POLLIN, 0};
    ::poll(&wait, 1, deadline.remainingMs(100));
  }
}

std::string FdMailbox::refusal(int32_t pid, uint32_t uid, int32_t rank, const NoteKey& key, size_t descriptors) const {
  if (rank < 0 || size_t(rank) >= peers_.size() || rank == rank_) {
    return "a note that names rank " + std::to_string(rank) + ", no peer of this job's " +
           std::to_string(peers_.size()) + " ranks";
  }
  if (uid != ::geteuid()) return "a note of user " + std::to_string(uid) + ", not the job's";
  if (pid != 0 && pid != peers_[rank].pid) {
    return "a note for rank " + std::to_string(rank) + " from process " + std::to_string(pid) + ", not the rank's (" +
           std::to_string(peers_[rank].pid) + ")";
  }
  if (key != peers_[rank].noteKey) return "a note for rank " + std::to_string(rank) + " without the rank's note key";
  if (descriptors != 1) return "a note with " + std::to_string(descriptors) + " descriptors, not one";
  return "";
}

void FdMailbox::noteRefused(int32_t pid, const std::string& why) {
  ++refused_;
  if (reported_.size() >= kMostReported || !reported_.insert(pid).second) return;
  logWarning("rank " + std::to_string(rank_) + " refused a memory-descriptor note from process " +
             std::to_string(pid) + ": " + why + "; every descriptor it carried was closed (later refusals of that "
             "process are not named)");
}

}  // namespace loom
