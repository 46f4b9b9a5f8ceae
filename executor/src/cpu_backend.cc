// The CPU backend: a rank's program on host threads, one per plan thread block, over host memory.
// Ranks are host threads of one process (their memory channels use each other's buffers directly) or
// processes (of one host or several): then what peers of this host touch (scratch, semaphore
// counters, staged user buffers) is shared host memory that they map. Semaphores, packets and flags
// behave as on the GPU.

#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "backend.hpp"
#include "departure_watch.hpp"
#include "environment.hpp"
#include "loom/device/chaos.hpp"
#include "loom/device/scale.hpp"
#include "loom/shared_host_memory.hpp"
#include "reduce_dispatch.hpp"

namespace loom {
namespace {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(Communicator& communicator)
      : communicator_(communicator), shared_(communicator.hostPeersInOtherProcesses()) {}
  bool onGpu() const override { return false; }
  bool stagesUserBuffers() const override { return shared_; }

  std::shared_ptr<void> allocatePeerVisible(uint64_t bytes) override {
    if (!shared_) return allocate(bytes);
    auto buffer = std::make_shared<SharedHostBuffer>(bytes);
    return std::shared_ptr<void>(buffer, buffer->data());
  }

  std::shared_ptr<void> allocate(uint64_t bytes) override {
    // 64-byte aligned, like device memory is at least 16-byte aligned: vector paths apply.
    const uint64_t rounded = (std::max<uint64_t>(bytes, 1) + 63) / 64 * 64;
    void* data = std::aligned_alloc(64, rounded);
    if (data == nullptr)
      throw Error(ErrorCategory::kSystem, "out of host memory (" + std::to_string(bytes) + " bytes)");
    std::memset(data, 0, rounded);
    return std::shared_ptr<void>(data, [](void* p) { std::free(p); });
  }

  void upload(void* dst, const void* src, uint64_t bytes) override { std::memcpy(dst, src, bytes); }
  void synchronize() override {}
  bool capturing(void*) const override { return false; }
  uint64_t allocationId(const void* pointer) const override { return sharedHostBufferId(pointer); }

  void launch(const device::Program& program, const device::InlineProgram* inlined, uint32_t, DataType type,
              ReduceOp op, void* stream) override {
    refuseStream(stream);
    dispatchReduce(type, op, [&]<typename Reduce>() {
      runBlocks(program.blocks, [&](uint32_t block) {
        if (inlined != nullptr) {
          device::runInlineBlock<Reduce>(program, *inlined, block, 0, 1);
        } else {
          // Two units per step, as the GPU's kernel of narrow blocks: CI runs that loop on every plan
          // (one unit per step is the same loop, once).
          device::runBlock<Reduce, 2>(program, block, 0, 1);
        }
      });
    });
  }

  void launchCounted(const device::Program& program, const device::CallTable& table, uint32_t, void* stream) override {
    refuseStream(stream);
    using NoReduction = device::ReduceUnits<float, device::ReduceKind::kSum>;  // counted plans have none
    runBlocks(program.blocks, [&](uint32_t block) { device::runBlock<NoReduction, 2>(program, block, 0, 1, &table); });
  }

  // Each call's backend runs it as launchCounted does (its blocks on threads, its peers watched, a failure
  // stopping its blocks), the calls side by side: a call's blocks may wait for a peer that first runs
  // another call of its own group.
  void launchCountedGroup(std::span<const GroupedLaunch> calls, uint32_t threads, void* stream) override {
    refuseStream(stream);
    std::vector<std::exception_ptr> failures(calls.size());
    std::vector<std::thread> runners;
    runners.reserve(calls.size());
    for (size_t i = 0; i < calls.size(); ++i) {
      runners.emplace_back([&, i] {
        try {
          calls[i].backend->launchCounted(*calls[i].program, *calls[i].table, threads, nullptr);
        } catch (...) {
          failures[i] = std::current_exception();
        }
      });
    }
    for (std::thread& runner : runners) runner.join();
    for (const std::exception_ptr& failure : failures) {
      if (failure) std::rethrow_exception(failure);
    }
  }

  void copy(void* dst, const void* src, uint64_t bytes, void* stream) override {
    refuseStream(stream);
    std::memmove(dst, src, bytes);
  }

  void scale(void* data, uint64_t count, DataType type, float factor, void* stream) override {
    refuseStream(stream);
    dispatchFloating(type, "scale",
                     [&]<typename T>() { device::scaleElements(static_cast<T*>(data), count, factor, 0, 1); });
  }

  // Every block is a thread of its own: all of them run at once. LOOM_CPU_RESIDENT_BLOCKS stands in for a
  // GPU that holds that many (Executor::placement), so that the fit rule is tested without one.
  uint32_t maxResidentBlocks(uint32_t, DataType, ReduceOp) override {
    const std::optional<std::string> limit = processEnvironment("LOOM_CPU_RESIDENT_BLOCKS");
    return limit ? uint32_t(parseInteger(*limit, 1, UINT32_MAX - 1, "LOOM_CPU_RESIDENT_BLOCKS")) : UINT32_MAX;
  }

 private:
  // One host thread per block, all at once; throws what the first block (by index) threw. Meanwhile this
  // thread watches for peers that are gone (watchForDepartedPeers).
  template <typename Body>
  void runBlocks(uint32_t blocks, const Body& body) {
    std::vector<std::exception_ptr> failures(blocks);
    std::vector<std::thread> threads;
    threads.reserve(blocks);
    std::mutex mutex;
    std::condition_variable finished;
    uint32_t running = blocks;
    for (uint32_t block = 0; block < blocks; ++block) {
      threads.emplace_back([&, block] {
        try {
          device::hostThreadBlock = int32_t(block);
          chaos::pause(chaos::Site::kBlockStart);
          body(block);
        } catch (...) {
          failures[block] = std::current_exception();
          // The call has failed: the other blocks stop too rather than wait for what will not come (a peer
          // blocked on this rank). The executor refuses later calls after such a failure.
          communicator_.deviceDiagnostics().requestAbort();
        }
        std::lock_guard lock(mutex);
        if (--running == 0) finished.notify_one();
      });
    }
    watchForDepartedPeers(mutex, finished, running);
    for (std::thread& thread : threads) thread.join();
    for (const std::exception_ptr& failure : failures) {
      if (failure) std::rethrow_exception(failure);
    }
  }

  // Until the blocks are done: every DepartureMarks::kPoll, the peers whose bootstrap connection closed
  // (their process is gone), marked so that the waits on them end rather than at their timeout.
  void watchForDepartedPeers(std::mutex& mutex, std::condition_variable& finished, const uint32_t& running) {
    DepartureMarks marks(communicator_.deviceDiagnostics());
    std::unique_lock lock(mutex);
    while (!finished.wait_for(lock, DepartureMarks::kPoll, [&] { return running == 0; })) {
      lock.unlock();
      Bootstrap& bootstrap = communicator_.bootstrap();
      if (auto failure = bootstrap.announcedFailureIfIdle()) {
        communicator_.deviceDiagnostics().notePeerFailed(failure->first, failure->second);
      }
      const std::vector<int> departed = bootstrap.departedPeers();
      marks.look(departed, departed.empty() ? departed : bootstrap.lostPeers(),
                 departed.empty() ? departed : bootstrap.abortedPeers());
      lock.lock();
    }
  }

  static void refuseStream(void* stream) {
    if (stream != nullptr) {
      throw Error(ErrorCategory::kInvalidArgument, "stream: the CPU backend runs on host threads and takes no stream");
    }
  }
  Communicator& communicator_;
  bool shared_;
};

}  // namespace

std::unique_ptr<Backend> makeCpuBackend(Communicator& communicator) {
  return std::make_unique<CpuBackend>(communicator);
}

}  // namespace loom
