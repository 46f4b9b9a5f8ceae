#include "fd_passing.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "loom/error.hpp"

namespace loom {
namespace {

struct Note {
  int32_t rank;
  uint64_t tag;
};

sockaddr_un addressOf(uint64_t jobKey, int rank, socklen_t* length) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  // Abstract namespace: the name starts with a NUL byte and needs no file.
  int written = std::snprintf(address.sun_path + 1, sizeof(address.sun_path) - 1, "loom-fd-%016llx-%d",
                              static_cast<unsigned long long>(jobKey), rank);
  *length = socklen_t(offsetof(sockaddr_un, sun_path) + 1 + written);
  return address;
}

std::string systemError(const std::string& what) { return what + ": " + std::strerror(errno); }

}  // namespace

FdMailbox::FdMailbox(uint64_t jobKey, int rank) : jobKey_(jobKey), rank_(rank) {
  socket_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (socket_ < 0) throw Error(ErrorCategory::kSystem, systemError("Unix socket for descriptor passing"));
  socklen_t length = 0;
  sockaddr_un address = addressOf(jobKey, rank, &length);
  if (::bind(socket_, reinterpret_cast<sockaddr*>(&address), length) != 0) {
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
  Note note{rank_, tag};
  iovec data{&note, sizeof(note)};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr message{};
  socklen_t length = 0;
  sockaddr_un address = addressOf(jobKey_, peer, &length);
  message.msg_name = &address;
  message.msg_namelen = length;
  message.msg_iov = &data;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof(control);
  cmsghdr* header = CMSG_FIRSTHDR(&message);
  header->cmsg_level = SOL_SOCKET;
  header->cmsg_type = SCM_RIGHTS;
  header->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(header), &fd, sizeof(int));
  const std::string what = "passing a memory descriptor from rank " + std::to_string(rank_) + " to rank " +
                           std::to_string(peer) + " (tag " + std::to_string(tag) + ")";
  while (::sendmsg(socket_, &message, MSG_NOSIGNAL) < 0) {
    // The peer's socket may not be bound yet, or its queue may be full: try again until the deadline.
    if (errno != EAGAIN && errno != ECONNREFUSED && errno != ENOENT && errno != EINTR) {
      throw Error(ErrorCategory::kTransport, systemError(what));
    }
    if (deadline.expired()) {
      throw Error(ErrorCategory::kTimeout, what + ": rank " + std::to_string(peer) + " did not take it within " +
                                               std::to_string(deadline.timeoutMs()) +
                                               " ms (is it on this host and in this network namespace?)");
    }
    // Peers may be sending to this rank meanwhile, and this rank's queue (a few datagrams) fills as fast as
    // theirs: take what has come, or two ranks that send to each other wait for each other forever (seen
    // with 5 and more processes of one host).
    while (takeOne()) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

bool FdMailbox::takeOne() {
  Note note{};
  iovec data{&note, sizeof(note)};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr message{};
  message.msg_iov = &data;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof(control);
  const ssize_t got = ::recvmsg(socket_, &message, MSG_CMSG_CLOEXEC);
  if (got < 0) {
    if (errno != EAGAIN && errno != EINTR) throw Error(ErrorCategory::kTransport, systemError("recvmsg"));
    return false;
  }
  cmsghdr* header = CMSG_FIRSTHDR(&message);
  if (got != sizeof(note) || header == nullptr || header->cmsg_type != SCM_RIGHTS) return true;  // not ours
  int fd = -1;
  std::memcpy(&fd, CMSG_DATA(header), sizeof(int));
  auto [it, fresh] = pending_.emplace(std::make_pair(int(note.rank), note.tag), fd);
  if (!fresh) ::close(fd);  // a duplicate: keep the first
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
                                               " ms");
    }
    pollfd wait{socket_, POLLIN, 0};
    ::poll(&wait, 1, deadline.remainingMs(100));
  }
}

}  // namespace loom
