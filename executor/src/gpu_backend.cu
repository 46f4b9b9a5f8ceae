// The GPU backend: the interpreter kernel (one CUDA block per plan thread block) and the memory and
// copies the executor needs on the rank's device.

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <tuple>

#include "backend.hpp"
#include "cuda_check.hpp"
#include "device/kernel_launch_order.cuh"
#include "environment.hpp"
#include "gpu.hpp"
#include "gpu_sharing.hpp"
#include "interpreter_kernels.hpp"
#include "loom/device/pair_calls.hpp"
#include "loom/device/scale.hpp"
#include "loom/gpu_buffer.hpp"
#include "reduce_dispatch.hpp"

namespace loom {
namespace {

template <typename T>
__global__ void scaleKernel(T* data, uint64_t count, float factor) {
  device::scaleElements(data, count, factor, uint64_t(blockIdx.x) * blockDim.x + threadIdx.x,
                        uint64_t(gridDim.x) * blockDim.x);
}

// The interpreter of a counted call (an alltoallv plan: copies only, so one instance): its table travels in
// the parameters, where the handlers read it in place.
using NoReduction = device::ReduceUnits<float, device::ReduceKind::kSum>;
__global__ void __launch_bounds__(1024, 1)
    interpretCounted(const __grid_constant__ device::Program program, const __grid_constant__ device::CallTable table) {
  startAfterPrecedingKernel();
  device::runBlock<NoReduction>(program, blockIdx.x, threadIdx.x, blockDim.x, &table);
}

// Counted calls of several executors in one launch (pair_calls.hpp): each block expands its call's table
// into shared memory, once, and runs its block of that call's program.
template <uint32_t kCalls>
__global__ void __launch_bounds__(1024, 1) interpretPairCalls(const __grid_constant__ device::PairCalls<kCalls> group) {
  startAfterPrecedingKernel();
  __shared__ device::CallTable table;
  const uint32_t call = device::pairCallOf(group, blockIdx.x);
  if (threadIdx.x == 0) device::expandPairTable(group.calls[call], table);
  __syncthreads();
  device::runBlock<NoReduction>(group.calls[call].program, blockIdx.x - group.firstBlock[call], threadIdx.x, blockDim.x,
                                &table);
}

// Whether calls launch with programmatic stream serialisation (above): on unless LOOM_PDL=0 (read first,
// so a malformed value is refused on every GPU); off before Hopper, which has no such launches; and off
// for ranks sharing a GPU, whose blocks must all be resident at once (gpu_sharing.hpp): a next call's
// blocks, resident early and waiting, could keep a peer rank's blocks of this call from starting.
bool overlapsLaunches(const Communicator& communicator, int device) {
  const std::optional<std::string> value = processEnvironment("LOOM_PDL");
  if (value && !parseBoolean(*value, "LOOM_PDL")) return false;
  int major = 0;
  checkCuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
            "cudaDeviceGetAttribute(compute capability)");
  return major >= 9 && communicator.ranksSharingGpu().size() <= 1;
}

// Launches `kernel` (a host-side entry point) with `args` (a pointer to each parameter) on `stream`, with
// programmatic stream serialisation when `overlap`.
cudaError_t launchKernel(const void* kernel, uint32_t blocks, uint32_t threads, cudaStream_t stream, bool overlap,
                         void** args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(threads);
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = overlap ? 1 : 0;
  return cudaLaunchKernelExC(&config, kernel, args);
}

// The interpreter kernels of a call's data type and operator, from the type's own translation unit; in
// DataType's order (a reordered enum would run every type's calls on another's kernels: the GPU plan
// checks, every data type against float64, would fail).
constexpr InterpreterKernels (*kKernelsByType[])(ReduceOp) = {
    interpreterKernelsFloat32, interpreterKernelsFloat16,    interpreterKernelsBFloat16,   interpreterKernelsInt32,
    interpreterKernelsUInt32,  interpreterKernelsFloat8E4M3, interpreterKernelsFloat8E5M2,
};
static_assert(std::size(kKernelsByType) == kDataTypeCount, "a data type without its kernels");

InterpreterKernels interpreterKernels(DataType type, ReduceOp op) {
  if (size_t(type) >= kDataTypeCount) throw Error(ErrorCategory::kInvalidArgument, "dtype: unknown data type");
  return kKernelsByType[size_t(type)](op);
}

class GpuBackend final : public Backend {
 public:
  explicit GpuBackend(Communicator& communicator)
      : communicator_(communicator),
        device_(communicator.cudaDevice()),
        overlapLaunches_(overlapsLaunches(communicator, device_)),
        waitsForOwnWorkOnly_(gpuSharingEnabled()) {
    checkCuda(cudaSetDevice(device_), "cudaSetDevice(" + std::to_string(device_) + ")");
    // Setup copies run on their own non-blocking stream: a copy on the legacy stream would wait
    // for (and so deadlock against) a kernel still waiting for a peer.
    checkCuda(cudaStreamCreateWithFlags(&setupStream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  }
  ~GpuBackend() override {
    for (const auto& [stream, event] : lastWork_) cudaEventDestroy(event);
    cudaStreamDestroy(setupStream_);
  }

  bool onGpu() const override { return true; }

  std::shared_ptr<void> allocate(uint64_t bytes) override {
    checkCuda(cudaSetDevice(device_), "cudaSetDevice");
    auto buffer = std::make_shared<GpuBuffer>(std::max<uint64_t>(bytes, 16));
    return std::shared_ptr<void>(buffer, buffer->data());
  }

  void upload(void* dst, const void* src, uint64_t bytes) override {
    checkCuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, setupStream_), "cudaMemcpyAsync (setup)");
    checkCuda(cudaStreamSynchronize(setupStream_), "cudaStreamSynchronize (setup)");
  }

  // Waits for this rank's calls. With ranks sharing the GPU, a device-wide wait would also wait for the
  // other ranks' kernels, which may be waiting for this rank's next launch: two-rank links of a larger
  // communicator (send/recv) set up and launch pair by pair, so a rank can quiesce one link while a
  // kernel of another link, on the same GPU, waits for it. There the wait is for the events recorded
  // after this backend's own work instead.
  void synchronize() override {
    if (!waitsForOwnWorkOnly_) {
      checkCuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      return;
    }
    for (const auto& [stream, event] : lastWork_) {
      checkCuda(cudaEventSynchronize(event), "cudaEventSynchronize (this rank's last work on a stream)");
    }
  }

  bool capturing(void* stream) const override {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    checkCuda(cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &status), "cudaStreamIsCapturing");
    return status != cudaStreamCaptureStatusNone;
  }

  uint64_t allocationId(const void* pointer) const override { return gpu::allocationId(pointer); }

  void launch(const device::Program& program, const device::InlineProgram* inlined, uint32_t threads, DataType type,
              ReduceOp op, void* stream) override {
    const InterpreterKernels kernels = interpreterKernels(type, op);
    const auto cudaStream = static_cast<cudaStream_t>(stream);
    // cudaLaunchKernelExC takes a pointer to each parameter, non-const though it only reads them.
    void* parameter = const_cast<device::Program*>(&program);
    cudaError_t status = cudaSuccess;
    if (inlined != nullptr) {
      void* args[] = {parameter, const_cast<device::InlineProgram*>(inlined)};
      status = launchKernel(kernels.inlined, program.blocks, threads, cudaStream, overlapLaunches_, args);
    } else {
      void* args[] = {parameter};
      status = launchKernel(threads <= 512 ? kernels.narrow : kernels.interpret, program.blocks, threads, cudaStream,
                            overlapLaunches_, args);
    }
    if (status != cudaSuccess) {
      cudaGetLastError();  // the launch failed: clear it, so later CUDA calls of the caller do not see it
      // A trap of an earlier call (a device-side wait that timed out) surfaces here: say who waited.
      communicator_.deviceDiagnostics().check();
      checkCuda(status, "launching the interpreter kernel");
    }
    noteWork(cudaStream);
  }

  void launchCounted(const device::Program& program, const device::CallTable& table, uint32_t threads,
                     void* stream) override {
    void* args[] = {const_cast<device::Program*>(&program), const_cast<device::CallTable*>(&table)};
    const cudaError_t status = launchKernel(reinterpret_cast<const void*>(&interpretCounted), program.blocks, threads,
                                            static_cast<cudaStream_t>(stream), overlapLaunches_, args);
    if (status != cudaSuccess) {
      cudaGetLastError();
      communicator_.deviceDiagnostics().check();
      checkCuda(status, "launching the interpreter kernel of a counted call");
    }
    noteWork(static_cast<cudaStream_t>(stream));
  }

  void launchCountedGroup(std::span<const GroupedLaunch> calls, uint32_t threads, void* stream) override {
    if (calls.size() > device::kMaxGroupedCalls) {
      throw Error(ErrorCategory::kInvalidArgument, "calls: a grouped launch takes at most " +
                                                       std::to_string(device::kMaxGroupedCalls) + " calls, not " +
                                                       std::to_string(calls.size()));
    }
    const cudaError_t status = calls.size() <= device::kFewGroupedCalls
                                   ? launchPairCalls<device::kFewGroupedCalls>(calls, threads, stream)
                                   : launchPairCalls<device::kMaxGroupedCalls>(calls, threads, stream);
    if (status != cudaSuccess) {
      cudaGetLastError();
      communicator_.deviceDiagnostics().check();
      checkCuda(status, "launching the interpreter kernel of a send/recv group");
    }
    // The kernel is every member's work: each one's synchronize() waits for it.
    for (const GroupedLaunch& call : calls)
      static_cast<GpuBackend*>(call.backend)->noteWork(static_cast<cudaStream_t>(stream));
  }

  void copy(void* dst, const void* src, uint64_t bytes, void* stream) override {
    checkCuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream)),
              "cudaMemcpyAsync (a call of one rank)");
    noteWork(static_cast<cudaStream_t>(stream));
  }

  void scale(void* data, uint64_t count, DataType type, float factor, void* stream) override {
    if (count == 0) return;
    constexpr uint32_t kThreads = 256;
    // Enough blocks to keep every multiprocessor's loads in flight; the loop strides over the rest.
    const uint32_t blocks = uint32_t(std::min<uint64_t>((count + kThreads - 1) / kThreads, 4096));
    dispatchFloating(type, "scale", [&]<typename T>() {
      scaleKernel<T><<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<T*>(data), count, factor);
    });
    checkCuda(cudaGetLastError(), "launching the scaling kernel (NCCL's average)");
    noteWork(static_cast<cudaStream_t>(stream));
  }

  uint32_t maxResidentBlocks(uint32_t threads, DataType type, ReduceOp op) override {
    const auto key = std::make_tuple(threads, type, op);
    if (auto found = residentBlocks_.find(key); found != residentBlocks_.end()) return found->second;
    // The fewest of the kernels' blocks per multiprocessor.
    const InterpreterKernels kernels = interpreterKernels(type, op);
    int perMultiprocessor = INT32_MAX;
    const auto fewer = [&](const void* kernel) {
      int blocks = 0;
      checkCuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, int(threads), 0),
                "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
      perMultiprocessor = std::min(perMultiprocessor, blocks);
    };
    fewer(kernels.interpret);
    fewer(reinterpret_cast<const void*>(&interpretCounted));
    fewer(reinterpret_cast<const void*>(&interpretPairCalls<device::kFewGroupedCalls>));
    fewer(reinterpret_cast<const void*>(&interpretPairCalls<device::kMaxGroupedCalls>));
    if (threads <= device::kMaxInlineThreads) fewer(kernels.inlined);
    if (threads <= 512) fewer(kernels.narrow);
    int multiprocessors = 0;
    checkCuda(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device_),
              "cudaDeviceGetAttribute(multiprocessors)");
    // At most one block per multiprocessor, and one multiprocessor left without any: while every
    // multiprocessor holds a spinning block, no other kernel starts (probes/copy_within_one_gpu.cu), and
    // ranks sharing the GPU need other kernels to run mid-call: CUDA's copies within one GPU, which carry
    // port channels, and the kernels a rank runs between its calls while its peers already spin.
    const uint32_t byOccupancy = uint32_t(perMultiprocessor) * uint32_t(multiprocessors);
    return residentBlocks_[key] = std::min(byOccupancy, uint32_t(std::max(multiprocessors - 1, 1)));
  }

 private:
  // One launch of `calls` (at most kCalls) in a PairCalls<kCalls> kernel.
  template <uint32_t kCalls>
  cudaError_t launchPairCalls(std::span<const GroupedLaunch> calls, uint32_t threads, void* stream) {
    device::PairCalls<kCalls> group{};
    group.count = uint32_t(calls.size());
    uint32_t blocks = 0;
    for (size_t i = 0; i < calls.size(); ++i) {
      const device::CallTable& table = *calls[i].table;
      if (table.peers != 2 || table.entries != nullptr) {
        throw Error(ErrorCategory::kInvalidArgument,
                    "calls[" + std::to_string(i) + "]: a grouped launch takes two-rank calls with host entries");
      }
      device::PairCall& call = group.calls[i];
      call.program = *calls[i].program;
      for (uint32_t e = 0; e < device::kPairEntries; ++e) call.held[e] = table.held[e];
      call.inputBytes = table.inputBytes;
      call.outputBytes = table.outputBytes;
      call.alignment = table.alignment;
      group.firstBlock[i] = blocks;
      blocks += call.program.blocks;
    }
    void* args[] = {&group};
    return launchKernel(reinterpret_cast<const void*>(&interpretPairCalls<kCalls>), blocks, threads,
                        static_cast<cudaStream_t>(stream), overlapLaunches_, args);
  }

  // Marks the end of this backend's work so far on `stream`, for synchronize() with ranks sharing the GPU.
  // Work captured into a graph is not marked: it runs when the graph is launched, which the caller does.
  void noteWork(cudaStream_t stream) {
    if (!waitsForOwnWorkOnly_ || capturing(stream)) return;
    cudaEvent_t& event = lastWork_[stream];
    if (event == nullptr) checkCuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate");
    checkCuda(cudaEventRecord(event, stream), "cudaEventRecord (this rank's last work)");
  }

  Communicator& communicator_;
  int device_;
  bool overlapLaunches_;
  bool waitsForOwnWorkOnly_;                      // ranks share the GPU (LOOM_SHARE_GPU)
  std::map<cudaStream_t, cudaEvent_t> lastWork_;  // per stream, after this backend's last work on it
  cudaStream_t setupStream_ = nullptr;
  std::map<std::tuple<uint32_t, DataType, ReduceOp>, uint32_t> residentBlocks_;
};

}  // namespace

std::unique_ptr<Backend> makeGpuBackend(Communicator& communicator) {
  return std::make_unique<GpuBackend>(communicator);
}

SetupScope::SetupScope() {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode);
  previousMode_ = int(mode);
}

SetupScope::~SetupScope() {
  auto mode = static_cast<cudaStreamCaptureMode>(previousMode_);
  cudaThreadExchangeStreamCaptureMode(&mode);
}

}  // namespace loom
