// The libibverbs loader and the InfiniBand context (device choice, registration) against the fake
// verbs layer (fake_ibverbs.hpp).

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
TEST(IbVerbs, StatusWorksWithOrWithoutTheLibrary) {
  const IbverbsStatus status = ibverbsStatus();
  const IbverbsApi& api = systemIbverbsApi();
  EXPECT_EQ(status.loaded, api.loaded);
  if (!status.loaded) {
    EXPECT_FALSE(status.reason.empty());
    EXPECT_TRUE(status.devices.empty());
    return;
  }
  EXPECT_TRUE(status.reason.empty()) << status.reason;
  for (auto* entry : {reinterpret_cast<void*>(api.getDeviceList), reinterpret_cast<void*>(api.openDevice),
                      reinterpret_cast<void*>(api.queryPort), reinterpret_cast<void*>(api.regMr),
                      reinterpret_cast<void*>(api.createQp), reinterpret_cast<void*>(api.modifyQp),
                      reinterpret_cast<void*>(api.postSend), reinterpret_cast<void*>(api.postRecv),
                      reinterpret_cast<void*>(api.pollCq), reinterpret_cast<void*>(api.wcStatusStr)}) {
    EXPECT_NE(entry, nullptr);
  }
  EXPECT_STREQ(api.wcStatusStr(IBV_WC_REM_ACCESS_ERR), "remote access error");
}

TEST(IbVerbs, SystemLibraryWithoutDevicesIsATransportError) {
  const IbverbsStatus status = ibverbsStatus();
  if (status.loaded && !status.devices.empty()) GTEST_SKIP() << "this host has RDMA devices";
  IbConfig config;  // no device named: the first with an active port
  Error error = thrownBy([&] { openIbContext(config); });
  EXPECT_EQ(error.category(), ErrorCategory::kTransport);
  if (status.loaded) {
    EXPECT_TRUE(contains(error.what(), "no RDMA device") || contains(error.what(), "ibv_get_device_list"))
        << error.what();
  } else {
    EXPECT_TRUE(contains(error.what(), "libibverbs is not available: ")) << error.what();
  }
}

TEST_F(IbContextTest, MissingLibraryIsAClearTransportError) {
  IbverbsApi missing;
  missing.reason = "libibverbs.so.1: cannot open shared object file: No such file or directory";
  setIbverbsApiForTesting(&missing);
  auto outcomes = runIb(2, fakeConfig(), [](Communicator& comm) {
    uint64_t word = 0;
    for (auto attempt : std::vector<std::function<void()>>{[&] { comm.registerMemory(&word, 8, Transport::kIb); },
                                                           [&] { comm.connect(1 - comm.rank(), Transport::kIb, 1); }}) {
      Error error = thrownBy(attempt);
      EXPECT_EQ(error.category(), ErrorCategory::kTransport);
      EXPECT_STREQ(error.what(),
                   "libibverbs is not available: libibverbs.so.1: cannot open shared object file: No such file or "
                   "directory");
    }
    // Everything else still works on a host without InfiniBand.
    EXPECT_NO_THROW(comm.registerMemory(&word, 8, Transport::kTcp));
  });
  setIbverbsApiForTesting(&FakeIbverbs::api());
  expectAllOk(outcomes);
}

TEST_F(IbContextTest, NamesAMissingDeviceADownPortAndABadPort) {
  IbConfig config = fakeConfig();
  config.device = "mlx5_9";
  Error error = thrownBy([&] { openIbContext(config); });
  EXPECT_EQ(error.category(), ErrorCategory::kTransport);
  EXPECT_STREQ(error.what(), "InfiniBand: no RDMA device named 'mlx5_9' (devices: fake_ib0)");

  FakeIbverbs::setPortState(IBV_PORT_DOWN);
  error = thrownBy([&] { openIbContext(fakeConfig()); });
  EXPECT_STREQ(error.what(), "InfiniBand: fake_ib0 port 1 is DOWN, not ACTIVE");
  error = thrownBy([&] { openIbContext(IbConfig{}); });
  EXPECT_STREQ(error.what(), "InfiniBand: no RDMA device with port 1 ACTIVE (fake_ib0 port 1 is DOWN, not ACTIVE)");

  FakeIbverbs::setPortState(IBV_PORT_ACTIVE);
  config = fakeConfig();
  config.port = 2;
  error = thrownBy([&] { openIbContext(config); });
  EXPECT_TRUE(contains(error.what(), "fake_ib0 port 2: ibv_query_port failed: Invalid argument")) << error.what();
  config.port = 1;
  config.gidIndex = 9;
  error = thrownBy([&] { openIbContext(config); });
  EXPECT_EQ(error.category(), ErrorCategory::kInvalidArgument);
  EXPECT_TRUE(contains(error.what(), "GID index 9 is outside the port's table of 4")) << error.what();
}

TEST_F(IbContextTest, RegistrationFillsKeysAndFailuresNameRankVerbAndErrno) {
  std::shared_ptr<IbContext> context = openIbContext(fakeConfig());
  uint64_t words[4] = {};
  RegisteredMemory::Impl memory;
  memory.ownerRank = 3;
  memory.localPointer = words;
  memory.bytes = sizeof(words);
  FakeIbverbs::failNextRegMr(ENOMEM);
  Error error = thrownBy([&] { registerIbMemory(*context, memory); });
  EXPECT_EQ(error.category(), ErrorCategory::kTransport);
  EXPECT_EQ(std::string(error.what()),
            "rank 3: registering 32 bytes of host memory on device fake_ib0 port 1: ibv_reg_mr failed: " +
                std::string(std::strerror(ENOMEM)) + " (errno " + std::to_string(ENOMEM) + ")");
  EXPECT_EQ(memory.ibRegion, nullptr);

  registerIbMemory(*context, memory);
  EXPECT_NE(memory.ibLkey, 0u);
  EXPECT_NE(memory.ibRkey, 0u);
  ASSERT_NE(memory.ibRegion, nullptr);
  EXPECT_EQ(FakeIbverbs::live().mrs, 1u);
  // The region keeps the context open after the communicator's reference goes.
  context.reset();
  EXPECT_EQ(FakeIbverbs::live().pds, 1u);
  memory.ibRegion.reset();
  EXPECT_EQ(FakeIbverbs::live(), FakeIbverbsCounts{});
}

TEST_F(IbContextTest, RegistrationsTravelWithTheirRemoteKey) {
  std::array<uint32_t, 2> rkeys{};
  auto outcomes = runIb(2, fakeConfig(), [&](Communicator& comm) {
    const int peer = 1 - comm.rank();
    std::vector<uint8_t> buffer(4096);
    RegisteredMemory mine = comm.registerMemory(buffer.data() + 8, 1000, Transport::kIb | Transport::kTcp);
    EXPECT_NE(mine.impl().ibLkey, 0u);
    EXPECT_NE(mine.impl().ibRegion, nullptr);
    rkeys[comm.rank()] = mine.impl().ibRkey;
    auto parsed = parseRegisteredMemory(mine.serialize());
    EXPECT_EQ(parsed->ibRkey, mine.impl().ibRkey);
    EXPECT_EQ(parsed->ibLkey, 0u);  // the local key stays home
    EXPECT_EQ(RegisteredMemory(parsed).serialize(), mine.serialize());
    comm.sendMemory(mine, peer, 3);
    RegisteredMemory theirs = comm.recvMemory(peer, 3);
    comm.bootstrap().barrier();
    EXPECT_EQ(theirs.impl().ibRkey, rkeys[peer]);
    EXPECT_NE(rkeys[0], rkeys[1]);
    EXPECT_EQ(theirs.transports(), Transport::kIb | Transport::kTcp);
    comm.bootstrap().barrier();
  });
  expectAllOk(outcomes);
}

// Every rank writes blocks of random data of odd sizes (0 bytes, 1 byte, over 1 MiB) to every other
// rank, each followed by writeValue of a distinct random value into the peer's counter for it.
// While that runs, each rank watches its counters: every value it sees must be one of the values
// written, in the order written, with the data written before it already in place.

}  // namespace
}  // namespace loom::ibtest
