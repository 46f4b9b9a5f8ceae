#pragma once

// The generic data handler: any mix of sources and destinations, local, peer (memory channel) or LL
// packets, 16-byte unit by unit, each operand's kind and alignment looked at per unit. Every transfer
// resolution does not specialise (fast_transfer.hpp) runs here; so does the short last unit of one
// it does.

#include <cstdint>

#include "loom/device/block_state.hpp"
#include "loom/device/copy.hpp"
#include "loom/device/macros.hpp"
#include "loom/device/numeric.hpp"
#include "loom/device/packet.hpp"
#include "loom/device/program.hpp"

namespace loom::device {

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

// Plain sources a thread loads before it combines any of them: an unrolled batch, so their reads (NVLink
// reads of peers' buffers, in the reductions of bandwidth plans) are in flight together; a loop over
// all sources waits for each read before it issues the next. Packet sources are polled one by one.
inline constexpr uint32_t kLoadedTogether = 2;

// Every source combined into every destination, unit by unit from unit `begin`. Units go round-robin
// over the block's threads. Sources are combined in order (the same arithmetic, in the same order, as
// the fast handlers); where every operand is plain and aligned, whole units load kLoadedTogether
// sources at a time.
template <typename Units, uint32_t kUnitsPerStep = 1>
LOOM_HOST_DEVICE void transferUnits(const BlockState& s, const Op& op, uint64_t begin = 0) {
  UnitIo io[kMaxTransferOperands];
  const uint32_t count = uint32_t(op.srcs) + op.dsts;
  bool plain = true;
  for (uint32_t i = 0; i < count; ++i) {
    const Operand& o = s.program.operands[op.first + i];
    io[i].address = operandAddress(s, o);
    io[i].packet = o.packet != 0;
    io[i].aligned = reinterpret_cast<uintptr_t>(io[i].address) % 16 == 0;
    plain = plain && !io[i].packet && io[i].aligned;
  }
  const uint64_t units = (op.bytes + 15) / 16;
  const uint64_t whole = plain ? op.bytes / 16 : 0;
  const int32_t planOp = int32_t(op.planOp);
  const uint64_t stride = s.threads;
  uint64_t unit = begin + s.thread;
  // Whole units of plain aligned operands, kUnitsPerStep units per step, kLoadedTogether sources of
  // each loaded before any of them is combined.
  if constexpr (kUnitsPerStep == 1) {
    // The first source on its own: in the 64 registers of 1024-thread blocks the general form spills more.
    for (; unit < whole; unit += stride) {
      typename Units::Acc acc = Units::start(reinterpret_cast<const Vec16*>(io[0].address)[unit]);
      for (uint32_t first = 1; first < op.srcs; first += kLoadedTogether) {
        Vec16 in[kLoadedTogether];
        LOOM_UNROLL
        for (uint32_t k = 0; k < kLoadedTogether; ++k) {
          if (first + k < op.srcs) in[k] = reinterpret_cast<const Vec16*>(io[first + k].address)[unit];
        }
        LOOM_UNROLL
        for (uint32_t k = 0; k < kLoadedTogether; ++k) {
          if (first + k < op.srcs) Units::add(acc, in[k]);
        }
      }
      const Vec16 result = Units::finish(acc);
      for (uint32_t i = op.srcs; i < count; ++i) reinterpret_cast<Vec16*>(io[i].address)[unit] = result;
    }
  } else {
    for (; unit + (kUnitsPerStep - 1) * stride < whole; unit += kUnitsPerStep * stride) {
      typename Units::Acc acc[kUnitsPerStep];
      for (uint32_t first = 0; first < op.srcs; first += kLoadedTogether) {
        Vec16 in[kUnitsPerStep][kLoadedTogether];
        LOOM_UNROLL
        for (uint32_t u = 0; u < kUnitsPerStep; ++u) {
          LOOM_UNROLL
          for (uint32_t k = 0; k < kLoadedTogether; ++k) {
            if (first + k < op.srcs)
              in[u][k] = reinterpret_cast<const Vec16*>(io[first + k].address)[unit + u * stride];
          }
        }
        LOOM_UNROLL
        for (uint32_t u = 0; u < kUnitsPerStep; ++u) {
          LOOM_UNROLL
          for (uint32_t k = 0; k < kLoadedTogether; ++k) {
            if (first + k == 0) {
              acc[u] = Units::start(in[u][k]);
            } else if (first + k < op.srcs) {
              Units::add(acc[u], in[u][k]);
            }
          }
        }
      }
      LOOM_UNROLL
      for (uint32_t u = 0; u < kUnitsPerStep; ++u) {
        const Vec16 result = Units::finish(acc[u]);
        for (uint32_t i = op.srcs; i < count; ++i) reinterpret_cast<Vec16*>(io[i].address)[unit + u * stride] = result;
      }
    }
  }
  for (; unit < units; unit += stride) {
    const uint64_t bytes = unit + 1 < units || op.bytes % 16 == 0 ? 16 : op.bytes % 16;
    typename Units::Acc acc = Units::start(io[0].load(unit, bytes, s, planOp));
    for (uint32_t i = 1; i < op.srcs; ++i) Units::add(acc, io[i].load(unit, bytes, s, planOp));
    const Vec16 result = Units::finish(acc);
    for (uint32_t i = op.srcs; i < count; ++i) io[i].store(unit, bytes, result, s);
  }
}

template <typename Reduce, uint32_t kUnitsPerStep = 1>
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
    transferUnits<Reduce, kUnitsPerStep>(s, op);
  } else {
    transferUnits<CopyUnits, kUnitsPerStep>(s, op);
  }
}

}  // namespace loom::device
