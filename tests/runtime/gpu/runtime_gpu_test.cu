// Runtime tests on real GPUs: memory channels (put, get, LL packets, semaphores), port channels over
// CUDA IPC and TCP, cuMem memory shared by file descriptor. Every rank runs every test in order;
// start with `python -m loom.launch -n 2 build/tests/loom_runtime_gpu_tests` (tests/runtime/
// test_runtime_gpu.py does, on 2 and 4 GPUs). Rank pairs: every rank talks to every other rank.

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>

#include "gpu_job.hpp"
#include "loom/error.hpp"
#include "loom/gpu_buffer.hpp"
#include "loom/memory_channel.hpp"
#include "loom/proxy_service.hpp"
#include "loom/semaphore.hpp"

namespace loom {
namespace {

testing::GpuJob* job = nullptr;

__global__ void putThenSignal(device::MemoryChannelHandle* channels, int count, uint64_t dstOffset, uint64_t srcOffset,
                              uint64_t bytes) {
  device::MemoryChannelHandle& channel = channels[blockIdx.x];
  channel.put(dstOffset, srcOffset, bytes, threadIdx.x, blockDim.x);
  __syncthreads();
  if (threadIdx.x == 0) {
    channel.signal();
    channel.wait();
  }
}

__global__ void getAfterHandshake(device::MemoryChannelHandle* channels, uint64_t dstOffset, uint64_t srcOffset,
                                  uint64_t bytes) {
  device::MemoryChannelHandle& channel = channels[blockIdx.x];
  channel.get(dstOffset, srcOffset, bytes, threadIdx.x, blockDim.x);
  __syncthreads();
  // Nobody may change the peer's buffer before every reader is done; the test only reads.
  if (threadIdx.x == 0) {
    channel.signal();
    channel.wait();
  }
}

__global__ void packetsRoundTrip(device::MemoryChannelHandle* channels, uint64_t outOffset, uint64_t bytes,
                                 uint32_t flag) {
  device::MemoryChannelHandle& channel = channels[blockIdx.x];
  channel.putPackets(0, 0, bytes, threadIdx.x, blockDim.x, flag);
  channel.unpackPackets(outOffset, 0, bytes, threadIdx.x, blockDim.x, flag);
}

__global__ void portPutSignalFlushWait(device::PortChannelHandle* channels, uint64_t dstOffset, uint64_t srcOffset,
                                       uint64_t bytes) {
  if (threadIdx.x != 0) return;
  device::PortChannelHandle& channel = channels[blockIdx.x];
  channel.putWithSignalAndFlush(dstOffset, srcOffset, bytes);
  channel.wait();
}

// Each rank stages its packets in its own buffer and pulls the peer's over NVLink.
__global__ void stageThenPull(device::MemoryChannelHandle* channels, uint64_t payload, uint64_t area, uint64_t out,
                              uint64_t bytes, uint32_t flag) {
  device::MemoryChannelHandle& channel = channels[blockIdx.x];
  auto* local = static_cast<uint8_t*>(channel.src);
  device::putPackets(reinterpret_cast<device::LL16Packet*>(local + area), local + payload, bytes, flag, threadIdx.x,
                     blockDim.x);
  channel.getPackets(out, area, bytes, threadIdx.x, blockDim.x, flag);
}

template <typename T>
T* toDevice(const std::vector<T>& values) {
  T* out = nullptr;
  LOOM_CUDA_OK(cudaMalloc(&out, values.size() * sizeof(T)));
  LOOM_CUDA_OK(cudaMemcpy(out, values.data(), values.size() * sizeof(T), cudaMemcpyHostToDevice));
  return out;
}

std::vector<uint8_t> fromDevice(const void* data, size_t bytes) {
  std::vector<uint8_t> out(bytes);
  LOOM_CUDA_OK(cudaMemcpy(out.data(), data, bytes, cudaMemcpyDeviceToHost));
  return out;
}

uint64_t pairTag(int a, int b, uint64_t base) { return base * 4096 + uint64_t(std::min(a, b)) * 64 + std::max(a, b); }

// Per peer: this rank's buffer (src, also where the peer writes into us at `half`), the peer's
// buffer mapped here, and a memory channel between them.
struct MeshChannels {
  std::vector<GpuBuffer> buffers;
  std::vector<device::MemoryChannelHandle> handles;  // block b talks to peers[b]
  std::vector<int> peers;
  std::vector<std::unique_ptr<MemoryChannel>> channels;

  MeshChannels(uint64_t bytes, uint64_t testTag, GpuAllocator allocator = GpuAllocator::kCudaMalloc) {
    Communicator& comm = *job->comm;
    for (int peer = 0; peer < comm.worldSize(); ++peer) {
      if (peer == comm.rank()) continue;
      buffers.emplace_back(bytes, allocator);
      RegisteredMemory local = comm.registerMemory(buffers.back().data(), bytes, Transport::kCudaIpc);
      const uint64_t tag = pairTag(comm.rank(), peer, testTag);
      comm.sendMemory(local, peer, tag);
      RegisteredMemory remote = comm.recvMemory(peer, tag);
      auto semaphore = std::make_shared<MemorySemaphore>(comm, peer, tag);
      channels.push_back(std::make_unique<MemoryChannel>(semaphore, remote, local, local, peer));
      handles.push_back(channels.back()->deviceHandle());
      peers.push_back(peer);
    }
  }
};

void fill(GpuBuffer& buffer, uint64_t seed) {
  std::vector<uint8_t> bytes = testing::patternBytes(seed, buffer.bytes());
  LOOM_CUDA_OK(cudaMemcpy(buffer.data(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
}

uint64_t seedOf(int owner, int reader, uint64_t round) { return round * 1000003 + uint64_t(owner) * 257 + reader; }

void checkPutsLanded(GpuAllocator allocator, uint64_t testTag) {
  const uint64_t bytes = (3 << 20) + 13;  // odd on purpose
  const uint64_t half = 1600000;          // the peer writes into the upper part, from a misaligned offset
  MeshChannels mesh(bytes + half, testTag, allocator);
  const int me = job->rank();
  for (size_t i = 0; i < mesh.peers.size(); ++i) fill(mesh.buffers[i], seedOf(me, mesh.peers[i], 1));
  job->bootstrap->barrier();  // a peer's put must not land before this rank's fill
  auto* handles = toDevice(mesh.handles);
  const uint64_t putBytes = bytes - half;
  putThenSignal<<<mesh.peers.size(), 512>>>(handles, int(mesh.peers.size()), half + 3, 5, putBytes);
  LOOM_CUDA_OK(cudaDeviceSynchronize());
  for (size_t i = 0; i < mesh.peers.size(); ++i) {
    std::vector<uint8_t> mine = fromDevice(mesh.buffers[i].data(), bytes + half);
    std::vector<uint8_t> theirs = testing::patternBytes(seedOf(mesh.peers[i], me, 1), bytes + half);
    std::vector<uint8_t> original = testing::patternBytes(seedOf(me, mesh.peers[i], 1), bytes + half);
    EXPECT_EQ(0, std::memcmp(mine.data() + half + 3, theirs.data() + 5, putBytes)) << "from peer " << mesh.peers[i];
    EXPECT_EQ(0, std::memcmp(mine.data(), original.data(), half + 3)) << "bytes before the put changed";
  }
  cudaFree(handles);
  job->bootstrap->barrier();
}

TEST(MemoryChannel, PutLandsExactlyAtOddSizesAndOffsets) { checkPutsLanded(GpuAllocator::kCudaMalloc, 1); }

TEST(MemoryChannel, CuMemAllocationSharedByFileDescriptor) { checkPutsLanded(GpuAllocator::kCuMem, 2); }

TEST(MemoryChannel, GetReadsThePeersBuffer) {
  const uint64_t bytes = (1 << 20) + 7;
  MeshChannels mesh(2 * bytes, 3);
  const int me = job->rank();
  for (size_t i = 0; i < mesh.peers.size(); ++i) fill(mesh.buffers[i], seedOf(me, mesh.peers[i], 2));
  job->bootstrap->barrier();  // every buffer is filled before anyone reads
  auto* handles = toDevice(mesh.handles);
  getAfterHandshake<<<mesh.peers.size(), 256>>>(handles, 16, bytes, bytes - 16);
  LOOM_CUDA_OK(cudaDeviceSynchronize());
  for (size_t i = 0; i < mesh.peers.size(); ++i) {
    std::vector<uint8_t> mine = fromDevice(mesh.buffers[i].data(), 2 * bytes);
    std::vector<uint8_t> theirs = testing::patternBytes(seedOf(mesh.peers[i], me, 2), 2 * bytes);
    EXPECT_EQ(0, std::memcmp(mine.data() + bytes, theirs.data() + 16, bytes - 16)) << "from peer " << mesh.peers[i];
  }
  cudaFree(handles);
  job->bootstrap->barrier();
}

TEST(MemoryChannel, PacketsArriveWithEveryNewFlagWithoutClearing) {
  // Layout of each per-peer buffer: payload | packet area for even calls | odd calls | output.
  const uint64_t bytes = 100003;
  const uint64_t area = (device::packetBufferBytes<device::LL16Packet>(bytes) + 255) / 256 * 256;
  const uint64_t payloadBytes = (bytes + 255) / 256 * 256;
  const uint64_t outOffset = payloadBytes + 2 * area;
  MeshChannels mesh(outOffset + bytes, 4);
  const int me = job->rank();
  std::vector<device::MemoryChannelHandle> handles = mesh.handles;
  for (uint32_t call = 1; call <= 4; ++call) {
    for (size_t i = 0; i < mesh.peers.size(); ++i) {
      std::vector<uint8_t> payload = testing::patternBytes(seedOf(me, mesh.peers[i], 10 + call), bytes);
      LOOM_CUDA_OK(cudaMemcpy(mesh.buffers[i].data(), payload.data(), bytes, cudaMemcpyHostToDevice));
      // Packets go to the area of this call's parity, in the peer's buffer and in ours.
      const uint64_t areaOffset = payloadBytes + (call % 2) * area;
      handles[i].dst = static_cast<uint8_t*>(mesh.handles[i].dst) + areaOffset;
      handles[i].packetBuffer = static_cast<uint8_t*>(mesh.handles[i].packetBuffer) + areaOffset;
    }
    auto* device = toDevice(handles);
    packetsRoundTrip<<<mesh.peers.size(), 256>>>(device, outOffset, bytes, call);
    LOOM_CUDA_OK(cudaDeviceSynchronize());
    cudaFree(device);
    for (size_t i = 0; i < mesh.peers.size(); ++i) {
      std::vector<uint8_t> out = fromDevice(static_cast<uint8_t*>(mesh.buffers[i].data()) + outOffset, bytes);
      EXPECT_EQ(out, testing::patternBytes(seedOf(mesh.peers[i], me, 10 + call), bytes))
          << "call " << call << " from peer " << mesh.peers[i];
    }
  }
  job->bootstrap->barrier();
}

TEST(MemoryChannel, GetPacketsPullsWhatThePeerStaged) {
  const uint64_t bytes = 65541;
  const uint64_t area = 128 * 1024, out = area + 2 * device::packetBufferBytes<device::LL16Packet>(bytes);
  MeshChannels mesh(out + bytes, 8);
  const int me = job->rank();
  for (size_t i = 0; i < mesh.peers.size(); ++i) {
    std::vector<uint8_t> payload = testing::patternBytes(seedOf(me, mesh.peers[i], 50), bytes);
    LOOM_CUDA_OK(cudaMemcpy(mesh.buffers[i].data(), payload.data(), bytes, cudaMemcpyHostToDevice));
  }
  auto* handles = toDevice(mesh.handles);
  stageThenPull<<<mesh.peers.size(), 512>>>(handles, 0, area, out, bytes, 77);
  LOOM_CUDA_OK(cudaDeviceSynchronize());
  for (size_t i = 0; i < mesh.peers.size(); ++i) {
    std::vector<uint8_t> got = fromDevice(static_cast<uint8_t*>(mesh.buffers[i].data()) + out, bytes);
    EXPECT_EQ(got, testing::patternBytes(seedOf(mesh.peers[i], me, 50), bytes)) << "from peer " << mesh.peers[i];
  }
  cudaFree(handles);
  job->bootstrap->barrier();
}

TEST(MemoryChannel, SemaphorePingPongKeepsCount) {
  MeshChannels mesh(4096, 5);
  auto* handles = toDevice(mesh.handles);
  // One block per peer; the lower rank of each pair serves first.
  for (size_t i = 0; i < mesh.peers.size(); ++i) {
    testing::pingPong<<<1, 32>>>(handles + i, 10000, job->rank() < mesh.peers[i]);
    LOOM_CUDA_OK(cudaDeviceSynchronize());
  }
  for (size_t i = 0; i < mesh.peers.size(); ++i) {
    uint64_t words[2];
    LOOM_CUDA_OK(cudaMemcpy(words, mesh.handles[i].semaphore.inbound, sizeof(words), cudaMemcpyDeviceToHost));
    EXPECT_EQ(words[0], 10000u) << "inbound count from peer " << mesh.peers[i];
    EXPECT_EQ(words[1], 10000u) << "expected count for peer " << mesh.peers[i];
  }
  cudaFree(handles);
  job->bootstrap->barrier();
}

void checkPortChannel(Transport transport, uint64_t testTag) {
  Communicator& comm = *job->comm;
  const uint64_t bytes = (5 << 20) + 3;
  ProxyService proxy(comm);
  std::vector<GpuBuffer> buffers;
  std::vector<device::PortChannelHandle> handles;
  std::vector<int> peers;
  for (int peer = 0; peer < comm.worldSize(); ++peer) {
    if (peer == comm.rank()) continue;
    const uint64_t tag = pairTag(comm.rank(), peer, testTag);
    std::shared_ptr<Connection> connection;
    try {
      connection = comm.connect(peer, transport, tag);
    } catch (const Error& error) {
      GTEST_SKIP() << transportName(transport) << " is not available: " << error.what();
    }
    buffers.emplace_back(2 * bytes + 8);
    fill(buffers.back(), seedOf(comm.rank(), peer, 30 + testTag));
    RegisteredMemory local = comm.registerMemory(buffers.back().data(), 2 * bytes + 8, transport);
    comm.sendMemory(local, peer, tag);
    RegisteredMemory remote = comm.recvMemory(peer, tag);
    auto semaphore = std::make_shared<HostSemaphore>(comm, connection, tag);
    handles.push_back(
        proxy.portChannel(proxy.addSemaphore(semaphore), proxy.addMemory(remote), proxy.addMemory(local), peer));
    peers.push_back(peer);
  }
  proxy.start();
  auto* device = toDevice(handles);
  portPutSignalFlushWait<<<peers.size(), 32>>>(device, bytes + 1, 0, bytes);
  LOOM_CUDA_OK(cudaDeviceSynchronize());
  proxy.check();
  for (size_t i = 0; i < peers.size(); ++i) {
    std::vector<uint8_t> mine = fromDevice(buffers[i].data(), 2 * bytes + 8);
    std::vector<uint8_t> theirs = testing::patternBytes(seedOf(peers[i], comm.rank(), 30 + testTag), 2 * bytes + 8);
    EXPECT_EQ(0, std::memcmp(mine.data() + bytes + 1, theirs.data(), bytes)) << "from peer " << peers[i];
  }
  cudaFree(device);
  job->bootstrap->barrier();
}

size_t openDescriptors() {
  size_t count = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) count += entry.exists() ? 1 : 0;
  return count;
}

// Registration, exchange, IPC mapping (both kinds) and release, a thousand times: device memory and
// descriptors must come back to where they were.
TEST(RegisteredMemory, ThousandCyclesWithMappingsLeakNothing) {
  Communicator& comm = *job->comm;
  auto cycle = [&](int i) {
    GpuBuffer buffer(1 << 21, i % 2 ? GpuAllocator::kCuMem : GpuAllocator::kCudaMalloc);
    RegisteredMemory local = comm.registerMemory(buffer.data(), buffer.bytes(), Transport::kCudaIpc);
    for (int peer = 0; peer < comm.worldSize(); ++peer) {
      if (peer != comm.rank()) comm.sendMemory(local, peer, pairTag(comm.rank(), peer, 100000 + i));
    }
    for (int peer = 0; peer < comm.worldSize(); ++peer) {
      if (peer == comm.rank()) continue;
      RegisteredMemory remote = comm.recvMemory(peer, pairTag(comm.rank(), peer, 100000 + i));
      ASSERT_NE(remote.data(), nullptr);
    }
    job->bootstrap->barrier();  // peers unmap before the owner frees
  };
  for (int i = 0; i < 10; ++i) cycle(i);  // warm-up: driver pools and the descriptor socket
  size_t freeBefore = 0, freeAfter = 0, total = 0;
  LOOM_CUDA_OK(cudaMemGetInfo(&freeBefore, &total));
  const size_t descriptorsBefore = openDescriptors();
  for (int i = 10; i < 1010; ++i) cycle(i);
  LOOM_CUDA_OK(cudaMemGetInfo(&freeAfter, &total));
  EXPECT_EQ(openDescriptors(), descriptorsBefore);
  EXPECT_GE(freeAfter + (8 << 20), freeBefore) << "device memory shrank by " << (freeBefore - freeAfter) << " bytes";
}

// Two registrations inside one cuMem allocation, each sent to every peer (as a split's context and its
// parent's would): the peer imports the allocation once, so both land in one mapping, as far apart as
// they are here.
TEST(RegisteredMemory, CuMemAllocationImportedOncePerProcess) {
  Communicator& comm = *job->comm;
  GpuBuffer buffer(1 << 21, GpuAllocator::kCuMem);
  const uint64_t offset = 1 << 20;
  RegisteredMemory first = comm.registerMemory(buffer.data(), 4096, Transport::kCudaIpc);
  RegisteredMemory second =
      comm.registerMemory(static_cast<uint8_t*>(buffer.data()) + offset, 4096, Transport::kCudaIpc);
  for (int peer = 0; peer < comm.worldSize(); ++peer) {
    if (peer == comm.rank()) continue;
    comm.sendMemory(first, peer, pairTag(comm.rank(), peer, 200000));
    comm.sendMemory(second, peer, pairTag(comm.rank(), peer, 200001));
  }
  for (int peer = 0; peer < comm.worldSize(); ++peer) {
    if (peer == comm.rank()) continue;
    RegisteredMemory a = comm.recvMemory(peer, pairTag(comm.rank(), peer, 200000));
    RegisteredMemory b = comm.recvMemory(peer, pairTag(comm.rank(), peer, 200001));
    EXPECT_EQ(static_cast<uint8_t*>(b.data()) - static_cast<uint8_t*>(a.data()), ptrdiff_t(offset))
        << "rank " << peer << "'s allocation was mapped twice";
  }
  job->bootstrap->barrier();  // peers unmap before the owner frees
}

TEST(PortChannel, PutSignalFlushOverCudaIpc) { checkPortChannel(Transport::kCudaIpc, 6); }

TEST(PortChannel, PutSignalFlushOverTcp) { checkPortChannel(Transport::kTcp, 7); }

}  // namespace
}  // namespace loom

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  loom::testing::GpuJob gpuJob;
  loom::job = &gpuJob;
  const int failed = RUN_ALL_TESTS();
  gpuJob.bootstrap->barrier();
  return failed;
}
