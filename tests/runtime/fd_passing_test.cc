// Descriptor passing between the ranks of one host (fd_passing.hpp): a note is taken only from the rank it
// names (its process, its user, its note key), a descriptor goes only to the rank's own socket, and every
// descriptor that is not taken is closed at once. Both mailboxes live in this process here; the forging
// process of another user is tests/runtime/test_descriptor_passing.py.

#include "fd_passing.hpp"

#include <dirent.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "loom/error.hpp"

namespace loom {
namespace {

constexpr uint64_t kJob = 0x10ca1f00d;

int openDescriptors() {
  int count = 0;
  DIR* folder = ::opendir("/proc/self/fd");
  while (dirent* entry = ::readdir(folder)) count += entry->d_name[0] != '.';
  ::closedir(folder);
  return count;
}

std::vector<MailboxIdentity> twoRanks() { return {MailboxIdentity::drawn(), MailboxIdentity::drawn()}; }

int memfdHolding(const std::string& text) {
  const int fd = ::memfd_create("fd_passing_test", MFD_CLOEXEC);
  EXPECT_EQ(::write(fd, text.data(), text.size()), ssize_t(text.size()));
  return fd;
}

std::string contentOf(int fd) {
  char buffer[64] = {};
  const ssize_t got = ::pread(fd, buffer, sizeof(buffer) - 1, 0);
  return std::string(buffer, size_t(std::max<ssize_t>(got, 0)));
}

// Posts `bytes` with `fds` attached to rank `rank`'s socket as any process could: no identity checks.
void postRaw(const std::vector<MailboxIdentity>& peers, int rank, const std::string& bytes, std::vector<int> fds) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const int written = std::snprintf(address.sun_path + 1, sizeof(address.sun_path) - 1, "loom-fd-%016llx-%d-%016llx",
                                    static_cast<unsigned long long>(kJob), rank,
                                    static_cast<unsigned long long>(peers[rank].name));
  const int socket = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  ASSERT_EQ(::connect(socket, reinterpret_cast<sockaddr*>(&address),
                      socklen_t(offsetof(sockaddr_un, sun_path) + 1 + written)),
            0)
      << std::strerror(errno);
  iovec data{const_cast<char*>(bytes.data()), bytes.size()};
  std::vector<char> control(CMSG_SPACE(sizeof(int) * std::max<size_t>(fds.size(), 1)));
  msghdr message{};
  message.msg_iov = &data;
  message.msg_iovlen = 1;
  if (!fds.empty()) {
    message.msg_control = control.data();
    message.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(header), fds.data(), sizeof(int) * fds.size());
  }
  ASSERT_GE(::sendmsg(socket, &message, MSG_NOSIGNAL), 0) << std::strerror(errno);
  ::close(socket);
}

// A note as the mailbox lays it out: rank, 4 reserved bytes, tag, note key.
std::string note(int32_t rank, uint64_t tag, const NoteKey& key) {
  std::string bytes(32, '\0');
  std::memcpy(bytes.data(), &rank, 4);
  std::memcpy(bytes.data() + 8, &tag, 8);
  std::memcpy(bytes.data() + 16, key.data(), key.size());
  return bytes;
}

TEST(FdPassing, ADescriptorReachesTheRankItIsFor) {
  const auto peers = twoRanks();
  FdMailbox zero(kJob, 0, peers), one(kJob, 1, peers);
  const int fd = memfdHolding("the job's memory");
  zero.send(1, 7, fd, Deadline(5000));
  const int got = one.receive(0, 7, Deadline(5000));
  EXPECT_EQ(contentOf(got), "the job's memory");
  EXPECT_EQ(one.refusedNotes(), 0u);
  ::close(got);
  ::close(fd);
}

TEST(FdPassing, ForgedAndMalformedNotesAreRefusedAndEveryDescriptorTheyCarryIsClosed) {
  const auto peers = twoRanks();
  FdMailbox one(kJob, 1, peers);
  const int before = openDescriptors();
  const int intruder = memfdHolding("intruder");
  NoteKey wrongKey = peers[0].noteKey;
  wrongKey[3] ^= 1;
  postRaw(peers, 1, note(0, 7, wrongKey), {intruder});                   // the wrong note key
  postRaw(peers, 1, note(5, 7, peers[0].noteKey), {intruder});           // no such rank
  postRaw(peers, 1, note(0, 7, peers[0].noteKey), {intruder, intruder});  // two descriptors
  postRaw(peers, 1, note(0, 7, peers[0].noteKey).substr(0, 12), {intruder});  // a short note
  postRaw(peers, 1, note(0, 7, peers[0].noteKey) + "x", {intruder});          // a long one
  postRaw(peers, 1, note(0, 7, peers[0].noteKey), {});                        // none at all
  try {
    one.receive(0, 7, Deadline(300));
    FAIL() << "a forged note was taken";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kTimeout);
    EXPECT_NE(std::string(e.what()).find("(6 notes were refused: see the warnings)"), std::string::npos) << e.what();
  }
  EXPECT_EQ(one.refusedNotes(), 6u);
  ::close(intruder);
  EXPECT_EQ(openDescriptors(), before);  // nothing the notes carried stayed open
}

TEST(FdPassing, ANoteFromAProcessThatIsNotTheRankIsRefused) {
  auto peers = twoRanks();
  peers[0].pid = ::getpid() + 1;  // rank 0 said it is another process: this one's notes are forged
  FdMailbox one(kJob, 1, peers);
  postRaw(peers, 1, note(0, 7, peers[0].noteKey), {memfdHolding("x")});
  EXPECT_THROW(one.receive(0, 7, Deadline(300)), Error);
  EXPECT_EQ(one.refusedNotes(), 1u);
}

TEST(FdPassing, ADescriptorIsNotSentToASocketThatIsNotTheRanks) {
  auto peers = twoRanks();
  peers[1].pid = ::getpid() + 1;  // rank 1 is another process: the listener found here is not it
  FdMailbox zero(kJob, 0, peers), squatter(kJob, 1, peers);
  const int fd = memfdHolding("the job's memory");
  try {
    zero.send(1, 7, fd, Deadline(2000));
    FAIL() << "a descriptor went to a socket of another process";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kTransport);
    EXPECT_NE(std::string(e.what()).find("the socket of rank 1 is held by process " + std::to_string(::getpid())),
              std::string::npos)
        << e.what();
  }
  ::close(fd);
}

}  // namespace
}  // namespace loom
