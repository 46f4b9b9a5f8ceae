#pragma once

// Where one rank's interpreter runs: on its GPU (one CUDA block per plan thread block, enqueued on
// the caller's stream) or on host threads (the CPU backend: one thread per plan thread block, run to
// completion). The executor above it is the same for both; only memory and launches differ.

#include <cstdint>
#include <memory>
#include <span>

#include "loom/communicator.hpp"
#include "loom/data_type.hpp"
#include "loom/device/inline_program.hpp"
#include "loom/device/program.hpp"
#include "loom/plan.hpp"

namespace loom {

class Backend;

// One call of a grouped launch (Backend::launchCountedGroup): its executor's backend, program and table.
struct GroupedLaunch {
  Backend* backend;
  const device::Program* program;
  const device::CallTable* table;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual bool onGpu() const = 0;
  // Zeroed memory the interpreter reads and writes: the rank's device memory, or host memory.
  virtual std::shared_ptr<void> allocate(uint64_t bytes) = 0;
  // Zeroed memory that peers of this host read and write (scratch). The same as allocate() except
  // on the CPU backend with ranks of this host in other processes, whose plain memory is private:
  // there it is shared host memory, which peers map.
  virtual std::shared_ptr<void> allocatePeerVisible(uint64_t bytes) { return allocate(bytes); }
  // Whether the user's buffers are private to this process while peers of this host run in other
  // processes (the multi-process CPU backend): then a plan that reaches peers' input or output runs
  // on copies in peer-visible memory (user_buffer_staging.hpp).
  virtual bool stagesUserBuffers() const { return false; }
  virtual void upload(void* dst, const void* src, uint64_t bytes) = 0;
  // Waits until everything this rank launched has finished (before memory it uses is freed).
  virtual void synchronize() = 0;
  // True while the calling thread captures a CUDA graph (setup must not synchronise then).
  virtual bool capturing(void* stream) const = 0;
  // Which allocation holds `pointer`, as an id never reused (a freed buffer's address may come back
  // for a new one, which peers have not mapped); 0 where the backend has no such id.
  virtual uint64_t allocationId(const void* pointer) const = 0;
  // One call: grid = program.blocks, `threads` per block; `inlined` (specialised programs only, may be
  // null) carries the ops in the kernel's parameters. The GPU enqueues on `stream` and returns; the CPU
  // backend returns when every block is done and throws what a block threw.
  virtual void launch(const device::Program& program, const device::InlineProgram* inlined, uint32_t threads,
                      DataType type, ReduceOp op, void* stream) = 0;
  // A counted call (an alltoallv plan, which has no reductions): as launch(), with the call's `table`
  // (in the kernel's parameters on the GPU).
  virtual void launchCounted(const device::Program& program, const device::CallTable& table, uint32_t threads,
                             void* stream) = 0;
  // Counted calls of two-rank plans with host entries, each of its own executor (`Backend` is that
  // executor's), run at once: on the GPU one kernel of every call's blocks on `stream` (at most
  // device::kMaxGroupedCalls calls, `threads` per block, which every call shares); on the CPU backend each
  // call's blocks on threads of their own, returning when all are done. Called on the first call's backend.
  virtual void launchCountedGroup(std::span<const GroupedLaunch> calls, uint32_t threads, void* stream) = 0;
  // Copies `bytes` from `src` to `dst` (this rank's buffers): the GPU enqueues it on `stream` (also
  // under graph capture), the CPU backend copies at once.
  virtual void copy(void* dst, const void* src, uint64_t bytes, void* stream) = 0;
  // Multiplies the `count` elements at `data` (a floating type) by `factor`: the GPU enqueues it on
  // `stream`, the CPU backend scales at once.
  virtual void scale(void* data, uint64_t count, DataType type, float factor, void* stream) = 0;
  // How many interpreter blocks of `threads` threads ranks sharing a GPU may run at once (their blocks
  // wait for one another, and other kernels must still start): fewer than the GPU's multiprocessors.
  // No bound on the CPU backend.
  virtual uint32_t maxResidentBlocks(uint32_t threads, DataType type, ReduceOp op) = 0;
};

// The GPU backend (CUDA builds, on the communicator's device); the CPU backend (host threads).
std::unique_ptr<Backend> makeGpuBackend(Communicator& communicator);
std::unique_ptr<Backend> makeCpuBackend(Communicator& communicator);

// While alive, lets this thread make setup calls (allocations, IPC mappings, copies on a private
// stream) even while it captures a CUDA graph; a no-op without CUDA.
class SetupScope {
 public:
  SetupScope();
  ~SetupScope();
  SetupScope(const SetupScope&) = delete;
  SetupScope& operator=(const SetupScope&) = delete;

 private:
  [[maybe_unused]] int previousMode_ = 0;  // the capture mode to restore (CUDA builds only)
};

}  // namespace loom
