#pragma once

// The interpreter: what one thread block does with its ops of a resolved program. Written once for
// both backends: the GPU kernel calls runBlock() with all threads of a CUDA block; the CPU backend
// calls it on one host thread per thread block (thread 0 of 1). Every handler spreads its work as
// `for (i = thread; i < n; i += threads)`, so both shapes run the same code.
//
// `Reduce` is the call's combination of data type and operator (numeric.hpp); a program without
// reductions runs with any of them.

#include <cstdint>

#include "loom/device/atomics.hpp"
#include "loom/device/block_state.hpp"
#include "loom/device/chaos.hpp"
#include "loom/device/diagnostics.hpp"
#include "loom/device/entry_copy.hpp"
#include "loom/device/entry_packets.hpp"
#include "loom/device/fast_transfer.hpp"
#include "loom/device/inline_program.hpp"
#include "loom/device/macros.hpp"
#include "loom/device/program.hpp"
#include "loom/device/transfer.hpp"

namespace loom::device {

LOOM_HOST_DEVICE void runSignal(const BlockState& s, const Op& op) {
  for (uint32_t i = s.thread; i < op.srcs; i += s.threads) {
    const Operand& operand = s.program.operands[op.first + i];
    ChannelView& channel = s.program.channels[operand.channel];
    if ((op.flags & kOpPublish) && channel.isPort) {
      publishEntryThroughProxy(s, operand, channel, int32_t(op.planOp));  // the entry, then the signal
      continue;
    }
    if (op.flags & kOpPublish) publishEntry(s, operand, channel, int32_t(op.planOp));
    if (channel.isPort) {
      channel.port.signal(int32_t(op.planOp));
    } else if (op.flags & kOpRelaxed) {
      channel.memory.relaxedSignal();
    } else {
      channel.memory.signal();
    }
  }
}

LOOM_HOST_DEVICE void runWait(const BlockState& s, const Op& op) {
  for (uint32_t i = s.thread; i < op.srcs; i += s.threads) {
    ChannelView& channel = s.program.channels[s.program.operands[op.first + i].channel];
    if (channel.isPort) {
      channel.port.wait(int32_t(op.planOp));
    } else if (op.flags & kOpRelaxed) {
      channel.memory.relaxedWait(int32_t(op.planOp));
    } else {
      channel.memory.wait(int32_t(op.planOp));
    }
  }
}

LOOM_HOST_DEVICE void runFlush(const BlockState& s, const Op& op) {
  for (uint32_t i = s.thread; i < op.srcs; i += s.threads) {
    PortChannelHandle& port = s.program.channels[s.program.operands[op.first + i].channel].port;
    if (op.flags & kOpReadsOnly) {
      port.finishReads(int32_t(op.planOp));
    } else {
      port.flush(int32_t(op.planOp));
    }
  }
}

// One trigger per port destination; the proxy copies the source range out of this rank's memory.
LOOM_HOST_DEVICE void runPortPut(const BlockState& s, const Op& op) {
  const Operand& src = s.program.operands[op.first];
  uint64_t triggerFlags = kTriggerData;
  if (op.flags & kOpPortSignal) triggerFlags |= kTriggerSignal;
  if (op.flags & kOpPortFlush) triggerFlags |= kTriggerFlush;
  for (uint32_t i = s.thread; i < op.dsts; i += s.threads) {
    const Operand& dst = s.program.operands[op.first + 1 + i];
    PortChannelHandle& port = s.program.channels[dst.channel].port;
    const uint32_t srcMemory = src.buffer == kStagingBuffer ? s.program.channels[src.channel].stagingMemory
                                                            : s.program.portBuffers[src.buffer];
    const uint64_t meta = ProxyTrigger::makeMeta(triggerFlags, port.semaphoreId,
                                                 s.program.channels[dst.channel].portMemory[dst.buffer], srcMemory);
    const uint64_t position =
        port.fifo.push(dst.offset + (s.odd ? dst.oddOffset : 0), src.offset + (s.odd ? src.oddOffset : 0), op.bytes,
                       meta, int32_t(op.planOp));
    if (op.flags & kOpPortFlush) port.fifo.sync(position, int32_t(op.planOp));
  }
}

// The k-th arrival of each participant meets the others' k-th: counters only grow, so a block
// waits for the end of the round its own arrival falls in.
LOOM_HOST_DEVICE void runBarrier(const BlockState& s, const Op& op) {
  if (s.thread != 0) return;
  uint64_t* arrivals = &s.program.barriers[op.barrier];
  const uint64_t arrival = fetchAddAcqRel(arrivals, uint64_t(1));
  const uint64_t target = (arrival / op.participants + 1) * op.participants;
  spinUntil(
      s.program.wait, WaitKind::kSemaphore, int32_t(op.planOp), target, [&] { return loadAcquire(arrivals); },
      [&](uint64_t seen) { return seen >= target; });
}

LOOM_HOST_DEVICE void runSemRelease(const BlockState& s, const Op& op) {
  for (uint32_t i = s.thread; i < op.srcs; i += s.threads) {
    addRelease(&s.program.semaphores[s.program.operands[op.first + i].channel], uint64_t(1));
  }
}

// Takes one token: waits until the count is above zero and lowers it by one.
LOOM_HOST_DEVICE void runSemAcquire(const BlockState& s, const Op& op) {
  for (uint32_t i = s.thread; i < op.srcs; i += s.threads) {
    uint64_t* count = &s.program.semaphores[s.program.operands[op.first + i].channel];
    spinUntil(
        s.program.wait, WaitKind::kSemaphore, int32_t(op.planOp), 1,
        [&]() -> uint64_t {
          uint64_t seen = loadRelaxed(count);
          return seen > 0 && compareExchangeAcqRel(count, seen, seen - 1) ? 1 : 0;
        },
        [](uint64_t taken) { return taken != 0; });
  }
}

// An op of Program's tables. Specialised programs run inline (runInlineBlock), so every data op here
// is a generic kTransfer; the specialised codes never reach this kernel.
template <typename Reduce, uint32_t kUnitsPerStep = 1>
LOOM_HOST_DEVICE void runOp(const BlockState& s, const Op& op) {
  chaos::pauseBeforeOp();
  if (op.flags & kOpSyncBefore) syncBlock();
  switch (op.code) {
    case OpCode::kTransfer:
    case OpCode::kCopy:
    case OpCode::kFastTransfer:
    case OpCode::kOneShot:
      runTransfer<Reduce, kUnitsPerStep>(s, op);
      break;
    case OpCode::kPortPut:
      runPortPut(s, op);
      break;
    case OpCode::kSignal:
      runSignal(s, op);
      break;
    case OpCode::kWait:
      runWait(s, op);
      break;
    case OpCode::kFlush:
      runFlush(s, op);
      break;
    case OpCode::kBarrier:
      runBarrier(s, op);
      break;
    case OpCode::kSemAcquire:
      runSemAcquire(s, op);
      break;
    case OpCode::kSemRelease:
      runSemRelease(s, op);
      break;
    case OpCode::kEntryCopy:
      runEntryCopy(s, op);
      break;
    case OpCode::kEntryPutPackets:
      runEntryPutPackets(s, op);
      break;
    case OpCode::kEntryUnpackPackets:
      runEntryUnpackPackets(s, op);
      break;
    case OpCode::kNop:
      break;
  }
  if (op.flags & kOpSyncAfter) syncBlock();
}

// An op of an inline program (inline_program.hpp): a specialised data op or a block sync.
template <typename Reduce>
LOOM_HOST_DEVICE void runInlineOp(const BlockState& s, const InlineOp& op, const InlineOperand* operands) {
  chaos::pauseBeforeOp();
  if (op.flags & kOpSyncBefore) syncBlock();
  if (op.code != OpCode::kNop)
    runFastData<Reduce>(s, op.code, (op.flags & kOpReduces) != 0, inlineFastOp(s, op, operands));
  if (op.flags & kOpSyncAfter) syncBlock();
}

// Runs block `block`'s ops for one call, then counts the call (the next one uses the next flag and
// the other LL half). The count lives in memory that outlives the launch, so CUDA graph replays
// advance it too.
// kUnitsPerStep: 16-byte units a thread of the generic handler takes per step (2 in the kernel of
// blocks of at most 512 threads, whose 128 registers hold both units' reads in flight).
// `table`: a counted call's entries (alltoallv plans), null for every other plan.
template <typename Reduce, uint32_t kUnitsPerStep = 1>
LOOM_HOST_DEVICE void runBlock(const Program& program, uint32_t block, uint32_t thread, uint32_t threads,
                               const CallTable* table = nullptr) {
  const uint64_t calls = program.callCounts[block];
  const BlockState s{program, block, thread, threads, packetFlag(calls), (calls & 1) != 0, table};
  for (uint32_t i = program.blockOps[block]; i < program.blockOps[block + 1]; ++i) {
    runOp<Reduce, kUnitsPerStep>(s, program.ops[i]);
  }
  syncBlock();  // every thread has read the count before it moves on
  if (thread == 0) program.callCounts[block] = calls + 1;
}

// runBlock for a program that travels inline (inline_program.hpp): its ops come from `inlined`, and
// only the call count from Program's memory.
template <typename Reduce>
LOOM_HOST_DEVICE void runInlineBlock(const Program& program, const InlineProgram& inlined, uint32_t block,
                                     uint32_t thread, uint32_t threads) {
  const uint64_t calls = program.callCounts[block];
  const BlockState s{program, block, thread, threads, packetFlag(calls), (calls & 1) != 0};
  for (uint32_t i = inlined.blockOps[block]; i < inlined.blockOps[block + 1]; ++i) {
    runInlineOp<Reduce>(s, inlined.op[i], inlined.operand);
  }
  syncBlock();
  if (thread == 0) program.callCounts[block] = calls + 1;
}

}  // namespace loom::device
