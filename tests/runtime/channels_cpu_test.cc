// Semaphores, memory channels, LL packets, the FIFO and device-side timeouts on host threads and
// host memory: the same host-device functions the GPU runs, driven by threads (as the CPU backend
// will drive them). Ranks are threads of this process, so "mapped" peer memory is the peer's
// address itself.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "communicator_test_util.hpp"
#include "loom/device/copy.hpp"
#include "loom/device_diagnostics.hpp"
#include "loom/error.hpp"
#include "loom/fifo.hpp"
#include "loom/memory_channel.hpp"
#include "loom/proxy_activity.hpp"
#include "loom/proxy_service.hpp"
#include "loom/semaphore.hpp"

namespace loom {
namespace {

using testing::runCommunicators;

void expectAllOk(const std::vector<testing::RankOutcome>& outcomes) {
  for (size_t r = 0; r < outcomes.size(); ++r)
    EXPECT_TRUE(outcomes[r].ok) << "rank " << r << ": " << outcomes[r].message;
}

// Runs body(thread) on `threads` threads, as a thread block would.
void onThreads(uint32_t threads, const std::function<void(uint32_t)>& body) {
  std::vector<std::thread> pool;
  for (uint32_t t = 0; t < threads; ++t) pool.emplace_back(body, t);
  for (auto& thread : pool) thread.join();
}

std::vector<uint8_t> randomBytes(uint64_t seed, size_t bytes) {
  std::mt19937_64 random(seed);
  std::vector<uint8_t> out(bytes);
  for (auto& byte : out) byte = uint8_t(random());
  return out;
}

// Two ranks, each with a host buffer registered and exchanged, and a memory channel to the other.
struct PairChannel {
  std::vector<uint8_t> buffer;
  RegisteredMemory local, remote;
  std::shared_ptr<MemorySemaphore> semaphore;
  std::unique_ptr<MemoryChannel> channel;

  PairChannel(Communicator& comm, size_t bytes, uint64_t tag) : buffer(bytes) {
    const int peer = 1 - comm.rank();
    local = comm.registerMemory(buffer.data(), bytes, Transport::kTcp);
    comm.sendMemory(local, peer, tag);
    remote = comm.recvMemory(peer, tag);
    semaphore = std::make_shared<MemorySemaphore>(comm, peer, tag);
    channel = std::make_unique<MemoryChannel>(semaphore, remote, local, local, 3);
  }
};

TEST(MemorySemaphoreOnHost, PingPongCountsEverySignal) {
  expectAllOk(runCommunicators(2, [](Communicator& comm) {
    MemorySemaphore semaphore(comm, 1 - comm.rank(), 1);
    device::MemorySemaphoreHandle handle = semaphore.deviceHandle();
    for (int i = 0; i < 20000; ++i) {
      if (comm.rank() == 0) {
        handle.signal();
        handle.wait();
      } else {
        handle.wait();
        handle.signal();
      }
    }
    EXPECT_EQ(*handle.inbound, 20000u);
    EXPECT_EQ(*handle.expected, 20000u);
    comm.bootstrap().barrier();
  }));
}

TEST(MemoryChannelOnHost, PutAndGetMoveExactBytes) {
  expectAllOk(runCommunicators(2, [](Communicator& comm) {
    const size_t bytes = 1 << 20;
    PairChannel pair(comm, 2 * bytes + 64, 2);
    std::vector<uint8_t> mine = randomBytes(100 + comm.rank(), 2 * bytes + 64);
    std::memcpy(pair.buffer.data(), mine.data(), mine.size());
    comm.bootstrap().barrier();
    device::MemoryChannelHandle handle = pair.channel->deviceHandle();
    // Put our first half (from a misaligned offset) into the peer's second half, then hand over.
    onThreads(8, [&](uint32_t t) { handle.put(bytes + 1, 3, bytes - 7, t, 8); });
    handle.signal();
    handle.wait();
    std::vector<uint8_t> theirs = randomBytes(100 + (1 - comm.rank()), 2 * bytes + 64);
    EXPECT_EQ(0, std::memcmp(pair.buffer.data() + bytes + 1, theirs.data() + 3, bytes - 7));
    EXPECT_EQ(0, std::memcmp(pair.buffer.data(), mine.data(), bytes + 1));  // untouched before the put
    comm.bootstrap().barrier();
    // Get: read the peer's last 64 bytes into our first 64.
    onThreads(4, [&](uint32_t t) { handle.get(2 * bytes, 0, 64, t, 4); });
    EXPECT_EQ(0, std::memcmp(pair.buffer.data(), theirs.data() + 2 * bytes, 64));
    comm.bootstrap().barrier();
  }));
}

TEST(MemoryChannelOnHost, PacketsCarryDataWithTheirFlagAndIgnoreStaleOnes) {
  expectAllOk(runCommunicators(2, [](Communicator& comm) {
    const uint64_t bytes = 4099;  // a partial last packet
    const uint64_t area = device::packetBufferBytes<device::LL16Packet>(bytes);
    const uint64_t payload = 2 * area, out = payload + 8192;
    PairChannel pair(comm, out + bytes, 3);
    device::MemoryChannelHandle handle = pair.channel->deviceHandle();
    for (uint32_t flag = 1; flag <= 5; ++flag) {
      std::vector<uint8_t> data = randomBytes(flag * 10 + comm.rank(), bytes);
      std::memcpy(pair.buffer.data() + payload, data.data(), bytes);
      const uint64_t offset = (flag % 2) * area;
      onThreads(4, [&](uint32_t t) {
        handle.putPackets(offset, payload, bytes, t, 4, flag);
        handle.unpackPackets(out, offset, bytes, t, 4, flag);
      });
      EXPECT_EQ(0, std::memcmp(pair.buffer.data() + out, randomBytes(flag * 10 + 1 - comm.rank(), bytes).data(), bytes))
          << "flag " << flag;
      const auto* packets = reinterpret_cast<const device::LL16Packet*>(pair.buffer.data() + offset);
      uint64_t value = 0;
      EXPECT_FALSE(packets[0].tryRead(flag + 2, value)) << "a packet matched a future flag";
    }
    comm.bootstrap().barrier();
  }));
}

TEST(MemoryChannelOnHost, GetPacketsPullsPacketsThePeerStagedLocally) {
  expectAllOk(runCommunicators(2, [](Communicator& comm) {
    const uint64_t bytes = 1003;
    const uint64_t area = device::packetBufferBytes<device::LL16Packet>(bytes);
    const uint64_t out = area + 64;
    PairChannel pair(comm, out + bytes, 5);
    std::vector<uint8_t> data = randomBytes(77 + comm.rank(), bytes);
    // Stage our own packets in our buffer (flag 9), then pull the peer's from its buffer.
    device::putPackets(reinterpret_cast<device::LL16Packet*>(pair.buffer.data()), data.data(), bytes, 9, 0, 1);
    device::MemoryChannelHandle handle = pair.channel->deviceHandle();
    onThreads(3, [&](uint32_t t) { handle.getPackets(out, 0, bytes, t, 3, 9); });
    EXPECT_EQ(0, std::memcmp(pair.buffer.data() + out, randomBytes(77 + 1 - comm.rank(), bytes).data(), bytes));
    comm.bootstrap().barrier();
  }));
}

TEST(LL8Packet, RoundTripsAndRejectsOtherFlags) {
  device::LL8Packet packet{};
  packet.write(0xdeadbeef, 42);
  uint32_t value = 0;
  EXPECT_TRUE(packet.tryRead(42, value));
  EXPECT_EQ(value, 0xdeadbeefu);
  EXPECT_FALSE(packet.tryRead(41, value));
  device::WaitContext context;
  EXPECT_EQ(packet.read(42, context), 0xdeadbeefu);
}

TEST(DeviceTimeout, AWaitNobodySignalsReportsRankChannelPeerAndCounts) {
  expectAllOk(runCommunicators(2, [](Communicator& comm) {
    PairChannel pair(comm, 256, 4);
    if (comm.rank() == 0) {
      device::MemoryChannelHandle handle = pair.channel->deviceHandle();
      handle.semaphore.waitContext.timeoutNs = 50 * 1000000;  // 50 ms instead of the default
      EXPECT_THROW(handle.wait(9), std::runtime_error);
      auto report = comm.deviceDiagnostics().report();
      ASSERT_TRUE(report.has_value());
      EXPECT_NE(report->find("rank 0, op 9: semaphore wait on channel 3 (peer 1) timed out"), std::string::npos)
          << *report;
      EXPECT_NE(report->find("expected count 1, saw 0"), std::string::npos) << *report;
      try {
        comm.deviceDiagnostics().check();
        ADD_FAILURE() << "check() did not throw";
      } catch (const Error& error) {
        EXPECT_EQ(error.category(), ErrorCategory::kTimeout);
      }
    }
    comm.bootstrap().barrier();
  }));
}

// A packet read names no peer: any departed rank of the communicator ends it, naming that rank, long
// before its timeout; the record says the kernel may return rather than trap.
TEST(DeviceTimeout, AWaitThatNamesNoPeerEndsWhenAnyRankDeparts) {
  DeviceDiagnostics diagnostics(0, 60'000, false);
  device::LL16Packet packet{};
  std::thread marker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    diagnostics.notePeerGone(70);
    diagnostics.notePeerGone(5);
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(packet.read(3, diagnostics.waitContext(), 11), std::runtime_error);
  marker.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  ASSERT_TRUE(diagnostics.endedCleanly());
  const std::string report = diagnostics.report().value_or("");
  EXPECT_NE(report.find("rank 0, op 11: packet read ended: rank 5's process is gone"), std::string::npos) << report;
  // The packet's flags, as a packet read says them, not as a count.
  EXPECT_NE(report.find("expected flag 3, the packet carried flag 0 (nothing written yet)"), std::string::npos)
      << report;
  try {
    diagnostics.check();
    ADD_FAILURE() << "check() did not throw";
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::kTransport);
  }
}

// A wait on one peer ends only for that peer: another rank's departure leaves it waiting for what comes.
TEST(DeviceTimeout, AWaitOnAPeerIgnoresOtherDepartures) {
  DeviceDiagnostics diagnostics(2, 60'000, false);
  diagnostics.notePeerGone(1);
  uint64_t counter = 0;
  auto poll = [&] { return device::loadAcquire(&counter); };
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    device::storeRelease(&counter, uint64_t(1));
  });
  const uint64_t seen = device::spinUntil(diagnostics.waitContext(4, 3), device::WaitKind::kSemaphore, 2, 1, poll,
                                          [](uint64_t value) { return value >= 1; });
  late.join();
  EXPECT_EQ(seen, 1u);
  EXPECT_FALSE(diagnostics.report().has_value());
  diagnostics.notePeerGone(3);
  EXPECT_THROW(device::spinUntil(diagnostics.waitContext(4, 3), device::WaitKind::kSemaphore, 2, 2, poll,
                                 [](uint64_t value) { return value >= 2; }),
               std::runtime_error);
  const std::string report = diagnostics.report().value_or("");
  EXPECT_NE(report.find("rank 2, op 2: semaphore wait on channel 4 ended: rank 3's process is gone"), std::string::npos)
      << report;
}

TEST(DeviceTimeout, EnvironmentValueIsChecked) {
  setenv("LOOM_DEVICE_TIMEOUT_MS", "soon", 1);
  EXPECT_THROW(deviceTimeoutMs(), Error);
  setenv("LOOM_DEVICE_TIMEOUT_MS", "250", 1);
  EXPECT_EQ(deviceTimeoutMs(), 250);
  unsetenv("LOOM_DEVICE_TIMEOUT_MS");
  EXPECT_EQ(deviceTimeoutMs(), kDefaultDeviceTimeoutMs);
}

// The GPU's copy (run here with its threads one after another): every alignment of either end and
// sizes around the vector and head boundaries give exactly the source's bytes, and nothing outside the
// destination changes. The buffers have room around both ends: a source misaligned against its
// destination is read in the aligned vectors around it.
TEST(VectorisedCopy, EveryAlignmentOfEitherEndCopiesExactly) {
  std::vector<uint8_t> source(2 * 4096 + 64);
  std::mt19937 generator(5);
  for (uint8_t& byte : source) byte = uint8_t(generator());
  alignas(16) static uint8_t target[2 * 4096 + 64];
  const std::vector<uint64_t> sizes = {0, 1, 7, 15, 16, 17, 31, 32, 33, 63, 100, 1000, 4096, 4111, 8000};
  for (uint32_t from = 0; from < 16; ++from) {
    for (uint32_t to = 0; to < 16; ++to) {
      for (uint64_t bytes : sizes) {
        for (uint32_t threads : {1u, 5u, 32u}) {
          std::memset(target, 0xa5, sizeof(target));
          // Aligned bases (the vector's own alignment is 16), then the ends' offsets.
          const uint8_t* src =
              reinterpret_cast<const uint8_t*>((reinterpret_cast<uintptr_t>(source.data()) + 31) / 16 * 16) + from;
          uint8_t* dst = target + 16 + to;
          for (uint32_t thread = 0; thread < threads; ++thread) {
            device::copyVectorised(dst, src, bytes, thread, threads);
          }
          SCOPED_TRACE("source at 16k + " + std::to_string(from) + ", destination at 16k + " + std::to_string(to) +
                       ", " + std::to_string(bytes) + " bytes, " + std::to_string(threads) + " threads");
          ASSERT_EQ(std::memcmp(dst, src, bytes), 0);
          for (size_t i = 0; i < sizeof(target); ++i) {
            if (target + i < dst || target + i >= dst + bytes) {
              ASSERT_EQ(target[i], 0xa5) << "byte " << i;
            }
          }
        }
      }
    }
  }
}

TEST(FifoOnHost, TriggersArriveInOrderThroughASmallRingWithBackPressure) {
  Fifo fifo(4, /*onDevice=*/false);
  device::WaitContext wait;
  wait.timeoutNs = int64_t(10) * 1000000000;
  device::FifoHandle handle = fifo.deviceHandle(wait);
  constexpr uint64_t kTriggers = 5000;
  std::atomic<uint64_t> lastSync{0};
  std::thread pusher([&] {
    for (uint64_t i = 0; i < kTriggers; ++i) {
      const uint64_t meta =
          device::ProxyTrigger::makeMeta(device::kTriggerData, uint32_t(i % 7), uint32_t(i % 11), uint32_t(i % 13));
      const uint64_t position = handle.push(i << 33, i * 3, i + (uint64_t(1) << 40), meta);
      EXPECT_EQ(position, i);
      if (i % 1000 == 999) {
        handle.sync(position);  // a flush: returns once the consumer is past it
        lastSync = i;
        EXPECT_GT(fifo.tail(), i);
      }
    }
  });
  for (uint64_t i = 0; i < kTriggers; ++i) {
    std::optional<device::ProxyTrigger> trigger;
    while (!(trigger = fifo.poll())) std::this_thread::yield();
    EXPECT_EQ(trigger->dstOffset, i << 33);  // 64-bit offsets and sizes travel whole
    EXPECT_EQ(trigger->srcOffset, i * 3);
    EXPECT_EQ(trigger->bytes, i + (uint64_t(1) << 40));
    EXPECT_EQ(trigger->flags(), uint64_t(device::kTriggerData));
    EXPECT_EQ(trigger->semaphore(), i % 7);
    EXPECT_EQ(trigger->dstMemory(), i % 11);
    EXPECT_EQ(trigger->srcMemory(), i % 13);
    fifo.pop();
  }
  pusher.join();
  EXPECT_EQ(lastSync.load(), 4999u);
  EXPECT_FALSE(fifo.poll().has_value());
}

TEST(FifoOnHost, APushIntoAFullRingThatNobodyDrainsTimesOut) {
  Fifo fifo(2, false);
  DeviceDiagnostics diagnostics(5, 30, false);
  device::FifoHandle handle = fifo.deviceHandle(diagnostics.waitContext(1, 2));
  handle.push(0, 0, 0, device::ProxyTrigger::makeMeta(device::kTriggerSignal, 0, 0, 0));
  handle.push(0, 0, 0, device::ProxyTrigger::makeMeta(device::kTriggerSignal, 0, 0, 0));
  EXPECT_THROW(handle.push(0, 0, 0, device::ProxyTrigger::makeMeta(device::kTriggerSignal, 0, 0, 0), 4),
               std::runtime_error);
  auto report = diagnostics.report();
  ASSERT_TRUE(report.has_value());
  EXPECT_NE(report->find("rank 5, op 4: port channel push (FIFO full) on channel 1 (peer 2) timed out after 30 ms"),
            std::string::npos)
      << *report;
  EXPECT_THROW(Fifo(0, false), Error);
}

// The whole port-channel path on host memory: a host thread in the GPU's role pushes triggers, the
// proxy carries them out over a TCP connection, the peer's host semaphore counts the signals.
TEST(PortChannelOnHost, PutSignalFlushThroughTheProxyOverTcp) {
  expectAllOk(runCommunicators(2, [](Communicator& comm) {
    const int peer = 1 - comm.rank();
    const uint64_t bytes = (3 << 20) + 5;
    std::vector<uint8_t> buffer = randomBytes(200 + comm.rank(), 2 * bytes);
    RegisteredMemory local = comm.registerMemory(buffer.data(), buffer.size(), Transport::kTcp);
    comm.sendMemory(local, peer, 1);
    RegisteredMemory remote = comm.recvMemory(peer, 1);
    std::shared_ptr<Connection> connection = comm.connect(peer, Transport::kTcp, 1);
    auto semaphore = std::make_shared<HostSemaphore>(comm, connection, 1);
    ProxyService proxy(comm, 8);
    device::PortChannelHandle handle =
        proxy.portChannel(proxy.addSemaphore(semaphore), proxy.addMemory(remote), proxy.addMemory(local), 4);
    proxy.start();
    for (int round = 0; round < 20; ++round) {  // more triggers than FIFO slots
      handle.put(bytes + 1 + round, round, 1000);
    }
    handle.putWithSignalAndFlush(bytes, 0, bytes);
    handle.wait();  // the peer's signal: its data is here
    const std::vector<uint8_t> theirs = randomBytes(200 + peer, 2 * bytes);
    EXPECT_EQ(0, std::memcmp(buffer.data() + bytes, theirs.data(), bytes));
    EXPECT_EQ(0, std::memcmp(buffer.data(), randomBytes(200 + comm.rank(), bytes).data(), bytes));
    proxy.check();
    EXPECT_EQ(proxy.triggersDone(), 21u);
    comm.bootstrap().barrier();  // both flushed before either connection goes
  }));
}

// Two ranks, each with 4096 bytes registered and exchanged, a TCP connection and a port channel to the
// other through a proxy of its own (not started).
struct PortPair {
  std::vector<uint8_t> buffer = std::vector<uint8_t>(4096);
  RegisteredMemory local, remote;
  ProxyService proxy;
  device::PortChannelHandle handle;

  PortPair(Communicator& comm, uint64_t tag, int channel) : proxy(comm) {
    const int peer = 1 - comm.rank();
    local = comm.registerMemory(buffer.data(), buffer.size(), Transport::kTcp);
    comm.sendMemory(local, peer, tag);
    remote = comm.recvMemory(peer, tag);
    auto semaphore = std::make_shared<HostSemaphore>(comm, comm.connect(peer, Transport::kTcp, tag), tag);
    handle = proxy.portChannel(proxy.addSemaphore(semaphore), proxy.addMemory(remote), proxy.addMemory(local), channel);
  }
};

TEST(PortChannelOnHost, AFailedTriggerIsLoggedKeptAndThrownByCheck) {
  expectAllOk(runCommunicators(2, [](Communicator& comm) {
    PortPair pair(comm, 2, -1);
    ProxyService& proxy = pair.proxy;
    device::PortChannelHandle& handle = pair.handle;
    proxy.start();
    handle.put(4000, 0, 200);  // past the end of the peer's 4096 bytes
    handle.flush();
    try {
      proxy.check();
      ADD_FAILURE() << "the failed trigger was not kept";
    } catch (const Error& error) {
      EXPECT_EQ(error.category(), ErrorCategory::kInvalidArgument);
      EXPECT_NE(std::string(error.what()).find("dst range [4000, 4000 + 200) is outside its 4096 bytes"),
                std::string::npos)
          << error.what();
    }
    EXPECT_THROW(proxy.portChannel(7, 0, 0), Error);
    comm.bootstrap().barrier();
  }));
}

// A port-channel wait that runs out says what the proxy was doing: not running, or looking for a
// trigger it never saw (the diagnostics of the communicator whose channel it is watch the proxy).
TEST(PortChannelOnHost, AFlushThatRunsOutSaysWhatTheProxyWasDoing) {
  expectAllOk(runCommunicators(2, [](Communicator& comm) {
    PortPair pair(comm, 5, 2);
    ProxyService& proxy = pair.proxy;
    device::PortChannelHandle& handle = pair.handle;
    handle.fifo.waitContext.timeoutNs = 50 * 1000000;
    if (comm.rank() == 0) {
      // Nothing was pushed, so no proxy finishes position 0.
      EXPECT_THROW(handle.fifo.sync(0, 6), std::runtime_error);
      std::string report = comm.deviceDiagnostics().report().value_or("");
      // (The report names the communicator's timeout, not the 50 ms this handle was given.)
      EXPECT_NE(report.find("rank 0, op 6: port channel flush on channel 2 (peer 1) timed out after "),
                std::string::npos)
          << report;
      EXPECT_NE(report.find(" ms: the proxy did not finish the trigger (needed tail 1, saw 0); the proxy thread is "
                            "not running"),
                std::string::npos)
          << report;
      comm.deviceDiagnostics().clear();
      proxy.start();
      EXPECT_THROW(handle.fifo.sync(0, 7), std::runtime_error);
      report = comm.deviceDiagnostics().report().value_or("");
      EXPECT_NE(report.find("op 7: port channel flush"), std::string::npos) << report;
      // (How long: the wait's 50 ms and more; under sanitizers the spin runs slowly.)
      EXPECT_NE(report.find("; the proxy thread has looked for the trigger at position 0 for "), std::string::npos)
          << report;
      EXPECT_NE(report.find("without seeing it"), std::string::npos) << report;
    }
    comm.bootstrap().barrier();
  }));
}

TEST(ProxyActivity, SaysWhichStepOfWhichTriggerAndForHowLong) {
  ProxyActivity activity;
  EXPECT_EQ(activity.describe(), "the proxy thread is not running (never started, or stopped)");
  activity.enter(ProxyActivity::Step::kSignal, 4, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const std::string text = activity.describe();
  EXPECT_EQ(
      text.rfind("the proxy thread has been inside the signal of the trigger at position 4 (to rank 0) for 0.", 0), 0u)
      << text;
  EXPECT_NE(text.find(" s: a call that has not returned"), std::string::npos) << text;
  const double seconds = std::stod(text.substr(text.find(" for ") + 5));
  EXPECT_GE(seconds, 0.025) << text;
  EXPECT_LT(seconds, 5.0) << text;
  activity.enter(ProxyActivity::Step::kFinishReads, 9);
  EXPECT_EQ(activity.describe().rfind("the proxy thread has been inside the wait for its reads of the trigger at "
                                      "position 9 for ",
                                      0),
            0u)
      << activity.describe();
  activity.stopped();
  EXPECT_NE(activity.describe().find("not running"), std::string::npos);
}

// A removed memory or semaphore is let go once the triggers queued before are carried out (a peer's
// memory is unmapped with it), its id is reused, and nothing can name it meanwhile.
TEST(PortChannelOnHost, RemovedIdsAreLetGoAfterTheQueuedTriggersAndReused) {
  expectAllOk(runCommunicators(2, [](Communicator& comm) {
    const int peer = 1 - comm.rank();
    std::vector<uint8_t> buffer = randomBytes(300 + comm.rank(), 1 << 16);
    RegisteredMemory local = comm.registerMemory(buffer.data(), buffer.size(), Transport::kTcp);
    comm.sendMemory(local, peer, 3);
    RegisteredMemory remote = comm.recvMemory(peer, 3);
    auto semaphore = std::make_shared<HostSemaphore>(comm, comm.connect(peer, Transport::kTcp, 3), 3);
    ProxyService proxy(comm);
    const uint32_t semaphoreId = proxy.addSemaphore(semaphore);
    const uint32_t remoteId = proxy.addMemory(remote);
    const uint32_t localId = proxy.addMemory(local);
    device::PortChannelHandle handle = proxy.portChannel(semaphoreId, remoteId, localId);
    proxy.start();
    const uint64_t half = buffer.size() / 2;                             // the first half goes into the peer's second
    for (int round = 0; round < 30; ++round) handle.put(half, 0, half);  // still queued when removed
    handle.signal();
    proxy.remove({remoteId});  // waits for the puts above, which name it
    proxy.check();
    EXPECT_EQ(proxy.triggersDone(), 31u);
    handle.wait();  // the peer's puts have landed too
    EXPECT_EQ(0, std::memcmp(buffer.data() + half, randomBytes(300 + peer, buffer.size()).data(), half));
    EXPECT_THROW(proxy.portChannel(semaphoreId, remoteId, localId), Error);
    EXPECT_EQ(proxy.addMemory(remote), remoteId);  // the id is reused
    proxy.remove({remoteId, localId}, {semaphoreId});
    EXPECT_THROW(proxy.portChannel(semaphoreId, remoteId, localId), Error);
    EXPECT_EQ(proxy.addSemaphore(semaphore), semaphoreId);
    proxy.remove({7}, {9});  // ids never added: nothing happens
    comm.bootstrap().barrier();
  }));
}

}  // namespace
}  // namespace loom
