// InfiniBand connections against the fake verbs layer (fake_ibverbs.hpp): ranks are threads of this
// process, each with a Communicator on host memory, and the fake moves their bytes.

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <functional>
#include <thread>

#include "connection_factory.hpp"
#include "ib_test_util.hpp"
#include "loom/ibverbs.hpp"
#include "memory_table.hpp"
#include "registered_memory.hpp"
#include "registered_memory_impl.hpp"

namespace loom::ibtest {
namespace {
struct AllPairsPlan {
  std::vector<uint64_t> sizes{0, 1, 7, 4093, (uint64_t{1} << 20) + 13, 64};
  std::vector<uint64_t> offsets;  // of each block, inside the region of one source rank
  uint64_t regionBytes = 0;

  AllPairsPlan() {
    uint64_t offset = 3;  // odd offsets on both sides
    for (uint64_t size : sizes) {
      offsets.push_back(offset);
      offset += size + 5;
    }
    regionBytes = offset;
  }
  static std::vector<uint64_t> values(int src, int dst) {
    std::mt19937_64 random(uint64_t(src) * 1000 + uint64_t(dst) + 17);
    std::vector<uint64_t> values(6);
    for (uint64_t& value : values) value = random() | 1;  // distinct, never the initial 0
    return values;
  }
  std::vector<uint8_t> data(int src, int dst) const { return randomBytes(regionBytes, uint64_t(src) * 77 + dst); }
};

std::string watchCounters(const AllPairsPlan& plan, int me, int worldSize, const uint8_t* region,
                          const uint64_t* counters) {
  for (int src = 0; src < worldSize; ++src) {
    if (src == me) continue;
    const std::vector<uint64_t> values = AllPairsPlan::values(src, me);
    const std::vector<uint8_t> expected = plan.data(src, me);
    const uint8_t* mine = region + uint64_t(src) * plan.regionBytes;
    size_t seen = 0;  // values seen so far, in order
    const bool finished = waitUntil([&] {
      const uint64_t value = load(counters[src]);
      if (value == 0 || (seen > 0 && value == values[seen - 1])) return false;
      auto at = std::find(values.begin() + seen, values.end(), value);
      if (at == values.end()) throw std::runtime_error("unexpected or out-of-order value " + std::to_string(value));
      seen = size_t(at - values.begin()) + 1;
      for (size_t i = 0; i < seen; ++i) {
        const uint64_t offset = plan.offsets[i];
        if (std::memcmp(mine + offset, expected.data() + offset, plan.sizes[i]) != 0) {
          throw std::runtime_error("block " + std::to_string(i) + " from rank " + std::to_string(src) +
                                   " is not in place when value " + std::to_string(seen) + " is");
        }
      }
      return seen == values.size();
    });
    if (!finished) return "counter of rank " + std::to_string(src) + " stopped after " + std::to_string(seen);
  }
  return "";
}

void runAllPairs(int worldSize, IbSignalMode mode) {
  const AllPairsPlan plan;
  auto outcomes = runIb(worldSize, fakeConfig(mode), [&](Communicator& comm) {
    const int me = comm.rank();
    std::vector<uint8_t> region(plan.regionBytes * worldSize);
    std::vector<uint64_t> counters(worldSize);
    RegisteredMemory regionMemory = comm.registerMemory(region.data(), region.size(), Transport::kIb);
    RegisteredMemory counterMemory = comm.registerMemory(counters.data(), counters.size() * 8, Transport::kIb);
    std::vector<std::vector<uint8_t>> sources(worldSize);
    std::vector<RegisteredMemory> sourceMemory(worldSize), peerRegion(worldSize), peerCounters(worldSize);
    std::vector<std::shared_ptr<Connection>> connections(worldSize);
    for (int peer = 0; peer < worldSize; ++peer) {
      if (peer == me) continue;
      sources[peer] = plan.data(me, peer);
      sourceMemory[peer] = comm.registerMemory(sources[peer].data(), sources[peer].size(), Transport::kIb);
      connections[peer] = comm.connect(peer, Transport::kIb, 1);
      comm.sendMemory(regionMemory, peer, 10);
      comm.sendMemory(counterMemory, peer, 11);
    }
    for (int peer = 0; peer < worldSize; ++peer) {
      if (peer == me) continue;
      peerRegion[peer] = comm.recvMemory(peer, 10);
      peerCounters[peer] = comm.recvMemory(peer, 11);
    }
    std::string watchFailure;
    // Joined on every path: the sending below may throw.
    std::jthread watcher([&] {
      try {
        watchFailure = watchCounters(plan, me, worldSize, region.data(), counters.data());
      } catch (const std::exception& error) {
        watchFailure = error.what();
      }
    });
    for (int peer = 0; peer < worldSize; ++peer) {
      if (peer == me) continue;
      const std::vector<uint64_t> values = AllPairsPlan::values(me, peer);
      for (size_t i = 0; i < plan.sizes.size(); ++i) {
        const uint64_t offset = plan.offsets[i];
        connections[peer]->write(peerRegion[peer], uint64_t(me) * plan.regionBytes + offset, sourceMemory[peer], offset,
                                 plan.sizes[i]);
        connections[peer]->writeValue(peerCounters[peer], uint64_t(me) * 8, values[i]);
      }
    }
    for (auto& connection : connections) {
      if (connection) connection->flush(5000);
    }
    watcher.join();
    EXPECT_EQ(watchFailure, "") << "rank " << me;
    comm.bootstrap().barrier();
  });
  expectAllOk(outcomes);
}

TEST_F(IbConnectionTest, TwoRanksWriteThenSignalWithAtomics) { runAllPairs(2, IbSignalMode::kAtomic); }
TEST_F(IbConnectionTest, TwoRanksWriteThenSignalWithImmediates) { runAllPairs(2, IbSignalMode::kWriteWithImm); }
TEST_F(IbConnectionTest, FourRanksAllPairsWithAtomics) { runAllPairs(4, IbSignalMode::kAtomic); }
TEST_F(IbConnectionTest, FourRanksAllPairsWithImmediates) { runAllPairs(4, IbSignalMode::kWriteWithImm); }

TEST_F(IbConnectionTest, RoceAddressesPeersByGid) {
  FakeIbverbs::setEthernet(true);
  runAllPairs(2, IbSignalMode::kWriteWithImm);
}

TEST_F(IbConnectionTest, AnExplicitGidIndexAddressesByGidOnInfiniBand) {
  IbConfig config = fakeConfig();
  config.gidIndex = 2;
  auto outcomes = runIb(2, config, [](Communicator& comm) {
    uint64_t word = 0;
    RegisteredMemory mine = comm.registerMemory(&word, 8, Transport::kIb);
    auto connection = comm.connect(1 - comm.rank(), Transport::kIb, 1);
    comm.sendMemory(mine, 1 - comm.rank(), 2);
    RegisteredMemory theirs = comm.recvMemory(1 - comm.rank(), 2);
    connection->writeValue(theirs, 0, 11 + comm.rank());
    connection->flush(5000);
    EXPECT_TRUE(waitUntil([&] { return load(word) == uint64_t(12 - comm.rank()); }));
    comm.bootstrap().barrier();
  });
  expectAllOk(outcomes);
}

// Two ranks: rank 0 writes to rank 1 over one connection; `sender` and `receiver` run on them.
struct OneWay {
  std::vector<uint8_t> source;
  std::vector<uint8_t> target;
  uint64_t counter = 0;
  RegisteredMemory sourceMemory, targetMemory, counterMemory;
  std::shared_ptr<Connection> connection;
};

void runOneWay(IbSignalMode mode, uint64_t bytes, const std::function<void(Communicator&, OneWay&)>& sender,
               const std::function<void(Communicator&, OneWay&)>& receiver) {
  auto outcomes = runIb(2, fakeConfig(mode), [&](Communicator& comm) {
    OneWay way;
    way.connection = comm.connect(1 - comm.rank(), Transport::kIb, 1);
    if (comm.rank() == 0) {
      way.source = randomBytes(bytes, 99);
      way.sourceMemory = comm.registerMemory(way.source.data(), bytes, Transport::kIb);
      way.targetMemory = comm.recvMemory(1, 5);
      way.counterMemory = comm.recvMemory(1, 6);
      sender(comm, way);
    } else {
      way.target.resize(bytes);
      way.targetMemory = comm.registerMemory(way.target.data(), bytes, Transport::kIb);
      way.counterMemory = comm.registerMemory(&way.counter, 8, Transport::kIb);
      comm.sendMemory(way.targetMemory, 0, 5);
      comm.sendMemory(way.counterMemory, 0, 6);
      receiver(comm, way);
    }
    comm.bootstrap().barrier();
  });
  expectAllOk(outcomes);
}

TEST_F(IbConnectionTest, SplitsWritesAtThePortMessageLimit) {
  FakeIbverbs::setMaxMessageBytes(4096);
  const uint64_t bytes = (uint64_t{1} << 20) + 5;  // 257 pieces: more than the send queue holds
  runOneWay(
      IbSignalMode::kAtomic, bytes,
      [&](Communicator& comm, OneWay& way) {
        way.connection->write(way.targetMemory, 0, way.sourceMemory, 0, bytes);
        way.connection->writeValue(way.counterMemory, 0, 1);
        way.connection->flush(5000);
        EXPECT_EQ(FakeIbverbs::writesExecuted(), 257u);
        comm.bootstrap().barrier();
      },
      [&](Communicator& comm, OneWay& way) {
        EXPECT_TRUE(waitUntil([&] { return load(way.counter) == 1; }));
        comm.bootstrap().barrier();
        EXPECT_EQ(way.target, randomBytes(bytes, 99));
      });
}

// Offsets above 4 GiB on both sides, in mappings that reserve no memory until touched.
TEST_F(IbConnectionTest, OffsetsAboveFourGibibytesWork) {
  constexpr uint64_t kBytes = (uint64_t{5} << 30) + (1 << 20);
  constexpr uint64_t kSrcOffset = (uint64_t{4} << 30) + 77;
  constexpr uint64_t kDstOffset = (uint64_t{4} << 30) + 3 * 4096 + 5;
  constexpr uint64_t kLength = 12345;
  constexpr uint64_t kWordOffset = (uint64_t{5} << 30) - 8;
  auto map = [] {
    void* data = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return std::unique_ptr<uint8_t, std::function<void(uint8_t*)>>(
        data == MAP_FAILED ? nullptr : static_cast<uint8_t*>(data), [](uint8_t* p) { munmap(p, kBytes); });
  };
  auto probe = map();
  if (!probe) GTEST_SKIP() << "cannot map 5 GiB of address space here";
  probe.reset();
  const std::vector<uint8_t> pattern = randomBytes(kLength, 5);
  auto outcomes = runIb(2, fakeConfig(), [&](Communicator& comm) {
    auto mapping = map();
    ASSERT_NE(mapping, nullptr);
    RegisteredMemory mine = comm.registerMemory(mapping.get(), kBytes, Transport::kIb);
    auto connection = comm.connect(1 - comm.rank(), Transport::kIb, 1);
    comm.sendMemory(mine, 1 - comm.rank(), 2);
    RegisteredMemory theirs = comm.recvMemory(1 - comm.rank(), 2);
    if (comm.rank() == 0) {
      std::memcpy(mapping.get() + kSrcOffset, pattern.data(), kLength);
      connection->write(theirs, kDstOffset, mine, kSrcOffset, kLength);
      connection->writeValue(theirs, kWordOffset, 0x1234567890ull);
      connection->flush(5000);
    } else {
      const auto* word = reinterpret_cast<const uint64_t*>(mapping.get() + kWordOffset);
      EXPECT_TRUE(waitUntil([&] { return load(*word) == 0x1234567890ull; }));
      EXPECT_EQ(std::memcmp(mapping.get() + kDstOffset, pattern.data(), kLength), 0);
    }
    comm.bootstrap().barrier();
  });
  expectAllOk(outcomes);
}

TEST_F(IbConnectionTest, RangeAndRegistrationChecksRejectBeforePosting) {
  runOneWay(
      IbSignalMode::kAtomic, 100,
      [&](Communicator& comm, OneWay& way) {
        Connection& connection = *way.connection;
        Error error = thrownBy([&] { connection.write(way.targetMemory, 50, way.sourceMemory, 0, 51); });
        EXPECT_EQ(error.category(), ErrorCategory::kInvalidArgument);
        EXPECT_TRUE(contains(error.what(), "ib connection from rank 0 to rank 1: write: dst range")) << error.what();
        error = thrownBy([&] { connection.write(way.targetMemory, 0, way.sourceMemory, 99, 2); });
        EXPECT_TRUE(contains(error.what(), "src range")) << error.what();
        error = thrownBy([&] { connection.writeValue(way.counterMemory, 4, 1); });
        EXPECT_EQ(error.category(), ErrorCategory::kInvalidArgument);
        uint64_t tcpOnly = 0;
        RegisteredMemory local = comm.registerMemory(&tcpOnly, 8, Transport::kTcp);
        error = thrownBy([&] { connection.write(way.targetMemory, 0, local, 0, 8); });
        EXPECT_TRUE(contains(error.what(), "src is registered for tcp, not for ib")) << error.what();
        EXPECT_EQ(FakeIbverbs::writesExecuted(), 0u);
        // Nothing was posted, and the connection still works.
        connection.write(way.targetMemory, 0, way.sourceMemory, 0, 100);
        connection.writeValue(way.counterMemory, 0, 7);
        connection.flush(5000);
      },
      [&](Communicator&, OneWay& way) {
        EXPECT_TRUE(waitUntil([&] { return load(way.counter) == 7; }));
        EXPECT_EQ(way.target, randomBytes(100, 99));
      });
}

TEST_F(IbConnectionTest, AWrongRemoteKeyFailsAtFlushWithTheStatus) {
  runOneWay(
      IbSignalMode::kWriteWithImm, 64,
      [&](Communicator& comm, OneWay& way) {
        // What hardware does with a key that is not the region's: a remote access error.
        auto forged = std::make_shared<RegisteredMemory::Impl>(way.targetMemory.impl());
        forged->ibRkey ^= 0x5a5a00;
        way.connection->write(RegisteredMemory(forged), 0, way.sourceMemory, 0, 64);
        Error error = thrownBy([&] { way.connection->flush(5000); });
        EXPECT_EQ(error.category(), ErrorCategory::kTransport);
        EXPECT_TRUE(contains(error.what(),
                             "ib connection from rank 0 to rank 1 (device fake_ib0 port 1): RDMA write "
                             "to rank 1's registration"))
            << error.what();
        EXPECT_TRUE(contains(error.what(), "failed at rank 0 with status 'remote access error' (10,")) << error.what();
        // The connection stays broken: later calls report the same failure.
        Error again = thrownBy([&] { way.connection->write(way.targetMemory, 0, way.sourceMemory, 0, 8); });
        EXPECT_STREQ(again.what(), error.what());
        comm.bootstrap().barrier();
      },
      [&](Communicator& comm, OneWay& way) {
        comm.bootstrap().barrier();
        EXPECT_EQ(way.target, std::vector<uint8_t>(64));
      });
}

TEST_F(IbConnectionTest, InjectedCompletionErrorsNameTheOperation) {
  runOneWay(
      IbSignalMode::kAtomic, 64,
      [&](Communicator& comm, OneWay& way) {
        way.connection->write(way.targetMemory, 0, way.sourceMemory, 0, 64);
        FakeIbverbs::failNextSend(IBV_WC_RETRY_EXC_ERR);
        way.connection->writeValue(way.counterMemory, 0, 1);
        Error error = thrownBy([&] { way.connection->flush(5000); });
        EXPECT_EQ(error.category(), ErrorCategory::kTransport);
        EXPECT_TRUE(contains(error.what(), "writeValue as RDMA fetch-and-add to rank 1's registration"))
            << error.what();
        EXPECT_TRUE(contains(error.what(), "status 'transport retry counter exceeded' (12,")) << error.what();
        // A queue pair in error is a failed link: the waits on rank 1 end at once (not at their 60 s), naming it.
        const auto start = std::chrono::steady_clock::now();
        const std::string report = testing::endOfAWaitOn(comm, 1, 3);
        EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
        EXPECT_TRUE(contains(report,
                             "semaphore wait on channel 3 ended: rank 1 is unreachable (ib connection from rank 0 to "
                             "rank 1 (device fake_ib0 port 1): writeValue as RDMA fetch-and-add"))
            << report;
        comm.bootstrap().barrier();
      },
      [&](Communicator& comm, OneWay& way) {
        comm.bootstrap().barrier();
        EXPECT_EQ(way.target, randomBytes(64, 99));  // the write before the failure landed
        EXPECT_EQ(way.counter, 0u);                  // the failed add did not
      });
}

TEST_F(IbConnectionTest, FlushTimesOutNamingOutstandingWork) {
  runOneWay(
      IbSignalMode::kAtomic, 64,
      [&](Communicator&, OneWay& way) {
        FakeIbverbs::stallSends(true);
        way.connection->write(way.targetMemory, 0, way.sourceMemory, 0, 64);
        way.connection->writeValue(way.counterMemory, 0, 3);
        Error error = thrownBy([&] { way.connection->flush(200); });
        EXPECT_EQ(error.category(), ErrorCategory::kTimeout);
        EXPECT_TRUE(contains(error.what(),
                             "ib connection from rank 0 to rank 1 (device fake_ib0 port 1): flush: 2 of 2 "
                             "work requests still outstanding after 200 ms"))
            << error.what();
        FakeIbverbs::stallSends(false);
        way.connection->flush(5000);
      },
      [&](Communicator&, OneWay& way) {
        EXPECT_TRUE(waitUntil([&] { return load(way.counter) == 3; }));
        EXPECT_EQ(way.target, randomBytes(64, 99));
      });
}

TEST_F(IbConnectionTest, AtomicSignalsRejectAWordThatDidNotStartAtZero) {
  runOneWay(
      IbSignalMode::kAtomic, 8,
      [&](Communicator& comm, OneWay& way) {
        comm.bootstrap().barrier();
        way.connection->writeValue(way.counterMemory, 0, 5);
        Error error = thrownBy([&] { way.connection->flush(5000); });
        EXPECT_EQ(error.category(), ErrorCategory::kInvalidArgument);
        EXPECT_TRUE(contains(error.what(), "found 42 in the word, not 0")) << error.what();
      },
      [&](Communicator& comm, OneWay& way) {
        std::atomic_ref<uint64_t>(way.counter).store(42);
        comm.bootstrap().barrier();
      });
}

TEST_F(IbConnectionTest, ImmediateSignalsForAReleasedRegistrationAreRefusedByTheReceiver) {
  runOneWay(
      IbSignalMode::kWriteWithImm, 8,
      [&](Communicator& comm, OneWay& way) {
        comm.bootstrap().barrier();  // the receiver has released its counter
        way.connection->writeValue(way.counterMemory, 0, 5);
        way.connection->flush(5000);  // the record arrived; applying it is the receiver's business
      },
      [&](Communicator& comm, OneWay& way) {
        const uint64_t id = way.counterMemory.impl().id;
        way.counterMemory = RegisteredMemory();
        comm.bootstrap().barrier();
        std::string failure;
        EXPECT_TRUE(waitUntil([&] {
          try {
            way.connection->flush(100);
          } catch (const Error& error) {
            failure = error.what();
          }
          return !failure.empty();
        }));
        EXPECT_EQ(failure,
                  "rank 1 receiving signals from rank 0 (device fake_ib0 port 1): a signal names registration " +
                      std::to_string(id) + " offset 0, which is not registered here");
        EXPECT_EQ(way.counter, 0u);
      });
}

TEST_F(IbConnectionTest, SignalModesMustAgree) {
  auto outcomes = runIb(
      2, [](int rank) { return fakeConfig(rank == 0 ? IbSignalMode::kAtomic : IbSignalMode::kWriteWithImm); },
      [](Communicator& comm) { comm.connect(1 - comm.rank(), Transport::kIb, 1); });
  for (const RankOutcome& outcome : outcomes) {
    EXPECT_EQ(outcome.category, ErrorCategory::kTransport);
    EXPECT_TRUE(contains(outcome.message, "set it alike on every rank")) << outcome.message;
  }
  EXPECT_TRUE(contains(outcomes[0].message,
                       "rank 0 signals with atomic adds (LOOM_IB_SIGNAL=atomic), rank 1 with "
                       "writes with immediate (LOOM_IB_SIGNAL=imm)"))
      << outcomes[0].message;
}

TEST_F(IbConnectionTest, AtomicSignalsNeedADeviceWithAtomics) {
  FakeIbverbs::setAtomics(false);
  auto outcomes = runIb(2, fakeConfig(IbSignalMode::kAtomic),
                        [](Communicator& comm) { comm.connect(1 - comm.rank(), Transport::kIb, 1); });
  for (const RankOutcome& outcome : outcomes) {
    EXPECT_EQ(outcome.category, ErrorCategory::kTransport);
    EXPECT_TRUE(contains(outcome.message,
                         "(device fake_ib0 port 1): the device has no RDMA atomics; set "
                         "LOOM_IB_SIGNAL=imm"))
        << outcome.message;
  }
  runAllPairs(2, IbSignalMode::kWriteWithImm);  // which works without them
}

// Thousands of signals, each after its own small write: the send queue (256 entries) and the signal
// ring wrap many times, and in immediate mode the receiver's pace throttles the sender.
void manySignals(IbSignalMode mode) {
  constexpr uint64_t kCount = 3000;
  runOneWay(
      mode, kCount * 8,
      [&](Communicator&, OneWay& way) {
        auto* words = reinterpret_cast<uint64_t*>(way.source.data());
        for (uint64_t i = 0; i < kCount; ++i) {
          words[i] = i + 1;
          way.connection->write(way.targetMemory, i * 8, way.sourceMemory, i * 8, 8);
          way.connection->writeValue(way.counterMemory, 0, i + 1);
        }
        way.connection->flush(5000);
      },
      [&](Communicator&, OneWay& way) {
        const auto* words = reinterpret_cast<const uint64_t*>(way.target.data());
        uint64_t last = 0;
        std::string problem;
        const bool done = waitUntil([&] {
          const uint64_t value = load(way.counter);
          if (value < last)
            problem = "the counter went back from " + std::to_string(last) + " to " + std::to_string(value);
          for (; last < value && problem.empty(); ++last) {
            if (words[last] != last + 1) problem = "word " + std::to_string(last) + " is not in place";
          }
          return value == kCount || !problem.empty();
        });
        EXPECT_TRUE(done) << "the counter stopped at " << last;
        EXPECT_EQ(problem, "");
      });
}

TEST_F(IbConnectionTest, ThousandsOfSignalsWithAtomics) { manySignals(IbSignalMode::kAtomic); }
TEST_F(IbConnectionTest, ThousandsOfSignalsWithImmediates) { manySignals(IbSignalMode::kWriteWithImm); }

TEST_F(IbConnectionTest, FiftyConnectDestroyCyclesLeaveNothingBehind) {
  for (IbSignalMode mode : {IbSignalMode::kWriteWithImm, IbSignalMode::kAtomic}) {
    const size_t tableBefore = MemoryTable::process().size();
    auto outcomes = runIb(2, fakeConfig(mode), [&](Communicator& comm) {
      const int peer = 1 - comm.rank();
      for (int cycle = 0; cycle < 50; ++cycle) {
        {
          std::vector<uint8_t> data = randomBytes(100, cycle);
          std::vector<uint8_t> target(100);
          uint64_t counter = 0;
          RegisteredMemory source = comm.registerMemory(data.data(), 100, Transport::kIb);
          RegisteredMemory mine = comm.registerMemory(target.data(), 100, Transport::kIb);
          RegisteredMemory myCounter = comm.registerMemory(&counter, 8, Transport::kIb);
          auto connection = comm.connect(peer, Transport::kIb, uint64_t(cycle));
          comm.sendMemory(mine, peer, 1);
          comm.sendMemory(myCounter, peer, 2);
          RegisteredMemory theirs = comm.recvMemory(peer, 1);
          RegisteredMemory theirCounter = comm.recvMemory(peer, 2);
          connection->write(theirs, 0, source, 0, 100);
          connection->writeValue(theirCounter, 0, 1);
          connection->flush(5000);
          EXPECT_TRUE(waitUntil([&] { return load(counter) == 1; }));
          EXPECT_EQ(target, randomBytes(100, cycle));
          comm.bootstrap().barrier();  // the peer is done with this rank's memory
        }
        comm.bootstrap().barrier();  // both ranks released this cycle's connection and memory
        if (comm.rank() == 0) {
          const FakeIbverbsCounts live = FakeIbverbs::live();
          EXPECT_EQ(live.qps, 0u) << "cycle " << cycle;
          EXPECT_EQ(live.cqs, 0u) << "cycle " << cycle;
          EXPECT_EQ(live.mrs, 0u) << "cycle " << cycle;
          EXPECT_EQ(live.pds, 2u) << "cycle " << cycle;  // one context per communicator, opened once
        }
        comm.bootstrap().barrier();
      }
    });
    expectAllOk(outcomes);
    EXPECT_EQ(MemoryTable::process().size(), tableBefore);
    EXPECT_EQ(FakeIbverbs::live(), FakeIbverbsCounts{});
  }
}

}  // namespace
}  // namespace loom::ibtest
