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
#include "loom/device/copy.hpp"
#include "loom/device/diagnostics.hpp"
#include "loom/device/macros.hpp"
#include "loom/device/numeric.hpp"
#include "loom/device/packet.hpp"
#include "loom/device/program.hpp"

namespace loom::device {

struct BlockState {
  const Program& program;
  uint32_t block;
  uint32_t thread;
  uint32_t threads;
  uint32_t flag;  // this call's LL packet flag: never 0, so zeroed scratch never matches
  bool odd;       // this call's parity: which half of LL scratch it uses
};

LOOM_HOST_DEVICE void syncBlock() {
#if LOOM_DEVICE_PASS
  __syncthreads();
#endif
}

LOOM_HOST_DEVICE uint8_t* operandAddress(const BlockState& s, const Operand& o) {
  void* base = o.channel == kLocalOperand      ? s.program.buffers[o.buffer]
               : o.buffer == kStagingBuffer ? s.program.channels[o.channel].staging
                                            : s.program.channels[o.channel].peerBuffers[o.buffer];
  return static_cast<uint8_t*>(base) + o.offset + (s.odd ? o.oddOffset : 0);
}

// The call's LL flag for a block that has finished `calls` calls: 1, 2, ..., skipping 0 on wrap.
LOOM_HOST_DEVICE uint32_t packetFlag(uint64_t calls) { return uint32_t(calls % 0xFFFFFFFFu) + 1; }

// A copy of 16-byte units: the accumulator is the unit itself.
struct CopyUnits {
  using Acc = Vec16;
  LOOM_HOST_DEVICE static Acc start(const Vec16& v) { return v; }
  LOOM_HOST_DEVICE static void add(Acc&, const Vec16&) {}
  LOOM_HOST_DEVICE static Vec16 finish(const Acc& acc) { return acc; }
};

// A reduction of 16-byte units of T with operator K, in T's (possibly wider) accumulation type.
template <typename T, ReduceKind K>
struct ReduceUnits {
  using Acc = AccPack<T>;
  LOOM_HOST_DEVICE static Acc start(const Vec16& v) { return toAccPack<T>(reinterpret_cast<const T*>(&v)); }
  LOOM_HOST_DEVICE static void add(Acc& acc, const Vec16& v) { accumulate<K, T>(acc, reinterpret_cast<const T*>(&v)); }
  LOOM_HOST_DEVICE static Vec16 finish(const Acc& acc) {
    Vec16 out;
    fromAccPack<T>(acc, reinterpret_cast<T*>(&out));
    return out;
  }
};

// Reads and writes of one 16-byte unit (the last may be short: `bytes` < 16) at a data address or
// as two LL16 packets.
struct UnitIo {
  uint8_t* address;
  bool packet;
  bool aligned;

  LOOM_HOST_DEVICE Vec16 load(uint64_t unit, uint64_t bytes, const BlockState& s, int32_t op) const {
    Vec16 v{0, 0};
    if (packet) {
      const auto* packets = reinterpret_cast<const LL16Packet*>(address) + 2 * unit;
      v.x = packets[0].read(s.flag, s.program.wait, op);
      if (bytes > 8) v.y = packets[1].read(s.flag, s.program.wait, op);
    } else if (bytes == 16 && aligned) {
      v = reinterpret_cast<const Vec16*>(address)[unit];
    } else {
      const uint8_t* at = address + 16 * unit;
      v.x = loadPartial(at, bytes < 8 ? bytes : 8);
      if (bytes > 8) v.y = loadPartial(at + 8, bytes - 8);
    }
    return v;
  }

  LOOM_HOST_DEVICE void store(uint64_t unit, uint64_t bytes, const Vec16& v, const BlockState& s) const {
    if (packet) {
      auto* packets = reinterpret_cast<LL16Packet*>(address) + 2 * unit;
      packets[0].write(v.x, s.flag);
      if (bytes > 8) packets[1].write(v.y, s.flag);
    } else if (bytes == 16 && aligned) {
      reinterpret_cast<Vec16*>(address)[unit] = v;
    } else {
      uint8_t* at = address + 16 * unit;
      storePartial(at, v.x, bytes < 8 ? bytes : 8);
      if (bytes > 8) storePartial(at + 8, v.y, bytes - 8);
    }
  }
};

// Every source combined into every destination, unit by unit. Units go round-robin over the
// block's threads; each thread loads all its sources before it combines them, so several NVLink
// reads are in flight at once.
template <typename Units>
LOOM_HOST_DEVICE void transferUnits(const BlockState& s, const Op& op) {
  UnitIo io[kMaxTransferOperands];
  const uint32_t count = uint32_t(op.srcs) + op.dsts;
  for (uint32_t i = 0; i < count; ++i) {
    const Operand& o = s.program.operands[op.first + i];
    io[i].address = operandAddress(s, o);
    io[i].packet = o.packet != 0;
    io[i].aligned = reinterpret_cast<uintptr_t>(io[i].address) % 16 == 0;
  }
  const uint64_t units = (op.bytes + 15) / 16;
  const int32_t planOp = int32_t(op.planOp);
  for (uint64_t unit = s.thread; unit < units; unit += s.threads) {
    const uint64_t bytes = unit + 1 < units || op.bytes % 16 == 0 ? 16 : op.bytes % 16;
    typename Units::Acc acc = Units::start(io[0].load(unit, bytes, s, planOp));
    for (uint32_t i = 1; i < op.srcs; ++i) Units::add(acc, io[i].load(unit, bytes, s, planOp));
    const Vec16 result = Units::finish(acc);
    for (uint32_t i = op.srcs; i < count; ++i) io[i].store(unit, bytes, result, s);
  }
}

template <typename Reduce>
LOOM_HOST_DEVICE void runTransfer(const BlockState& s, const Op& op) {
  if (op.bytes == 0) return;
  const Operand& first = s.program.operands[op.first];
  const bool plainCopy = op.srcs == 1 && op.dsts == 1 && !(op.flags & kOpReduces) && !first.packet &&
                         !s.program.operands[op.first + 1].packet;
  if (plainCopy) {
    // The common case (put, get, copy): the vectorised copy with several loads in flight.
    copyBytes(operandAddress(s, s.program.operands[op.first + 1]), operandAddress(s, first), op.bytes, s.thread,
              s.threads);
  } else if (op.flags & kOpReduces) {
    transferUnits<Reduce>(s, op);
  } else {
    transferUnits<CopyUnits>(s, op);
  }
}

LOOM_HOST_DEVICE void runSignal(const BlockState& s, const Op& op) {
  for (uint32_t i = s.thread; i < op.srcs; i += s.threads) {
    ChannelView& channel = s.program.channels[s.program.operands[op.first + i].channel];
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
    const uint32_t srcMemory =
        src.buffer == kStagingBuffer ? s.program.channels[src.channel].stagingMemory : s.program.portBuffers[src.buffer];
    const uint64_t meta = ProxyTrigger::makeMeta(triggerFlags, port.semaphoreId,
                                                 s.program.channels[dst.channel].portMemory[dst.buffer], srcMemory);
    const uint64_t position = port.fifo.push(dst.offset + (s.odd ? dst.oddOffset : 0),
                                             src.offset + (s.odd ? src.oddOffset : 0), op.bytes, meta,
                                             int32_t(op.planOp));
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

template <typename Reduce>
LOOM_HOST_DEVICE void runOp(const BlockState& s, const Op& op) {
  if (op.flags & kOpSyncBefore) syncBlock();
  switch (op.code) {
    case OpCode::kTransfer:
      runTransfer<Reduce>(s, op);
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
    case OpCode::kNop:
      break;
  }
  if (op.flags & kOpSyncAfter) syncBlock();
}

// Runs block `block`'s ops for one call, then counts the call (the next one uses the next flag and
// the other LL half). The count lives in memory that outlives the launch, so CUDA graph replays
// advance it too.
template <typename Reduce>
LOOM_HOST_DEVICE void runBlock(const Program& program, uint32_t block, uint32_t thread, uint32_t threads) {
  const uint64_t calls = program.callCounts[block];
  const BlockState s{program, block, thread, threads, packetFlag(calls), (calls & 1) != 0};
  for (uint32_t i = program.blockOps[block]; i < program.blockOps[block + 1]; ++i) runOp<Reduce>(s, program.ops[i]);
  syncBlock();  // every thread has read the count before it moves on
  if (thread == 0) program.callCounts[block] = calls + 1;
}

}  // namespace loom::device
