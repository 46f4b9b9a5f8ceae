// Runtime benchmarks between ranks 0 and 1 (start with `python -m loom.launch -n 2
// build/bench/loom_runtime_bench [--json FILE]`):
//   - signal + wait ping-pong round trip over a memory channel;
//   - LL packet one-way latency (half a packet ping-pong) for 1 KiB and other small sizes;
//   - memory-channel put bandwidth (GPU threads storing over NVLink) beside the copy engine's
//     peer-to-peer bandwidth (cudaMemcpyAsync into the same mapped buffer), measured in the same run.
// Times come from CUDA events around kernels that loop many times; each figure is the median of
// several repetitions after a warm-up.

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gpu_job.hpp"
#include "loom/gpu_buffer.hpp"
#include "loom/memory_channel.hpp"
#include "loom/semaphore.hpp"

using loom::device::MemoryChannelHandle;

// Packets bounce between the ranks: the first rank sends call i, the other returns it. Two packet
// areas (by parity) so a packet of the next round never overwrites one not yet read; the payload
// sits after both, where unpacking cannot overwrite packets still being read.
__global__ void packetPingPong(MemoryChannelHandle channel, uint64_t bytes, uint64_t area, int iterations,
                               uint32_t flagBase, bool first) {
  for (int i = 0; i < iterations; ++i) {
    const uint32_t flag = flagBase + uint32_t(i);
    const uint64_t offset = (flag % 2) * area;
    const uint64_t payload = 2 * area;
    if (first) {
      channel.putPackets(offset, payload, bytes, threadIdx.x, blockDim.x, flag);
      channel.unpackPackets(payload, offset, bytes, threadIdx.x, blockDim.x, flag);
    } else {
      channel.unpackPackets(payload, offset, bytes, threadIdx.x, blockDim.x, flag);
      channel.putPackets(offset, payload, bytes, threadIdx.x, blockDim.x, flag);
    }
  }
}

__global__ void putKernel(MemoryChannelHandle channel, uint64_t bytes) {
  // Each block copies one contiguous slice, 16-byte aligned.
  const uint64_t slice = (bytes / gridDim.x + 15) / 16 * 16;
  const uint64_t begin = slice * blockIdx.x;
  if (begin >= bytes) return;
  channel.put(begin, begin, slice < bytes - begin ? slice : bytes - begin, threadIdx.x, blockDim.x);
}

struct Timer {
  cudaEvent_t start, stop;
  Timer() {
    LOOM_CUDA_OK(cudaEventCreate(&start));
    LOOM_CUDA_OK(cudaEventCreate(&stop));
  }
  template <typename Fn>
  float ms(Fn&& launch) {
    LOOM_CUDA_OK(cudaEventRecord(start));
    launch();
    LOOM_CUDA_OK(cudaEventRecord(stop));
    LOOM_CUDA_OK(cudaEventSynchronize(stop));
    float value = 0;
    LOOM_CUDA_OK(cudaEventElapsedTime(&value, start, stop));
    return value;
  }
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

int main(int argc, char** argv) {
  std::string jsonPath;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--json") jsonPath = argv[i + 1];
  }
  loom::testing::GpuJob job;
  loom::Communicator& comm = *job.comm;
  if (comm.worldSize() < 2) {
    std::fprintf(stderr, "needs 2 ranks\n");
    return 2;
  }
  if (comm.rank() > 1) {  // only ranks 0 and 1 take part
    job.bootstrap->barrier();
    return 0;
  }
  const int peer = 1 - comm.rank();
  const bool first = comm.rank() == 0;
  const uint64_t bandwidthBytes = uint64_t(1) << 30;
  loom::GpuBuffer buffer(bandwidthBytes);
  loom::RegisteredMemory local = comm.registerMemory(buffer.data(), buffer.bytes(), loom::Transport::kCudaIpc);
  comm.sendMemory(local, peer, 1);
  loom::RegisteredMemory remote = comm.recvMemory(peer, 1);
  auto semaphore = std::make_shared<loom::MemorySemaphore>(comm, peer, 1);
  loom::MemoryChannel channel(semaphore, remote, local, local, 0);
  const MemoryChannelHandle handle = channel.deviceHandle();
  MemoryChannelHandle* deviceHandle = nullptr;  // the ping-pong kernel takes handles from device memory
  LOOM_CUDA_OK(cudaMalloc(&deviceHandle, sizeof(handle)));
  LOOM_CUDA_OK(cudaMemcpy(deviceHandle, &handle, sizeof(handle), cudaMemcpyHostToDevice));
  Timer timer;
  std::string json = "{";

  // Ping-pong: both ranks loop; the time of rank 0's kernel over the iterations is the round trip.
  const int iterations = 20000;
  std::vector<double> roundTrips;
  for (int repeat = 0; repeat < 6; ++repeat) {
    job.bootstrap->barrier();
    float ms = timer.ms([&] { loom::testing::pingPong<<<1, 32>>>(deviceHandle, iterations, first); });
    if (repeat > 0) roundTrips.push_back(ms * 1000.0 / iterations);
  }
  const double roundTripUs = median(roundTrips);
  if (first) std::printf("signal+wait ping-pong round trip: %.3f us\n", roundTripUs);
  json += "\"pingpong_round_trip_us\": " + std::to_string(roundTripUs);

  // LL16 packets: one-way latency is half the round trip.
  uint32_t flagBase = 1;
  json += ", \"ll_one_way_us\": {";
  for (uint64_t bytes : {uint64_t(8), uint64_t(256), uint64_t(1024), uint64_t(4096), uint64_t(16384)}) {
    const uint64_t area = loom::device::packetBufferBytes<loom::device::LL16Packet>(bytes);
    const int packetIterations = 5000;
    const unsigned threads = unsigned(std::min<uint64_t>(1024, std::max<uint64_t>(32, bytes / 8)));
    std::vector<double> oneWay;
    for (int repeat = 0; repeat < 6; ++repeat) {
      job.bootstrap->barrier();
      float ms =
          timer.ms([&] { packetPingPong<<<1, threads>>>(handle, bytes, area, packetIterations, flagBase, first); });
      flagBase += packetIterations;
      if (repeat > 0) oneWay.push_back(ms * 1000.0 / packetIterations / 2);
    }
    if (first)
      std::printf("LL packet one-way latency, %6llu bytes: %.3f us\n", (unsigned long long)bytes, median(oneWay));
    json +=
        std::string(bytes == 8 ? "" : ", ") + "\"" + std::to_string(bytes) + "\": " + std::to_string(median(oneWay));
  }
  json += "}";

  // Bandwidth, rank 0 -> rank 1 only, 1 GiB per transfer.
  LOOM_CUDA_OK(cudaDeviceSynchronize());
  job.bootstrap->barrier();
  if (first) {
    cudaStream_t stream;
    LOOM_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    std::vector<double> copyEngine;
    for (int repeat = 0; repeat < 6; ++repeat) {
      float ms = timer.ms([&] {
        LOOM_CUDA_OK(cudaMemcpyAsync(remote.data(), buffer.data(), bandwidthBytes, cudaMemcpyDeviceToDevice, 0));
      });
      if (repeat > 0) copyEngine.push_back(bandwidthBytes / (ms * 1e6));
    }
    const double copyGBs = median(copyEngine);
    std::printf("copy engine peer-to-peer: %.1f GB/s\n", copyGBs);
    json += ", \"copy_engine_gbs\": " + std::to_string(copyGBs) + ", \"put_gbs\": {";
    bool firstEntry = true;
    for (int blocks : {16, 32, 64, 128}) {
      for (int threads : {512, 1024}) {
        std::vector<double> put;
        for (int repeat = 0; repeat < 6; ++repeat) {
          float ms = timer.ms([&] { putKernel<<<blocks, threads>>>(handle, bandwidthBytes); });
          if (repeat > 0) put.push_back(bandwidthBytes / (ms * 1e6));
        }
        const double gbs = median(put);
        std::printf("memory-channel put, %3d blocks x %4d threads: %.1f GB/s (%.0f%% of the copy engine)\n", blocks,
                    threads, gbs, 100 * gbs / copyGBs);
        json += std::string(firstEntry ? "" : ", ") + "\"" + std::to_string(blocks) + "x" + std::to_string(threads) +
                "\": " + std::to_string(gbs);
        firstEntry = false;
      }
    }
    json += "}";
    cudaStreamDestroy(stream);
  }
  json += "}";
  LOOM_CUDA_OK(cudaDeviceSynchronize());
  job.bootstrap->barrier();
  if (first && !jsonPath.empty()) {
    FILE* file = std::fopen(jsonPath.c_str(), "w");
    if (file) {
      std::fprintf(file, "%s\n", json.c_str());
      std::fclose(file);
    }
  }
  return 0;
}
