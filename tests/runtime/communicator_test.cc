// Communicator and registered memory without a GPU: ranks as threads on loopback, host memory.

#include <gtest/gtest.h>

#include <numeric>

#include "communicator_test_util.hpp"
#include "loom/error.hpp"
#include "memory_table.hpp"
#include "registered_memory.hpp"

namespace loom {
namespace {

using testing::runCommunicators;

TEST(Communicator, KnowsRanksNodesAndLocalRanks) {
  auto outcomes = runCommunicators(3, [](Communicator& comm) {
    EXPECT_EQ(comm.worldSize(), 3);
    EXPECT_EQ(comm.nodeCount(), 1);  // threads of one process share a host
    EXPECT_EQ(comm.localWorldSize(), 3);
    EXPECT_EQ(comm.localRank(), comm.rank());
    for (int r = 0; r < 3; ++r) EXPECT_EQ(comm.node(r), 0);
    EXPECT_THROW(comm.node(3), Error);
  });
  for (const auto& outcome : outcomes) EXPECT_TRUE(outcome.ok) << outcome.message;
}

TEST(Communicator, HostMemoryTravelsAndStaysUsableInTheSameProcess) {
  auto outcomes = runCommunicators(2, [](Communicator& comm) {
    std::vector<uint64_t> mine(1000);
    std::iota(mine.begin(), mine.end(), uint64_t(comm.rank()) * 1000000);
    RegisteredMemory local = comm.registerMemory(mine.data(), mine.size() * 8, Transport::kTcp);
    EXPECT_TRUE(local.isLocal());
    EXPECT_EQ(local.location(), MemoryLocation::kHost);
    EXPECT_EQ(local.deviceId(), -1);
    const int peer = 1 - comm.rank();
    comm.sendMemory(local, peer, 7);
    RegisteredMemory remote = comm.recvMemory(peer, 7);
    EXPECT_EQ(remote.ownerRank(), peer);
    EXPECT_EQ(remote.bytes(), 8000u);
    EXPECT_EQ(remote.transports(), TransportFlags(Transport::kTcp));
    ASSERT_NE(remote.data(), nullptr);  // same process: the address is usable as it is
    EXPECT_EQ(static_cast<uint64_t*>(remote.data())[999], uint64_t(peer) * 1000000 + 999);
    comm.bootstrap().barrier();
  });
  for (const auto& outcome : outcomes) EXPECT_TRUE(outcome.ok) << outcome.message;
}

TEST(Communicator, RejectsBadArguments) {
  auto outcomes = runCommunicators(2, [](Communicator& comm) {
    uint64_t word = 0;
    EXPECT_THROW(comm.registerMemory(nullptr, 8, Transport::kTcp), Error);
    EXPECT_THROW(comm.registerMemory(&word, 0, Transport::kTcp), Error);
    EXPECT_THROW(comm.registerMemory(&word, 8, TransportFlags()), Error);
    try {
      comm.registerMemory(&word, 8, Transport::kCudaIpc);
      ADD_FAILURE() << "CUDA IPC of host memory was accepted";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("CUDA IPC needs device memory"), std::string::npos) << error.what();
    }
    EXPECT_THROW(comm.connect(comm.rank(), Transport::kTcp, 1), Error);
    EXPECT_THROW(comm.connect(5, Transport::kTcp, 1), Error);
    EXPECT_THROW(comm.sendMemory(RegisteredMemory(), 1 - comm.rank(), 1), Error);
  });
  for (const auto& outcome : outcomes) EXPECT_TRUE(outcome.ok) << outcome.message;
}

TEST(RegisteredMemory, SerialisationRoundTripsAndRejectsDamage) {
  auto outcomes = runCommunicators(2, [](Communicator& comm) {
    if (comm.rank() != 0) return;
    std::vector<uint8_t> buffer(4096);
    RegisteredMemory memory = comm.registerMemory(buffer.data() + 64, 1024, Transport::kTcp);
    std::vector<uint8_t> bytes = memory.serialize();
    auto parsed = parseRegisteredMemory(bytes);
    EXPECT_EQ(parsed->id, memory.impl().id);
    EXPECT_EQ(parsed->address, reinterpret_cast<uint64_t>(buffer.data() + 64));
    EXPECT_EQ(parsed->bytes, 1024u);
    EXPECT_EQ(parsed->ownerRank, 0);
    EXPECT_EQ(parsed->transports, TransportFlags(Transport::kTcp));
    EXPECT_EQ(RegisteredMemory(parsed).serialize(), bytes);
    for (size_t cut : {size_t(0), size_t(3), bytes.size() / 2, bytes.size() - 1}) {
      EXPECT_THROW(parseRegisteredMemory(std::span(bytes.data(), cut)), Error) << "cut at " << cut;
    }
    std::vector<uint8_t> longer = bytes;
    longer.push_back(0);
    EXPECT_THROW(parseRegisteredMemory(longer), Error);
    std::vector<uint8_t> wrongMagic = bytes;
    wrongMagic[0] ^= 0xff;
    EXPECT_THROW(parseRegisteredMemory(wrongMagic), Error);
  });
  for (const auto& outcome : outcomes) EXPECT_TRUE(outcome.ok) << outcome.message;
}

TEST(RegisteredMemory, ThousandCreateDestroyCyclesLeaveNothingBehind) {
  auto outcomes = runCommunicators(2, [](Communicator& comm) {
    // The table is the process's, shared by both rank threads: count between barriers.
    comm.bootstrap().barrier();
    const size_t before = MemoryTable::process().size();
    comm.bootstrap().barrier();
    std::vector<uint8_t> buffer(4096);
    for (int cycle = 0; cycle < 1000; ++cycle) {
      RegisteredMemory local = comm.registerMemory(buffer.data() + cycle % 64, 1024, Transport::kTcp);
      comm.sendMemory(local, 1 - comm.rank(), uint64_t(cycle));
      RegisteredMemory remote = comm.recvMemory(1 - comm.rank(), uint64_t(cycle));
      EXPECT_EQ(remote.bytes(), 1024u);
    }
    comm.bootstrap().barrier();  // both ranks' registrations are gone by now
    EXPECT_EQ(MemoryTable::process().size(), before);
  });
  for (const auto& outcome : outcomes) EXPECT_TRUE(outcome.ok) << outcome.message;
}

}  // namespace
}  // namespace loom
