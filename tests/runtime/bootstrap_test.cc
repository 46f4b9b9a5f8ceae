#include "loom/bootstrap.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <random>
#include <thread>

#include "bootstrap_test_util.hpp"
#include "loom/error.hpp"

namespace loom {
namespace {

using testing::allRanks;
using testing::bytesOf;
using testing::RankOutcome;
using testing::runRanks;
using Clock = std::chrono::steady_clock;

void expectAllOk(const std::vector<RankOutcome>& outcomes) {
  for (size_t r = 0; r < outcomes.size(); ++r)
    EXPECT_TRUE(outcomes[r].ok) << "rank " << r << ": " << outcomes[r].message;
}

bool contains(const std::string& text, const std::string& fragment) { return text.find(fragment) != std::string::npos; }

int64_t msSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

std::vector<uint8_t> randomBytes(std::mt19937& rng, size_t size) {
  std::vector<uint8_t> bytes(size);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  return bytes;
}

TEST(BootstrapTest, AllGatherRandomPayloadsOfDifferentSizes) {
  constexpr int kWorld = 5;
  constexpr int kRounds = 4;
  // Per round and rank a payload of its own size, from empty to 1 MiB (bigger than socket buffers).
  std::mt19937 rng(1234);
  std::vector<std::vector<std::vector<uint8_t>>> payloads(kRounds, std::vector<std::vector<uint8_t>>(kWorld));
  const size_t sizes[] = {0, 1, 7, 4096, 65537, 1 << 20};
  for (auto& round : payloads) {
    for (auto& payload : round) payload = randomBytes(rng, sizes[rng() % 6]);
  }
  std::vector<std::vector<std::vector<std::vector<uint8_t>>>> results(kWorld);
  UniqueId id = UniqueId::create("127.0.0.1");
  auto outcomes = runRanks(kWorld, id, 10000, allRanks(kWorld), [&](Bootstrap& bootstrap) {
    EXPECT_EQ(bootstrap.worldSize(), kWorld);
    for (int round = 0; round < kRounds; ++round) {
      results[bootstrap.rank()].push_back(bootstrap.allGather(payloads[round][bootstrap.rank()]));
    }
  });
  expectAllOk(outcomes);
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_EQ(results[r].size(), size_t{kRounds});
    for (int round = 0; round < kRounds; ++round) EXPECT_EQ(results[r][round], payloads[round]) << "rank " << r;
  }
}

TEST(BootstrapTest, SendRecvMatchesTagsWhateverTheOrder) {
  constexpr int kWorld = 4;
  UniqueId id = UniqueId::create("127.0.0.1");
  auto message = [](int from, int to, uint64_t tag) {
    return bytesOf("from " + std::to_string(from) + " to " + std::to_string(to) + " tag " + std::to_string(tag));
  };
  auto outcomes = runRanks(kWorld, id, 10000, allRanks(kWorld), [&](Bootstrap& bootstrap) {
    const int me = bootstrap.rank();
    for (int peer = 0; peer < kWorld; ++peer) {
      for (uint64_t tag : {1ull, 2ull, ~0ull}) bootstrap.send(peer, tag, message(me, peer, tag));
    }
    // Taken in another order than sent: the tag, not the arrival order, decides.
    for (int peer = kWorld - 1; peer >= 0; --peer) {
      for (uint64_t tag : {~0ull, 2ull, 1ull}) EXPECT_EQ(bootstrap.recv(peer, tag), message(peer, me, tag));
    }
    // Same pair and tag: in order.
    const int next = (me + 1) % kWorld;
    const int previous = (me + kWorld - 1) % kWorld;
    for (int i = 0; i < 3; ++i) bootstrap.send(next, 7, bytesOf(std::to_string(i)));
    for (int i = 0; i < 3; ++i) EXPECT_EQ(bootstrap.recv(previous, 7), bytesOf(std::to_string(i)));
  });
  expectAllOk(outcomes);
}

TEST(BootstrapTest, LargeMessagesSentBothWaysAtOnceDoNotDeadlock) {
  // Both ranks send 16 MiB before either receives: far more than the socket buffers hold, so each
  // send only completes because the other rank's send keeps draining its incoming connection.
  std::mt19937 rng(99);
  std::vector<std::vector<uint8_t>> data = {randomBytes(rng, 16 << 20), randomBytes(rng, 16 << 20)};
  UniqueId id = UniqueId::create("127.0.0.1");
  auto outcomes = runRanks(2, id, 20000, allRanks(2), [&](Bootstrap& bootstrap) {
    const int me = bootstrap.rank();
    bootstrap.send(1 - me, 0, data[me]);
    EXPECT_EQ(bootstrap.recv(1 - me, 0), data[1 - me]);
  });
  expectAllOk(outcomes);
}

TEST(BootstrapTest, BarrierHoldsEveryRankUntilTheLastArrives) {
  constexpr int kWorld = 4;
  UniqueId id = UniqueId::create("127.0.0.1");
  std::vector<Clock::time_point> arrived(kWorld);
  std::vector<Clock::time_point> left(kWorld);
  auto outcomes = runRanks(kWorld, id, 10000, allRanks(kWorld), [&](Bootstrap& bootstrap) {
    for (int round = 0; round < 2; ++round) {
      // A different rank is late in each round.
      int late = round == 0 ? 2 : 0;
      if (bootstrap.rank() == late) std::this_thread::sleep_for(std::chrono::milliseconds(200));
      arrived[bootstrap.rank()] = Clock::now();
      bootstrap.barrier();
      left[bootstrap.rank()] = Clock::now();
      bootstrap.barrier();  // so that nobody records the next round's arrival before all have left
      for (int r = 0; r < kWorld; ++r) EXPECT_GE(left[bootstrap.rank()], arrived[r]);
      bootstrap.barrier();
    }
  });
  expectAllOk(outcomes);
}

TEST(BootstrapTest, WorldOfOne) {
  UniqueId id = UniqueId::create("127.0.0.1");
  Bootstrap bootstrap(0, 1, id, 1000);
  auto blocks = bootstrap.allGather(bytesOf("alone"));
  ASSERT_EQ(blocks.size(), 1u);
  EXPECT_EQ(blocks[0], bytesOf("alone"));
  bootstrap.barrier();
  bootstrap.send(0, 3, bytesOf("me"));
  EXPECT_EQ(bootstrap.recv(0, 3), bytesOf("me"));
  EXPECT_EQ(bootstrap.peerAddress(0), id.address());
}

void expectError(const std::function<void()>& call, ErrorCategory category, const std::vector<std::string>& fragments) {
  try {
    call();
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), category) << error.what();
    for (const std::string& fragment : fragments) EXPECT_TRUE(contains(error.what(), fragment)) << error.what();
  }
}

TEST(BootstrapTest, RankWorldSizeAndTimeoutAreChecked) {
  UniqueId id = UniqueId::fromAddress("127.0.0.1:9", UniqueId::Secret{});
  expectError([&] { Bootstrap(4, 4, id, 100); }, ErrorCategory::kInvalidArgument, {"rank 4 is not in 0..3"});
  expectError([&] { Bootstrap(-1, 4, id, 100); }, ErrorCategory::kInvalidArgument, {"rank -1 is not in 0..3"});
  expectError([&] { Bootstrap(0, 0, id, 100); }, ErrorCategory::kInvalidArgument, {"world size 0 is not in 1..65536"});
  expectError([&] { Bootstrap(0, 1 << 20, id, 100); }, ErrorCategory::kInvalidArgument, {"world size 1048576"});
  expectError([&] { Bootstrap(0, 2, id, 0); }, ErrorCategory::kInvalidArgument, {"timeout: expected 1 to", "got 0"});
  ::setenv("LOOM_BOOTSTRAP_TIMEOUT_MS", "soon", 1);
  expectError([&] { Bootstrap(0, 2, id); }, ErrorCategory::kInvalidArgument, {"LOOM_BOOTSTRAP_TIMEOUT_MS", "'soon'"});
  ::setenv("LOOM_BOOTSTRAP_TIMEOUT_MS", "1234", 1);
  EXPECT_EQ(defaultBootstrapTimeoutMs(), 1234);
  ::unsetenv("LOOM_BOOTSTRAP_TIMEOUT_MS");
  EXPECT_EQ(defaultBootstrapTimeoutMs(), 30000);
}

TEST(BootstrapTest, PeersAndSelfMessagesAreChecked) {
  UniqueId id = UniqueId::create("127.0.0.1");
  auto outcomes = runRanks(2, id, 5000, allRanks(2), [&](Bootstrap& bootstrap) {
    expectError([&] { bootstrap.send(2, 0, {}); }, ErrorCategory::kInvalidArgument,
                {"send on rank", "peer 2 is not in 0..1"});
    expectError([&] { bootstrap.recv(-1, 0); }, ErrorCategory::kInvalidArgument, {"peer -1"});
    expectError([&] { bootstrap.recv(bootstrap.rank(), 9); }, ErrorCategory::kInvalidArgument, {"wait forever"});
    bootstrap.barrier();
  });
  expectAllOk(outcomes);
}

TEST(BootstrapTest, RankThatNeverArrivesIsNamedWithinTheTimeout) {
  constexpr int kWorld = 4;
  constexpr int64_t kTimeoutMs = 1500;
  UniqueId id = UniqueId::create("127.0.0.1");
  Clock::time_point start = Clock::now();
  // Rank 2 never starts. The root starts first so that its verdict reaches the others before
  // their own clocks run out.
  auto outcomes = runRanks(kWorld, id, kTimeoutMs, {0, 1, 3}, [](Bootstrap&) {}, {0, 200, 200});
  int64_t elapsed = msSince(start);
  EXPECT_LT(elapsed, kTimeoutMs + 1500);
  ASSERT_EQ(outcomes[0].category, ErrorCategory::kTimeout) << outcomes[0].message;
  EXPECT_TRUE(contains(outcomes[0].message, "rank 2 did not arrive within 1500 ms (3 of 4 ranks joined)"))
      << outcomes[0].message;
  for (int r : {1, 3}) {
    ASSERT_EQ(outcomes[r].category, ErrorCategory::kTimeout) << outcomes[r].message;
    EXPECT_TRUE(contains(outcomes[r].message, "rank 2 did not arrive")) << outcomes[r].message;
    EXPECT_TRUE(contains(outcomes[r].message, "reported by rank 0")) << outcomes[r].message;
  }
}

TEST(BootstrapTest, RanksThatTimeOutBeforeTheRootAskItWhoIsMissing) {
  constexpr int kWorld = 4;
  UniqueId id = UniqueId::create("127.0.0.1");
  Clock::time_point start = Clock::now();
  // Ranks 1 and 3 start first, so their clocks run out before the root's: they ask the root.
  auto outcomes = runRanks(kWorld, id, 1000, {0, 1, 3}, [](Bootstrap&) {}, {400, 0, 0});
  EXPECT_LT(msSince(start), 1000 + 400 + 1500);
  EXPECT_TRUE(contains(outcomes[0].message, "rank 2 did not arrive within 1000 ms")) << outcomes[0].message;
  for (int r : {1, 3}) {
    ASSERT_EQ(outcomes[r].category, ErrorCategory::kTimeout) << outcomes[r].message;
    EXPECT_TRUE(contains(outcomes[r].message,
                         "did not send the rank table within 1000 ms; the root says rank 2 has "
                         "not arrived (3 of 4 ranks joined)"))
        << outcomes[r].message;
  }
}

TEST(BootstrapTest, RootThatNeverArrivesIsNamed) {
  // A port with nothing listening: bind one and keep it bound without listen(), so connecting is refused
  // and no test running beside this one can be handed the same port (closing it first let that happen).
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  socklen_t length = sizeof(address);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  std::string where = "127.0.0.1:" + std::to_string(ntohs(address.sin_port));
  UniqueId id = UniqueId::fromAddress(where, UniqueId::randomSecret());
  Clock::time_point start = Clock::now();
  expectError(
      [&] { Bootstrap(1, 2, id, 500); }, ErrorCategory::kTimeout,
      {"rank 1 of 2", "the root (rank 0) at " + where + " could not be reached within 500 ms", "Connection refused"});
  EXPECT_LT(msSince(start), 1500);
  ::close(fd);
}

// A raw TCP client for the tests that play an impostor.
int connectTo(const UniqueId& id) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(id.port());
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// A rank whose call failed tells its peers (Bootstrap::announceFailure): each hears who and why at its next
// look, and its next collective step fails with the same words rather than waiting for the rank.
TEST(BootstrapTest, AnAnnouncedFailureReachesEveryPeerAndEndsItsNextStep) {
  constexpr int kWorld = 3;
  UniqueId id = UniqueId::create("127.0.0.1");
  auto outcomes = runRanks(kWorld, id, 20000, allRanks(kWorld), [](Bootstrap& bootstrap) {
    bootstrap.barrier();  // every connection is up
    if (bootstrap.rank() == 2) {
      bootstrap.announceFailure(Error(ErrorCategory::kTimeout, "rank 2, thread block 0, op 3: the test's failure"), 1000);
      std::this_thread::sleep_for(std::chrono::seconds(3));  // alive, but in no step of the others'
      return;
    }
    std::optional<std::pair<int, std::string>> heard;
    const auto start = std::chrono::steady_clock::now();
    while (!heard && std::chrono::steady_clock::now() - start < std::chrono::seconds(5)) {
      heard = bootstrap.announcedFailureIfIdle();
      if (!heard) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_TRUE(heard.has_value());
    EXPECT_EQ(heard->first, 2);
    EXPECT_EQ(heard->second, "rank 2, thread block 0, op 3: the test's failure");
    const auto stepStart = std::chrono::steady_clock::now();
    try {
      bootstrap.allGather(bytesOf("x"));
      ADD_FAILURE() << "the step after an announced failure went on";
    } catch (const Error& error) {
      EXPECT_TRUE(contains(error.what(), "the test's failure (reported by rank 2)")) << error.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - stepStart, std::chrono::seconds(2));
  });
  EXPECT_TRUE(outcomes[0].ok) << outcomes[0].message;
  EXPECT_TRUE(outcomes[1].ok) << outcomes[1].message;
}

TEST(BootstrapTest, WrongSecretIsRefusedAndLoggedWhileTheJobCompletes) {
  constexpr int kWorld = 3;
  UniqueId id = UniqueId::create("127.0.0.1");
  UniqueId impostor = UniqueId::fromAddress(id.address(), UniqueId::randomSecret());
  ::testing::internal::CaptureStderr();
  std::optional<Error> impostorError;
  std::thread intruder([&] {
    try {
      Bootstrap bootstrap(2, kWorld, impostor, 3000);
    } catch (const Error& error) {
      impostorError = error;
    }
  });
  // The real rank 2 starts after the impostor has tried to take its place.
  auto outcomes = runRanks(kWorld, id, 5000, allRanks(kWorld),
                           [](Bootstrap& bootstrap) {
                             auto blocks = bootstrap.allGather(bytesOf(std::to_string(bootstrap.rank())));
                             for (int r = 0; r < kWorld; ++r) EXPECT_EQ(blocks[r], bytesOf(std::to_string(r)));
                           },
                           {0, 0, 300});
  intruder.join();
  std::string log = ::testing::internal::GetCapturedStderr();
  expectAllOk(outcomes);
  ASSERT_TRUE(impostorError.has_value());
  EXPECT_EQ(impostorError->category(), ErrorCategory::kTransport) << impostorError->what();
  EXPECT_TRUE(contains(impostorError->what(), "rank 0 refused this rank: wrong secret")) << impostorError->what();
  EXPECT_TRUE(contains(log, "loom: warning: bootstrap rank 0: refused a connection from 127.0.0.1:")) << log;
  EXPECT_TRUE(contains(log, ": wrong secret")) << log;
}

TEST(BootstrapTest, GarbageAndOversizedMessagesAreRefusedWhileTheJobCompletes) {
  constexpr int kWorld = 3;
  UniqueId id = UniqueId::create("127.0.0.1");
  ::testing::internal::CaptureStderr();
  // Before any rank runs: an HTTP request, a header with the right magic but a 1 TiB length, and a
  // connection that says nothing at all.
  int http = connectTo(id);
  int huge = connectTo(id);
  int silent = connectTo(id);
  ASSERT_GE(http, 0);
  ASSERT_GE(huge, 0);
  ASSERT_GE(silent, 0);
  std::string request = "GET / HTTP/1.1\r\nHost: loom\r\n\r\n";
  ASSERT_EQ(::write(http, request.data(), request.size()), static_cast<ssize_t>(request.size()));
  uint8_t header[32] = {'L', 'O', 'O', 'M', 1, 0, 1, 0};  // magic, version 1, kind hello
  header[24 + 5] = 1;                                     // length 2^40
  ASSERT_EQ(::write(huge, header, sizeof(header)), 32);
  auto outcomes = runRanks(kWorld, id, 5000, allRanks(kWorld), [](Bootstrap& bootstrap) {
    auto blocks = bootstrap.allGather(bytesOf("ok"));
    EXPECT_EQ(blocks.size(), size_t{kWorld});
    bootstrap.barrier();
  });
  std::string log = ::testing::internal::GetCapturedStderr();
  ::close(http);
  ::close(huge);
  ::close(silent);
  expectAllOk(outcomes);
  EXPECT_TRUE(contains(log, "not a Loom bootstrap message (magic 0x20544547)")) << log;
  EXPECT_TRUE(contains(log, "message of 1099511627776 bytes is over the limit of 44 bytes")) << log;
  EXPECT_TRUE(contains(log, "refused a connection from 127.0.0.1:")) << log;
}

TEST(BootstrapTest, AllGatherTimeoutNamesTheRankThatDidNotCall) {
  constexpr int kWorld = 4;
  UniqueId id = UniqueId::create("127.0.0.1");
  std::atomic<int> finished{0};
  auto outcomes = runRanks(kWorld, id, 1000, allRanks(kWorld), [&](Bootstrap& bootstrap) {
    if (bootstrap.rank() == 2) {
      // Stays connected but never calls allGather, until the others have given up.
      while (finished.load() < kWorld - 1) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return;
    }
    try {
      bootstrap.allGather(bytesOf("x"));
    } catch (...) {
      ++finished;
      throw;
    }
    ++finished;
  });
  EXPECT_TRUE(outcomes[2].ok);
  // Every rank names rank 2, whether it found out itself or heard it from its ring predecessor.
  for (int r : {0, 1, 3}) {
    ASSERT_EQ(outcomes[r].category, ErrorCategory::kTimeout) << outcomes[r].message;
    EXPECT_TRUE(
        contains(outcomes[r].message, "allGather #1 on rank " + std::to_string(r) + " of 4: the block of rank 2"))
        << outcomes[r].message;
    EXPECT_TRUE(contains(outcomes[r].message, "did not arrive within 1000 ms: rank 2 has not reached this allGather"))
        << outcomes[r].message;
  }
}

TEST(BootstrapTest, BarrierTimeoutNamesTheMissingRankOnEveryRank) {
  constexpr int kWorld = 4;
  UniqueId id = UniqueId::create("127.0.0.1");
  std::atomic<int> finished{0};
  auto outcomes = runRanks(kWorld, id, 1000, allRanks(kWorld), [&](Bootstrap& bootstrap) {
    if (bootstrap.rank() == 2) {
      while (finished.load() < kWorld - 1) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return;
    }
    // The root enters first, so its verdict reaches the others before their clocks run out.
    if (bootstrap.rank() != 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    try {
      bootstrap.barrier();
    } catch (...) {
      ++finished;
      throw;
    }
  });
  ASSERT_EQ(outcomes[0].category, ErrorCategory::kTimeout) << outcomes[0].message;
  EXPECT_TRUE(contains(outcomes[0].message, "barrier #1 on rank 0 of 4: rank 2 did not arrive within 1000 ms"))
      << outcomes[0].message;
  for (int r : {1, 3}) {
    ASSERT_EQ(outcomes[r].category, ErrorCategory::kTimeout) << outcomes[r].message;
    EXPECT_TRUE(contains(outcomes[r].message, "rank 2 did not arrive within 1000 ms (reported by rank 0)"))
        << outcomes[r].message;
  }
}

TEST(BootstrapTest, BarrierTimeoutBeforeTheRootsAsksTheRoot) {
  constexpr int kWorld = 3;
  UniqueId id = UniqueId::create("127.0.0.1");
  std::atomic<int> finished{0};
  auto outcomes = runRanks(kWorld, id, 800, allRanks(kWorld), [&](Bootstrap& bootstrap) {
    if (bootstrap.rank() == 2) {
      while (finished.load() < kWorld - 1) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return;
    }
    // The root enters last: rank 1 times out first and asks it.
    if (bootstrap.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    try {
      bootstrap.barrier();
    } catch (...) {
      ++finished;
      throw;
    }
  });
  EXPECT_TRUE(contains(outcomes[0].message, "barrier #1 on rank 0 of 3: rank 2 did not arrive within 800 ms"))
      << outcomes[0].message;
  EXPECT_TRUE(contains(outcomes[1].message,
                       "barrier #1 on rank 1 of 3: the root (rank 0) did not release it within 800 ms; the root says "
                       "rank 2 has not arrived"))
      << outcomes[1].message;
}

TEST(BootstrapTest, BarrierTimeoutWhileTheRootIsElsewhere) {
  UniqueId id = UniqueId::create("127.0.0.1");
  std::atomic<bool> done{false};
  auto outcomes = runRanks(2, id, 300, allRanks(2), [&](Bootstrap& bootstrap) {
    if (bootstrap.rank() == 0) {
      // Busy in its own code, not in a bootstrap call: nobody answers rank 1's question.
      while (!done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return;
    }
    expectError([&] { bootstrap.barrier(); }, ErrorCategory::kTimeout,
                {"the root (rank 0) did not release it within 300 ms; it does once every rank has arrived"});
    done = true;
  });
  expectAllOk(outcomes);
}

TEST(BootstrapTest, CollectivesRefuseAfterAFailure) {
  UniqueId id = UniqueId::create("127.0.0.1");
  std::atomic<bool> done{false};
  auto outcomes = runRanks(2, id, 300, allRanks(2), [&](Bootstrap& bootstrap) {
    if (bootstrap.rank() == 1) {
      while (!done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return;
    }
    expectError([&] { bootstrap.allGather(bytesOf("x")); }, ErrorCategory::kTimeout, {"the block of rank 1"});
    expectError([&] { bootstrap.barrier(); }, ErrorCategory::kTimeout, {"unusable after an earlier failure"});
    done = true;
  });
  expectAllOk(outcomes);
}

TEST(BootstrapTest, RecvTimeoutSaysWhichTagsDidArrive) {
  UniqueId id = UniqueId::create("127.0.0.1");
  auto outcomes = runRanks(2, id, 400, allRanks(2), [&](Bootstrap& bootstrap) {
    if (bootstrap.rank() == 1) {
      bootstrap.send(0, 5, bytesOf("five"));
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // while rank 0 times out
    }
    if (bootstrap.rank() == 0) {
      expectError([&] { bootstrap.recv(1, 6); }, ErrorCategory::kTimeout,
                  {"recv from rank 1 (tag 6) on rank 0 of 2: rank 1 sent nothing with this tag within 400 ms",
                   "(it did send tag 5)"});
      EXPECT_EQ(bootstrap.recv(1, 5), bytesOf("five"));  // a timeout loses nothing
    }
    bootstrap.barrier();
  });
  expectAllOk(outcomes);
}

TEST(BootstrapTest, PeerThatExitsFailsTheWaitAtOnce) {
  UniqueId id = UniqueId::create("127.0.0.1");
  Clock::time_point start = Clock::now();
  auto outcomes = runRanks(2, id, 5000, allRanks(2), [&](Bootstrap& bootstrap) {
    if (bootstrap.rank() == 1) {
      bootstrap.send(0, 1, bytesOf("last words"));
      return;  // destroys its Bootstrap: connections close
    }
    EXPECT_EQ(bootstrap.recv(1, 1), bytesOf("last words"));
    expectError([&] { bootstrap.recv(1, 2); }, ErrorCategory::kTransport,
                {"recv from rank 1 (tag 2)", "rank 1 closed its connection"});
  });
  expectAllOk(outcomes);
  EXPECT_LT(msSince(start), 3000);
}

TEST(BootstrapTest, APeerThatClosesItsBootstrapSaysGoodbyeAndIsNotLost) {
  // A destroyed bootstrap tells its peers it leaves on purpose: departed, but not lost (a killed process,
  // which says nothing, is lost: tests/nccl/test_nccl_library.py kills one).
  UniqueId id = UniqueId::create("127.0.0.1");
  auto outcomes = runRanks(2, id, 5000, allRanks(2), [&](Bootstrap& bootstrap) {
    if (bootstrap.rank() == 1) {
      bootstrap.send(0, 1, bytesOf("last words"));
      return;  // destroys its Bootstrap: a goodbye, then the connections close
    }
    EXPECT_EQ(bootstrap.recv(1, 1), bytesOf("last words"));
    const Clock::time_point start = Clock::now();
    while (bootstrap.departedPeers().empty() && msSince(start) < 3000) std::this_thread::yield();
    EXPECT_EQ(bootstrap.departedPeers(), std::vector<int>{1});
    const std::optional<std::vector<int>> lost = bootstrap.lostPeersIfIdle();
    ASSERT_TRUE(lost.has_value());
    EXPECT_TRUE(lost->empty());
  });
  expectAllOk(outcomes);
}

size_t openDescriptors() {
  size_t count = 0;
  DIR* dir = ::opendir("/proc/self/fd");
  while (dir != nullptr && ::readdir(dir) != nullptr) ++count;
  if (dir != nullptr) ::closedir(dir);
  return count;
}

TEST(BootstrapTest, RepeatedCreateAndDestroyLeaksNoDescriptors) {
  auto round = [] {
    UniqueId id = UniqueId::create("127.0.0.1");
    auto outcomes = runRanks(3, id, 5000, allRanks(3), [](Bootstrap& bootstrap) {
      bootstrap.allGather(bytesOf("leak?"));
      bootstrap.send((bootstrap.rank() + 1) % 3, 0, bytesOf("x"));
      bootstrap.recv((bootstrap.rank() + 2) % 3, 0);
      bootstrap.barrier();
    });
    expectAllOk(outcomes);
  };
  round();
  size_t before = openDescriptors();
  for (int i = 0; i < 20; ++i) round();
  EXPECT_EQ(openDescriptors(), before);
}

TEST(BootstrapTest, MovedBootstrapKeepsWorking) {
  UniqueId id = UniqueId::create("127.0.0.1");
  auto outcomes = runRanks(2, id, 5000, allRanks(2), [](Bootstrap& bootstrap) {
    Bootstrap moved = std::move(bootstrap);
    auto blocks = moved.allGather(bytesOf(std::to_string(moved.rank())));
    EXPECT_EQ(blocks[1 - moved.rank()], bytesOf(std::to_string(1 - moved.rank())));
  });
  expectAllOk(outcomes);
}

TEST(BootstrapTest, SeparateProcesses) {
  // Ranks 1..3 are child processes; this process is rank 0 and holds the listener create() opened.
  constexpr int kWorld = 4;
  UniqueId id = UniqueId::create("127.0.0.1");
  std::vector<pid_t> children;
  for (int rank = 1; rank < kWorld; ++rank) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int status = 0;
      try {
        Bootstrap bootstrap(rank, kWorld, id, 10000);
        auto blocks = bootstrap.allGather(bytesOf(std::string(rank * 1000, static_cast<char>('a' + rank))));
        for (int r = 0; r < kWorld; ++r) {
          if (blocks[r] != bytesOf(std::string(r * 1000, static_cast<char>('a' + r)))) status = 2;
        }
        bootstrap.send(0, 42, bytesOf("pid " + std::to_string(::getpid())));
        bootstrap.barrier();
      } catch (const std::exception& error) {
        std::fprintf(stderr, "rank %d: %s\n", rank, error.what());
        status = 1;
      }
      std::_Exit(status);
    }
    children.push_back(pid);
  }
  {
    Bootstrap bootstrap(0, kWorld, id, 10000);
    auto blocks = bootstrap.allGather({});
    for (int r = 1; r < kWorld; ++r) {
      EXPECT_EQ(blocks[r], bytesOf(std::string(r * 1000, static_cast<char>('a' + r))));
      EXPECT_EQ(bootstrap.recv(r, 42), bytesOf("pid " + std::to_string(children[r - 1])));
    }
    bootstrap.barrier();
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  }
}

}  // namespace
}  // namespace loom
