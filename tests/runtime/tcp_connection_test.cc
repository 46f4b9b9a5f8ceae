// The TCP transport without a GPU: ranks as threads on loopback, host memory. Some tests play one
// side of the protocol by hand (tcp_connection.hpp): a peer that never answers, damaged frames,
// strangers that connect to a listener during setup.

#include "tcp_connection.hpp"

#include <dirent.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "communicator_test_util.hpp"
#include "gpu.hpp"
#include "loom/error.hpp"
#include "loom/gpu_buffer.hpp"
#include "memory_table.hpp"
#include "registered_memory_impl.hpp"
#include "setup_tags.hpp"

namespace loom {
namespace {

using testing::RankOutcome;
using testing::runCommunicators;

void expectAllOk(const std::vector<RankOutcome>& outcomes) {
  for (size_t r = 0; r < outcomes.size(); ++r)
    EXPECT_TRUE(outcomes[r].ok) << "rank " << r << ": " << outcomes[r].message;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::vector<uint8_t> randomBytes(uint64_t seed, uint64_t bytes) {
  std::mt19937_64 generator(seed);
  std::vector<uint8_t> out(bytes);
  for (uint64_t i = 0; i < bytes; i += 8) {
    const uint64_t word = generator();
    std::memcpy(out.data() + i, &word, std::min<uint64_t>(8, bytes - i));
  }
  return out;
}

// The index of the first byte that differs, or -1 (a whole-buffer EXPECT_EQ would print megabytes).
int64_t firstDifference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  if (a.size() != b.size()) return 0;
  auto [left, right] = std::mismatch(a.begin(), a.end(), b.begin());
  return left == a.end() ? -1 : left - a.begin();
}

// Runs `call` and expects a loom::Error of `category` whose message holds every one of `parts`.
template <typename Call>
void expectError(Call&& call, ErrorCategory category, const std::vector<std::string>& parts) {
  try {
    call();
    ADD_FAILURE() << "no error; expected one mentioning '" << parts.front() << "'";
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), category) << error.what();
    for (const std::string& part : parts) EXPECT_TRUE(contains(error.what(), part)) << error.what();
  }
}

size_t countEntries(const char* directory) {
  size_t count = 0;
  DIR* dir = ::opendir(directory);
  while (dir != nullptr && ::readdir(dir) != nullptr) ++count;
  if (dir != nullptr) ::closedir(dir);
  return count;
}

// The process's threads, once none is on its way out: a joined thread can stay listed in
// /proc/self/task for a moment after pthread_join returns, so one reading may count it.
size_t settledThreadCount() {
  size_t count = countEntries("/proc/self/task");
  for (int i = 0; i < 100; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const size_t now = countEntries("/proc/self/task");
    if (now == count) return count;
    count = now;
  }
  return count;
}

// Two connected loopback sockets: {the connecting end, the accepted end}.
std::pair<net::Socket, net::Socket> loopbackPair() {
  const net::Socket listener = net::Socket::listen(net::SocketAddress::resolve("127.0.0.1", 0, "test"));
  const Deadline deadline(2000);
  net::Socket connecting = net::Socket::connect(listener.localAddress(), deadline, false, "test listener");
  while (true) {
    pollfd entry{listener.fd(), POLLIN, 0};
    if (::poll(&entry, 1, deadline.remainingMs()) <= 0) throw Error(ErrorCategory::kTimeout, "loopback accept");
    net::Socket accepted = listener.accept(nullptr);
    if (accepted.valid()) return {std::move(connecting), std::move(accepted)};
  }
}

// True once the peer has closed `socket` (reads the end of the stream) within `timeoutMs`.
bool closesWithin(const net::Socket& socket, int64_t timeoutMs) {
  const Deadline deadline(timeoutMs);
  std::array<uint8_t, 256> sink{};
  while (!deadline.expired()) {
    std::optional<size_t> got = socket.readSome(sink.data(), sink.size(), "test peer");
    if (got && *got == 0) return true;
    if (!got) {
      pollfd entry{socket.fd(), POLLIN, 0};
      ::poll(&entry, 1, deadline.remainingMs());
    }
  }
  return false;
}

void sendFrame(const net::Socket& socket, const tcp::FrameHeader& header) {
  const std::vector<uint8_t> bytes = tcp::encodeFrame(header);
  socket.sendAll(bytes.data(), bytes.size(), Deadline(2000), "connection under test");
}

tcp::FrameHeader receiveFrame(const net::Socket& socket) {
  std::array<uint8_t, tcp::kFrameHeaderBytes> bytes{};
  socket.recvAll(bytes.data(), bytes.size(), Deadline(2000), "connection under test");
  return tcp::decodeFrame(bytes);
}

uint64_t receiveAck(const net::Socket& socket) {
  uint64_t ack = 0;
  socket.recvAll(&ack, sizeof(ack), Deadline(2000), "connection under test");
  return ack;  // little-endian on the wire and on this host
}

// A registration of rank `owner`'s memory as a peer would receive it, without that peer.
RegisteredMemory remoteRegistration(uint64_t id, uint64_t bytes, int owner) {
  auto impl = std::make_shared<RegisteredMemory::Impl>();
  impl->id = id;
  impl->ownerRank = owner;
  impl->bytes = bytes;
  impl->transports = Transport::kTcp;
  return RegisteredMemory(impl);
}

TEST(TcpConnection, WritesLandExactlyWhereAimed) {
  constexpr uint64_t kBytes = uint64_t{20} << 20;
  struct Op {
    uint64_t dst, src, bytes;
  };
  const std::vector<Op> ops = {
      {0, 0, 1},
      {7, 3, 1000},
      {4096, 100, 0},
      {5000, 5001, 4099},
      {6000, uint64_t{1} << 20, 777},            // overlaps the one before: the later write wins
      {65537, 12345, (uint64_t{8} << 20) + 13},  // more than 8 MiB: several pieces
      {kBytes - 3, kBytes - 3, 3},               // ends exactly at the end
  };
  auto outcomes = runCommunicators(2, [&](Communicator& comm) {
    const int rank = comm.rank();
    const int peer = 1 - rank;
    std::vector<uint8_t> src = randomBytes(100 + rank, kBytes);
    std::vector<uint8_t> dst(kBytes, 0xa5);
    std::vector<uint64_t> flags(2, 0);
    RegisteredMemory srcMemory = comm.registerMemory(src.data(), kBytes, Transport::kTcp);
    RegisteredMemory dstMemory = comm.registerMemory(dst.data(), kBytes, Transport::kTcp);
    RegisteredMemory flagMemory = comm.registerMemory(flags.data(), 16, Transport::kTcp);
    comm.sendMemory(dstMemory, peer, 1);
    comm.sendMemory(flagMemory, peer, 2);
    RegisteredMemory peerDst = comm.recvMemory(peer, 1);
    RegisteredMemory peerFlags = comm.recvMemory(peer, 2);
    std::shared_ptr<Connection> connection = comm.connect(peer, Transport::kTcp, 10);
    EXPECT_EQ(connection->transport(), Transport::kTcp);
    EXPECT_EQ(connection->localRank(), rank);
    EXPECT_EQ(connection->remoteRank(), peer);
    for (const Op& op : ops) connection->write(peerDst, op.dst, srcMemory, op.src, op.bytes);
    connection->writeValue(peerFlags, 8, 0x0123456789abcdefULL + rank);
    connection->flush(5000);
    comm.bootstrap().barrier();

    std::vector<uint8_t> expected(kBytes, 0xa5);
    const std::vector<uint8_t> peerSrc = randomBytes(100 + peer, kBytes);
    for (const Op& op : ops) std::memcpy(expected.data() + op.dst, peerSrc.data() + op.src, op.bytes);
    EXPECT_EQ(firstDifference(dst, expected), -1);
    EXPECT_EQ(flags[0], 0u);
    EXPECT_EQ(flags[1], 0x0123456789abcdefULL + peer);
    comm.bootstrap().barrier();
  });
  expectAllOk(outcomes);
}

TEST(TcpConnection, FourRanksConnectToEveryOtherRankAtOnce) {
  constexpr int kWorld = 4;
  constexpr uint64_t kSlot = 100003;  // odd, so that no slot starts aligned
  auto outcomes = runCommunicators(kWorld, [&](Communicator& comm) {
    const int rank = comm.rank();
    std::vector<uint8_t> src = randomBytes(200 + rank, kSlot);
    std::vector<uint8_t> dst(kSlot * kWorld, 0xa5);
    std::vector<uint64_t> flags(kWorld, 0);
    RegisteredMemory srcMemory = comm.registerMemory(src.data(), kSlot, Transport::kTcp);
    RegisteredMemory dstMemory = comm.registerMemory(dst.data(), dst.size(), Transport::kTcp);
    RegisteredMemory flagMemory = comm.registerMemory(flags.data(), kWorld * 8, Transport::kTcp);
    std::vector<RegisteredMemory> peerDst(kWorld), peerFlags(kWorld);
    std::vector<std::shared_ptr<Connection>> connections(kWorld);
    for (int peer = 0; peer < kWorld; ++peer) {
      if (peer == rank) continue;
      comm.sendMemory(dstMemory, peer, 1);
      comm.sendMemory(flagMemory, peer, 2);
    }
    for (int peer = 0; peer < kWorld; ++peer) {
      if (peer == rank) continue;
      peerDst[peer] = comm.recvMemory(peer, 1);
      peerFlags[peer] = comm.recvMemory(peer, 2);
      // The same tag on both sides of a pair, different for every pair.
      connections[peer] =
          comm.connect(peer, Transport::kTcp, 100 + std::min(rank, peer) * kWorld + std::max(rank, peer));
    }
    for (int peer = 0; peer < kWorld; ++peer) {
      if (peer == rank) continue;
      connections[peer]->write(peerDst[peer], rank * kSlot, srcMemory, 0, kSlot);
      connections[peer]->writeValue(peerFlags[peer], rank * 8, rank + 1);
    }
    for (int peer = 0; peer < kWorld; ++peer) {
      if (peer != rank) connections[peer]->flush(5000);
    }
    comm.bootstrap().barrier();
    for (int from = 0; from < kWorld; ++from) {
      std::vector<uint8_t> slot(dst.begin() + from * kSlot, dst.begin() + (from + 1) * kSlot);
      const std::vector<uint8_t> expected =
          from == rank ? std::vector<uint8_t>(kSlot, 0xa5) : randomBytes(200 + from, kSlot);
      EXPECT_EQ(firstDifference(slot, expected), -1) << "slot of rank " << from;
      EXPECT_EQ(flags[from], from == rank ? 0u : uint64_t(from + 1)) << "flag of rank " << from;
    }
    comm.bootstrap().barrier();
  });
  expectAllOk(outcomes);
}

TEST(TcpConnection, ValueIsSeenOnlyAfterTheWritesBeforeIt) {
  constexpr uint64_t kBytes = uint64_t{16} << 20;
  constexpr int kRounds = 4;
  auto outcomes = runCommunicators(2, [&](Communicator& comm) {
    std::vector<uint8_t> data(kBytes, 0);
    std::vector<uint64_t> flag(1, 0);
    RegisteredMemory dataMemory = comm.registerMemory(data.data(), kBytes, Transport::kTcp);
    RegisteredMemory flagMemory = comm.registerMemory(flag.data(), 8, Transport::kTcp);
    comm.sendMemory(dataMemory, 1 - comm.rank(), 1);
    comm.sendMemory(flagMemory, 1 - comm.rank(), 2);
    RegisteredMemory peerData = comm.recvMemory(1 - comm.rank(), 1);
    RegisteredMemory peerFlag = comm.recvMemory(1 - comm.rank(), 2);
    std::shared_ptr<Connection> connection = comm.connect(1 - comm.rank(), Transport::kTcp, 3);
    for (int round = 0; round < kRounds; ++round) {
      const std::vector<uint8_t> expected = randomBytes(300 + round, kBytes);
      if (comm.rank() == 0) {
        // No flush between the data and the value: only the transport's ordering protects the reader.
        std::memcpy(data.data(), expected.data(), kBytes);
        connection->write(peerData, 0, dataMemory, 0, kBytes);
        connection->writeValue(peerFlag, 0, round + 1);
        connection->flush(5000);
      } else {
        const Deadline deadline(5000);
        std::atomic_ref<uint64_t> word(flag[0]);
        while (word.load(std::memory_order_acquire) != uint64_t(round + 1) && !deadline.expired()) {
          std::this_thread::yield();
        }
        ASSERT_EQ(word.load(std::memory_order_acquire), uint64_t(round + 1)) << "round " << round;
        EXPECT_EQ(firstDifference(data, expected), -1) << "round " << round;
      }
      comm.bootstrap().barrier();  // the reader has checked before the next round overwrites
    }
  });
  expectAllOk(outcomes);
}

TEST(TcpConnection, RejectsBadRangesAndUnalignedValuesAndStaysUsable) {
  auto outcomes = runCommunicators(2, [&](Communicator& comm) {
    const int peer = 1 - comm.rank();
    std::vector<uint8_t> src = randomBytes(400 + comm.rank(), 4096);
    std::vector<uint8_t> dst(4096, 0);
    RegisteredMemory srcMemory = comm.registerMemory(src.data(), 4096, Transport::kTcp);
    RegisteredMemory dstMemory = comm.registerMemory(dst.data(), 4096, Transport::kTcp);
    comm.sendMemory(dstMemory, peer, 1);
    RegisteredMemory peerDst = comm.recvMemory(peer, 1);
    std::shared_ptr<Connection> connection = comm.connect(peer, Transport::kTcp, 4);
    const std::string where =
        "tcp connection from rank " + std::to_string(comm.rank()) + " to rank " + std::to_string(peer);
    const auto invalid = ErrorCategory::kInvalidArgument;
    expectError([&] { connection->write(peerDst, 4000, srcMemory, 0, 97); }, invalid, {where, "dst range"});
    expectError([&] { connection->write(peerDst, 0, srcMemory, 4000, 97); }, invalid, {where, "src range"});
    expectError([&] { connection->write(peerDst, UINT64_MAX, srcMemory, 0, 2); }, invalid, {"dst range"});
    expectError([&] { connection->write(peerDst, 0, srcMemory, 8, UINT64_MAX); }, invalid, {"dst range"});
    expectError([&] { connection->write(dstMemory, 0, srcMemory, 0, 8); }, invalid, {"not to the peer"});
    expectError([&] { connection->writeValue(peerDst, 4, 1); }, invalid, {where, "writeValue", "8-byte aligned"});
    expectError([&] { connection->writeValue(peerDst, 4096, 1); }, invalid, {"8-byte aligned"});
    // Refused requests send nothing: the stream is intact.
    connection->write(peerDst, 0, srcMemory, 0, 4096);
    connection->flush(5000);
    comm.bootstrap().barrier();
    EXPECT_EQ(firstDifference(dst, randomBytes(400 + peer, 4096)), -1);
    comm.bootstrap().barrier();
  });
  expectAllOk(outcomes);
}

TEST(TcpConnection, FlushFailsWhenThePeerDestroysItsConnection) {
  auto outcomes = runCommunicators(2, [&](Communicator& comm) {
    const int peer = 1 - comm.rank();
    std::vector<uint8_t> buffer(256, 0);
    RegisteredMemory memory = comm.registerMemory(buffer.data(), buffer.size(), Transport::kTcp);
    comm.sendMemory(memory, peer, 1);
    RegisteredMemory peerMemory = comm.recvMemory(peer, 1);
    std::shared_ptr<Connection> connection = comm.connect(peer, Transport::kTcp, 5);
    if (comm.rank() == 1) connection.reset();
    comm.bootstrap().barrier();
    if (comm.rank() == 0) {
      const auto transport = ErrorCategory::kTransport;
      expectError(
          [&] {
            connection->write(peerMemory, 0, memory, 0, 256);
            connection->flush(5000);
          },
          transport, {"tcp connection from rank 0 to rank 1", "rank 1 closed its connection"});
      // Unusable from then on, at once.
      expectError([&] { connection->writeValue(peerMemory, 0, 1); }, transport, {"rank 1 closed its connection"});
      expectError([&] { connection->flush(5000); }, transport, {"rank 1 closed its connection"});
    }
    comm.bootstrap().barrier();
  });
  expectAllOk(outcomes);
}

TEST(TcpConnection, FlushFailsWhenThePeerExits) {
  auto outcomes = runCommunicators(2, [&](Communicator& comm) {
    std::vector<uint8_t> buffer(256, 0);
    RegisteredMemory memory = comm.registerMemory(buffer.data(), buffer.size(), Transport::kTcp);
    if (comm.rank() == 1) {
      comm.sendMemory(memory, 0, 1);
      comm.connect(0, Transport::kTcp, 6);
      return;  // the connection, the communicator and the bootstrap go
    }
    RegisteredMemory peerMemory = comm.recvMemory(1, 1);
    std::shared_ptr<Connection> connection = comm.connect(1, Transport::kTcp, 6);
    const Deadline deadline(5000);
    std::optional<Error> failure;
    while (!failure && !deadline.expired()) {
      try {
        connection->write(peerMemory, 0, memory, 0, 256);
        connection->flush(5000);
      } catch (const Error& error) {
        failure = error;
      }
    }
    ASSERT_TRUE(failure.has_value()) << "writes to a rank that exited kept succeeding";
    EXPECT_EQ(failure->category(), ErrorCategory::kTransport) << failure->what();
    EXPECT_TRUE(contains(failure->what(), "rank 1 closed its connection")) << failure->what();
  });
  expectAllOk(outcomes);
}

TEST(TcpConnection, WriteToARegistrationThePeerReleasedEndsTheConnection) {
  ::testing::internal::CaptureStderr();
  auto outcomes = runCommunicators(2, [&](Communicator& comm) {
    std::vector<uint8_t> buffer(256, 0);
    RegisteredMemory memory = comm.registerMemory(buffer.data(), buffer.size(), Transport::kTcp);
    RegisteredMemory released = comm.registerMemory(buffer.data(), buffer.size(), Transport::kTcp);
    comm.sendMemory(released, 1 - comm.rank(), 1);
    RegisteredMemory peerReleased = comm.recvMemory(1 - comm.rank(), 1);
    std::shared_ptr<Connection> connection = comm.connect(1 - comm.rank(), Transport::kTcp, 7);
    if (comm.rank() == 1) released = RegisteredMemory();  // gone from rank 1's memory table
    comm.bootstrap().barrier();
    if (comm.rank() == 0) {
      expectError(
          [&] {
            connection->write(peerReleased, 0, memory, 0, 256);
            connection->flush(5000);
          },
          ErrorCategory::kTransport, {"tcp connection from rank 0 to rank 1", "rank 1 closed its connection"});
    }
    comm.bootstrap().barrier();  // rank 1's connection lives until here: the bad frame closed the stream
  });
  const std::string log = ::testing::internal::GetCapturedStderr();
  expectAllOk(outcomes);
  EXPECT_TRUE(contains(log, "tcp connection from rank 0 to rank 1: bad frame from rank 0: write to registration"))
      << log;
  EXPECT_TRUE(contains(log, "which this process does not have; closing the connection")) << log;
}

// Sets SO_LINGER to 0 and closes: the peer's end sees a reset rather than the end of the stream.
void resetAndClose(net::Socket& socket) {
  const linger now{1, 0};
  ::setsockopt(socket.fd(), SOL_SOCKET, SO_LINGER, &now, sizeof(now));
  socket.reset();
}

// What a connection's failure sink was told, from any thread.
struct ToldFailures {
  std::mutex mutex;
  std::vector<std::string> told;
  Connection::FailureSink sink() {
    return [this](const std::string& why) {
      std::lock_guard lock(mutex);
      told.push_back(why);
    };
  }
  std::vector<std::string> after(std::chrono::milliseconds wait) {
    std::this_thread::sleep_for(wait);
    std::lock_guard lock(mutex);
    return told;
  }
};

// The link's failures reach the sink once, with why; a peer that says goodbye before it closes is no
// failure, and neither side's close after a goodbye is.
TEST(TcpConnection, ALinkFailureIsToldOnceAndAnOrderlyCloseIsNot) {
  std::vector<uint8_t> buffer(64, 0);
  const RegisteredMemory dst = remoteRegistration(42, 64, 0);
  {
    auto [outgoing, peerIn] = loopbackPair();
    auto [peerOut, incoming] = loopbackPair();
    ToldFailures failures;
    std::shared_ptr<Connection> connection = tcp::makeConnection(1, 0, std::move(outgoing), std::move(incoming), 2000);
    connection->reportFailuresTo(failures.sink());
    sendFrame(peerOut, {tcp::FrameKind::kGoodbye, 0, 0, 0});
    peerOut.reset();
    peerIn.reset();
    EXPECT_THROW(connection->writeValue(dst, 0, 1), Error);  // the peer is gone, on purpose
    EXPECT_TRUE(failures.after(std::chrono::milliseconds(100)).empty());
  }
  {
    // A stream that ends without a goodbye: its process died, or the link was cut.
    auto [outgoing, peerIn] = loopbackPair();
    auto [peerOut, incoming] = loopbackPair();
    ToldFailures failures;
    std::shared_ptr<Connection> connection = tcp::makeConnection(1, 0, std::move(outgoing), std::move(incoming), 2000);
    connection->reportFailuresTo(failures.sink());
    peerOut.reset();
    std::vector<std::string> told = failures.after(std::chrono::milliseconds(100));
    ASSERT_EQ(told.size(), 1u);
    EXPECT_TRUE(contains(told[0],
                         "tcp connection from rank 0 to rank 1: receiving: the stream from rank 0 ended "
                         "without a goodbye"))
        << told[0];
  }
  {
    // This side's goodbye, as it goes: the peer reads it last.
    auto [outgoing, peerIn] = loopbackPair();
    auto [peerOut, incoming] = loopbackPair();
    tcp::makeConnection(1, 0, std::move(outgoing), std::move(incoming), 2000).reset();
    EXPECT_EQ(receiveFrame(peerIn).kind, tcp::FrameKind::kGoodbye);
    EXPECT_TRUE(closesWithin(peerIn, 2000));
  }
  {
    // A bad frame: the receiving side refuses it; the failed write after it is not told again.
    auto [outgoing, peerIn] = loopbackPair();
    auto [peerOut, incoming] = loopbackPair();
    ToldFailures failures;
    std::shared_ptr<Connection> connection = tcp::makeConnection(1, 0, std::move(outgoing), std::move(incoming), 2000);
    connection->reportFailuresTo(failures.sink());
    ::testing::internal::CaptureStderr();
    sendFrame(peerOut, {tcp::FrameKind::kWrite, uint64_t{1} << 60, 0, 8});
    EXPECT_TRUE(closesWithin(peerOut, 2000));
    ::testing::internal::GetCapturedStderr();
    peerIn.reset();
    EXPECT_THROW(
        {
          connection->writeValue(dst, 0, 1);
          connection->flush(2000);
        },
        Error);
    const std::vector<std::string> told = failures.after(std::chrono::milliseconds(0));
    ASSERT_EQ(told.size(), 1u);
    EXPECT_TRUE(contains(told[0], "tcp connection from rank 0 to rank 1: bad frame from rank 0: write to registration"))
        << told[0];
  }
  {
    // A reset of the incoming stream, with the sink set after it: told then.
    auto [outgoing, peerIn] = loopbackPair();
    auto [peerOut, incoming] = loopbackPair();
    ToldFailures failures;
    std::shared_ptr<Connection> connection = tcp::makeConnection(1, 0, std::move(outgoing), std::move(incoming), 2000);
    resetAndClose(peerOut);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    connection->reportFailuresTo(failures.sink());
    const std::vector<std::string> told = failures.after(std::chrono::milliseconds(0));
    ASSERT_EQ(told.size(), 1u);
    EXPECT_TRUE(contains(told[0], "receiving: the stream from rank 0 was reset")) << told[0];
  }
  {
    // A reset of the outgoing stream: the next write says so.
    auto [outgoing, peerIn] = loopbackPair();
    auto [peerOut, incoming] = loopbackPair();
    ToldFailures failures;
    std::shared_ptr<Connection> connection = tcp::makeConnection(1, 0, std::move(outgoing), std::move(incoming), 2000);
    connection->reportFailuresTo(failures.sink());
    resetAndClose(peerIn);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_THROW(connection->writeValue(dst, 0, 1), Error);
    const std::vector<std::string> told = failures.after(std::chrono::milliseconds(0));
    ASSERT_EQ(told.size(), 1u);
    EXPECT_TRUE(contains(told[0], "tcp connection from rank 1 to rank 0: writeValue: rank 0 closed its connection"))
        << told[0];
  }
}

// Through a communicator, a link that fails ends the waits on its peer at once (their timeout is 60 s),
// and the record names the link's failure: on the side that refused a bad frame, and on the side whose
// flush then failed.
TEST(TcpConnection, AFailedLinkEndsTheWaitsOnItsPeerAtOnce) {
  ::testing::internal::CaptureStderr();
  auto outcomes = runCommunicators(2, [&](Communicator& comm) {
    const int peer = 1 - comm.rank();
    std::vector<uint8_t> buffer(256, 0);
    RegisteredMemory memory = comm.registerMemory(buffer.data(), buffer.size(), Transport::kTcp);
    RegisteredMemory released = comm.registerMemory(buffer.data(), buffer.size(), Transport::kTcp);
    comm.sendMemory(released, peer, 1);
    RegisteredMemory peerReleased = comm.recvMemory(peer, 1);
    std::shared_ptr<Connection> connection = comm.connect(peer, Transport::kTcp, 9);
    if (comm.rank() == 1) released = RegisteredMemory();
    comm.bootstrap().barrier();
    if (comm.rank() == 0) {
      connection->write(peerReleased, 0, memory, 0, 256);  // rank 1 refuses it and closes the stream
      EXPECT_THROW(connection->flush(5000), Error);
    }
    const auto start = std::chrono::steady_clock::now();
    const std::string report = testing::endOfAWaitOn(comm, peer, 2);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
    const std::string expected =
        comm.rank() == 0
            ? "rank 0, op 1: semaphore wait on channel 2 ended: rank 1 is unreachable (tcp connection from rank 0 to "
              "rank 1: "
              "flush"
            : "rank 1, op 1: semaphore wait on channel 2 ended: rank 0 is unreachable (tcp connection from rank 0 to "
              "rank 1: bad "
              "frame from rank 0: write to registration";
    EXPECT_TRUE(contains(report, expected)) << report;
    // What an asynchronous error says (Executor::asyncError, ncclCommGetAsyncError).
    const std::string links = comm.deviceDiagnostics().failedLinks().value_or("");
    EXPECT_TRUE(
        contains(links, "rank " + std::to_string(peer) + " is unreachable (tcp connection from rank 0 to rank 1"))
        << links;
    comm.bootstrap().barrier();
  });
  ::testing::internal::GetCapturedStderr();
  expectAllOk(outcomes);
}

TEST(TcpConnection, FlushTimesOutWhileThePeerIsSilentAndCompletesWhenItAnswers) {
  auto [outgoing, peerIn] = loopbackPair();
  auto [peerOut, incoming] = loopbackPair();
  std::shared_ptr<Connection> connection = tcp::makeConnection(0, 1, std::move(outgoing), std::move(incoming), 2000);
  connection->flush(0);  // nothing posted: nothing to wait for
  const RegisteredMemory dst = remoteRegistration(42, 64, 1);
  connection->writeValue(dst, 8, 7);
  connection->writeValue(dst, 16, 9);
  expectError([&] { connection->flush(100); }, ErrorCategory::kTimeout,
              {"tcp connection from rank 0 to rank 1: flush", "rank 1 has not acknowledged 2 of 2 operations"});

  // What went on the wire: both values, then one flush asking for both.
  const tcp::FrameHeader first = receiveFrame(peerIn);
  EXPECT_EQ(first.kind, tcp::FrameKind::kValue);
  EXPECT_EQ(first.id, 42u);
  EXPECT_EQ(first.offset, 8u);
  EXPECT_EQ(first.argument, 7u);
  EXPECT_EQ(receiveFrame(peerIn).argument, 9u);
  const tcp::FrameHeader flush = receiveFrame(peerIn);
  EXPECT_EQ(flush.kind, tcp::FrameKind::kFlush);
  EXPECT_EQ(flush.argument, 2u);

  // An ack of the first only is not enough; the second completes the flush (which sends no new frame).
  const uint64_t one = 1, two = 2;
  peerIn.sendAll(&one, 8, Deadline(2000), "connection under test");
  expectError([&] { connection->flush(100); }, ErrorCategory::kTimeout, {"has not acknowledged 1 of 2 operations"});
  peerIn.sendAll(&two, 8, Deadline(2000), "connection under test");
  connection->flush(2000);
  pollfd entry{peerIn.fd(), POLLIN, 0};
  EXPECT_EQ(::poll(&entry, 1, 0), 0) << "a flush with nothing outstanding sent something";
}

TEST(TcpConnection, DamagedFramesAreRefusedAndCloseTheStream) {
  std::vector<uint8_t> buffer(64, 0x11);
  auto [id, entry] =
      MemoryTable::process().add({buffer.data(), buffer.size(), MemoryLocation::kHost, -1, Transport::kTcp});
  auto [ibOnly, ibEntry] =
      MemoryTable::process().add({buffer.data(), buffer.size(), MemoryLocation::kHost, -1, Transport::kIb});
  const uint64_t unknownId = uint64_t{1} << 60;
  struct Case {
    tcp::FrameHeader frame;
    std::string logged;
  };
  const std::vector<Case> cases = {
      {{tcp::FrameKind::kWrite, id, 60, 8}, "range [60, 60 + 8) is outside its 64 bytes"},
      {{tcp::FrameKind::kWrite, id, UINT64_MAX, 2}, "is outside its 64 bytes"},
      {{tcp::FrameKind::kWrite, unknownId, 0, 8}, "which this process does not have"},
      {{tcp::FrameKind::kWrite, ibOnly, 0, 8}, "which is not registered for tcp"},
      {{tcp::FrameKind::kValue, id, 4, 1}, "not 8-byte aligned"},
      {{tcp::FrameKind::kValue, id, 64, 1}, "is outside its 64 bytes"},
      {{tcp::FrameKind(9), id, 0, 0}, "unknown frame kind 9"},
  };
  for (const Case& test : cases) {
    SCOPED_TRACE(test.logged);
    std::fill(buffer.begin(), buffer.end(), 0x11);
    auto [outgoing, peerIn] = loopbackPair();
    auto [peerOut, incoming] = loopbackPair();
    ::testing::internal::CaptureStderr();
    {
      // This test plays rank 0, sending to rank 1's receiving side.
      std::shared_ptr<Connection> connection =
          tcp::makeConnection(1, 0, std::move(outgoing), std::move(incoming), 2000);
      sendFrame(peerOut, {tcp::FrameKind::kWrite, id, 2, 5});
      peerOut.sendAll("hello", 5, Deadline(2000), "connection under test");
      sendFrame(peerOut, {tcp::FrameKind::kFlush, 0, 0, 1});
      EXPECT_EQ(receiveAck(peerOut), 1u);
      sendFrame(peerOut, test.frame);
      EXPECT_TRUE(closesWithin(peerOut, 2000));
    }
    const std::string log = ::testing::internal::GetCapturedStderr();
    EXPECT_TRUE(contains(log, "tcp connection from rank 0 to rank 1: bad frame from rank 0: ")) << log;
    EXPECT_TRUE(contains(log, test.logged)) << log;
    std::vector<uint8_t> expected(64, 0x11);
    std::memcpy(expected.data() + 2, "hello", 5);
    EXPECT_EQ(firstDifference(buffer, expected), -1);
  }
}

TEST(TcpConnection, SetupRefusesStrangersAndWaitsForThePeer) {
  constexpr uint64_t kTag = 8;
  ::testing::internal::CaptureStderr();
  auto outcomes = runCommunicators(2, [&](Communicator& comm) {
    const int peer = 1 - comm.rank();
    std::vector<uint8_t> src = randomBytes(500 + comm.rank(), 1000);
    std::vector<uint8_t> dst(1000, 0);
    RegisteredMemory srcMemory = comm.registerMemory(src.data(), src.size(), Transport::kTcp);
    RegisteredMemory dstMemory = comm.registerMemory(dst.data(), dst.size(), Transport::kTcp);
    comm.sendMemory(dstMemory, peer, 1);
    RegisteredMemory peerDst = comm.recvMemory(peer, 1);
    std::shared_ptr<Connection> connection;
    if (comm.rank() == 0) {
      connection = comm.connect(1, Transport::kTcp, kTag);
    } else {
      // Rank 1 plays its side by hand, and first sends strangers to rank 0's listener.
      const uint64_t wireTag = setupTag(SetupPurpose::kConnection, kTag, "test");
      const tcp::Endpoint theirs = tcp::decodeEndpoint(comm.bootstrap().recv(0, wireTag), "test");
      const Deadline deadline(5000);
      net::Socket wrongToken = net::Socket::connect(theirs.listener, deadline, false, "rank 0");
      const std::vector<uint8_t> badHello = tcp::encodeHello(tcp::randomToken(), 1, 0);
      wrongToken.sendAll(badHello.data(), badHello.size(), deadline, "rank 0");
      net::Socket::connect(theirs.listener, deadline, false, "rank 0");  // hangs up at once
      net::Socket notLoom = net::Socket::connect(theirs.listener, deadline, false, "rank 0");
      const std::string http = "GET / HTTP/1.1\r\nHost: loom.example\r\n\r\n";
      notLoom.sendAll(http.data(), http.size(), deadline, "rank 0");

      const net::Socket listener = net::Socket::listen(net::SocketAddress::resolve("127.0.0.1", 0, "test"));
      const tcp::Endpoint mine{listener.localAddress(), tcp::randomToken()};
      comm.bootstrap().send(0, wireTag, tcp::encodeEndpoint(mine));
      net::Socket outgoing = net::Socket::connect(theirs.listener, deadline, false, "rank 0");
      const std::vector<uint8_t> hello = tcp::encodeHello(mine.token, 1, 0);
      outgoing.sendAll(hello.data(), hello.size(), deadline, "rank 0");
      pollfd entry{listener.fd(), POLLIN, 0};
      ASSERT_EQ(::poll(&entry, 1, deadline.remainingMs()), 1) << "rank 0 did not connect";
      net::Socket incoming = listener.accept(nullptr);
      ASSERT_TRUE(incoming.valid());
      std::vector<uint8_t> theirHello(tcp::kHelloBytes);
      incoming.recvAll(theirHello.data(), theirHello.size(), deadline, "rank 0");
      EXPECT_EQ(theirHello, tcp::encodeHello(theirs.token, 0, 1));
      connection = tcp::makeConnection(1, 0, std::move(outgoing), std::move(incoming), 5000);
    }
    connection->write(peerDst, 0, srcMemory, 0, 1000);
    connection->flush(5000);
    comm.bootstrap().barrier();
    EXPECT_EQ(firstDifference(dst, randomBytes(500 + peer, 1000)), -1);
    comm.bootstrap().barrier();
  });
  const std::string log = ::testing::internal::GetCapturedStderr();
  expectAllOk(outcomes);
  EXPECT_TRUE(contains(log, "tcp connection from rank 0 to rank 1: setup: refused a connection from 127.0.0.1:"))
      << log;
  EXPECT_TRUE(contains(log, "(wrong token); still waiting for rank 1")) << log;
  EXPECT_TRUE(contains(log, "(not a Loom TCP hello)")) << log;
}

TEST(TcpConnection, SetupTimesOutNamingBothRanks) {
  std::atomic<bool> done{false};
  auto outcomes = runCommunicators(
      2,
      [&](Communicator& comm) {
        if (comm.rank() == 0) {
          const auto started = std::chrono::steady_clock::now();
          expectError([&] { comm.connect(1, Transport::kTcp, 9); }, ErrorCategory::kTimeout,
                      {"tcp connection from rank 0 to rank 1: setup", "rank 1 did not connect", "within 1500 ms"});
          EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(4));
          done = true;
          return;
        }
        // Rank 1 answers with a listener but never connects.
        const uint64_t wireTag = setupTag(SetupPurpose::kConnection, 9, "test");
        comm.bootstrap().recv(0, wireTag);
        const net::Socket listener = net::Socket::listen(net::SocketAddress::resolve("127.0.0.1", 0, "test"));
        comm.bootstrap().send(0, wireTag, tcp::encodeEndpoint({listener.localAddress(), tcp::randomToken()}));
        const Deadline deadline(5000);
        while (!done && !deadline.expired()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      },
      1500);
  expectAllOk(outcomes);
}

TEST(TcpConnection, FiftyConnectionCyclesLeaveNoDescriptorsOrThreads) {
  auto outcomes = runCommunicators(2, [&](Communicator& comm) {
    const int peer = 1 - comm.rank();
    // The peer writes [32, 48) and the word at 48 while this rank sends from [0, 32).
    std::vector<uint8_t> buffer(64, uint8_t(comm.rank()));
    RegisteredMemory memory = comm.registerMemory(buffer.data(), buffer.size(), Transport::kTcp);
    comm.sendMemory(memory, peer, 1);
    RegisteredMemory peerMemory = comm.recvMemory(peer, 1);
    auto cycle = [&](uint64_t tag) {
      std::shared_ptr<Connection> connection = comm.connect(peer, Transport::kTcp, tag);
      connection->write(peerMemory, 32, memory, 0, 16);
      connection->writeValue(peerMemory, 48, tag);
      connection->flush(5000);
      // The peer's flush needs this rank's receiving side, which goes with this rank's connection.
      comm.bootstrap().barrier();
    };
    cycle(1000);  // the first connection warms up whatever is opened once (bootstrap links)
    comm.bootstrap().barrier();
    // Descriptors and threads are the process's, shared by both rank threads: one rank counts, between
    // barriers (counting opens a descriptor itself).
    const bool counts = comm.rank() == 0;
    const size_t descriptors = counts ? countEntries("/proc/self/fd") : 0;
    const size_t threads = counts ? settledThreadCount() : 0;
    comm.bootstrap().barrier();
    for (uint64_t i = 1; i <= 50; ++i) cycle(1000 + i);
    comm.bootstrap().barrier();
    if (counts) {
      EXPECT_EQ(countEntries("/proc/self/fd"), descriptors);
      // A thread of the warm-up still leaving at the first count makes that count high, never low.
      EXPECT_LE(settledThreadCount(), threads);
    }
    comm.bootstrap().barrier();
  });
  expectAllOk(outcomes);
}

// Device memory on both sides (staged through pinned host memory); skipped without a GPU.
TEST(TcpConnection, StagesDeviceMemoryOnBothSides) {
  if (gpu::deviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  constexpr uint64_t kBytes = (uint64_t{9} << 20) + 5;
  UniqueId id = UniqueId::create("127.0.0.1");
  auto outcomes = testing::runRanks(2, id, 10000, testing::allRanks(2), [&](Bootstrap& bootstrap) {
    gpu::setDevice(0);
    Communicator comm(std::make_shared<Bootstrap>(std::move(bootstrap)), IbConfig{}, 0);
    const int peer = 1 - comm.rank();
    const std::vector<uint8_t> pattern = randomBytes(600 + comm.rank(), kBytes);
    GpuBuffer src(kBytes), dst(kBytes), flag(8);
    gpu::copy(src.data(), pattern.data(), kBytes);
    RegisteredMemory srcMemory = comm.registerMemory(src.data(), kBytes, Transport::kTcp);
    RegisteredMemory dstMemory = comm.registerMemory(dst.data(), kBytes, Transport::kTcp);
    RegisteredMemory flagMemory = comm.registerMemory(flag.data(), 8, Transport::kTcp);
    EXPECT_EQ(srcMemory.location(), MemoryLocation::kDevice);
    comm.sendMemory(dstMemory, peer, 1);
    comm.sendMemory(flagMemory, peer, 2);
    RegisteredMemory peerDst = comm.recvMemory(peer, 1);
    RegisteredMemory peerFlag = comm.recvMemory(peer, 2);
    std::shared_ptr<Connection> connection = comm.connect(peer, Transport::kTcp, 11);
    connection->write(peerDst, 3, srcMemory, 1, kBytes - 4);
    connection->writeValue(peerFlag, 0, 77 + comm.rank());
    connection->flush(5000);
    comm.bootstrap().barrier();
    std::vector<uint8_t> landed(kBytes);
    gpu::copy(landed.data(), dst.data(), kBytes);
    std::vector<uint8_t> expected(kBytes, 0);
    const std::vector<uint8_t> peerPattern = randomBytes(600 + peer, kBytes);
    std::memcpy(expected.data() + 3, peerPattern.data() + 1, kBytes - 4);
    EXPECT_EQ(firstDifference(landed, expected), -1);
    uint64_t value = 0;
    gpu::copy(&value, flag.data(), 8);
    EXPECT_EQ(value, uint64_t(77 + peer));
    comm.bootstrap().barrier();
  });
  expectAllOk(outcomes);
}

}  // namespace
}  // namespace loom
