#pragma once

// The specialised data handlers, which resolution picks for the common shapes of a transfer
// (executor/src/specialize.cc): kFastTransfer (a put to a few peers, packets to a few peers, a
// reduction of up to 8 sources, the packet reduction of LL all-reduces) and kOneShot (a packet put
// and the packet reduction of the same chunk, fused), plus kCopy. They run in the inline kernel, from
// records in its parameters (inline_program.hpp). Against the generic handler (transfer.hpp) they
// gather an op's operands once into arrays the compiler keeps in registers (loops unrolled to
// kMaxFastOperands, no 72-entry operand array), decide alignment once per op instead of per unit,
// and read the packet sources of a unit, two at a time, before they wait for any of them, so the
// polls of several peers overlap. They never call the generic handler, so the inline kernel carries
// none of the generic path. The arithmetic is the generic handler's, in the same order: results are
// bit for bit the same (LOOM_FAST_PATH chooses the path, so tests compare the two).

#include <cstdint>

#include "loom/device/block_state.hpp"
#include "loom/device/copy.hpp"
#include "loom/device/inline_program.hpp"
#include "loom/device/macros.hpp"
#include "loom/device/packet.hpp"
#include "loom/device/program.hpp"
#include "loom/device/transfer.hpp"

namespace loom::device {

// What a fast handler needs of one op, gathered once: operand addresses (this call's half of LL
// scratch), which are packets, counts, and whether every plain operand is 16-byte aligned; from the
// kernel's parameters (inlineFastOp, inline_program.hpp).
struct FastOp {
  uint8_t* src[kMaxFastOperands];
  uint8_t* dst[kMaxFastOperands];
  bool dstPacket[kMaxFastOperands];
  uint32_t sources, destinations, plainSources;
  uint32_t inputDestinations;  // kOneShot: the last this many destinations get source 0 as it is
  uint64_t bytes;
  int32_t planOp;
  bool aligned;  // every plain operand starts on a 16-byte boundary
};

LOOM_HOST_DEVICE void finishFastOp(FastOp& f) {
  uintptr_t addressBits = 0;  // the plain operands' addresses or-ed: aligned when its low 4 bits are 0
  LOOM_UNROLL
  for (uint32_t i = 0; i < kMaxFastOperands; ++i) {
    if (i < f.plainSources) addressBits |= reinterpret_cast<uintptr_t>(f.src[i]);
    if (i < f.destinations && !f.dstPacket[i]) addressBits |= reinterpret_cast<uintptr_t>(f.dst[i]);
  }
  f.aligned = addressBits % 16 == 0;
}

LOOM_HOST_DEVICE FastOp inlineFastOp(const BlockState& s, const InlineOp& op, const InlineOperand* operands) {
  FastOp f;
  operands += op.first;
  f.sources = op.srcs;
  f.destinations = op.dsts;
  f.plainSources = uint32_t(op.srcs) - op.packetSources;
  f.inputDestinations = op.inputDestinations;
  f.bytes = op.bytes;
  f.planOp = int32_t(op.planOp);
  const auto address = [&](uint32_t i) {
    return reinterpret_cast<uint8_t*>(operands[i].address + (s.odd ? operands[i].oddOffset : 0));
  };
  LOOM_UNROLL
  for (uint32_t i = 0; i < kMaxFastOperands; ++i) {
    f.src[i] = i < f.sources ? address(i) : nullptr;
    f.dst[i] = i < f.destinations ? address(f.sources + i) : nullptr;
    f.dstPacket[i] = i < f.destinations && ((op.packetDestinations >> i) & 1) != 0;
  }
  finishFastOp(f);
  return f;
}

// Units from `begin` on, each operand read and written through UnitIo (any alignment, a short last
// unit): for what the whole-unit loops below do not take. The first `sources` sources are combined
// and written to destinations [dstBegin, dstEnd). Out of line and not unrolled: it is the cold path
// (a message's last unit, or operands a user's buffer leaves unaligned).
template <typename Units>
LOOM_HOST_DEVICE_COLD void fastUnitsByPartsCold(const BlockState& s, const FastOp& f, uint64_t begin, uint32_t sources,
                                                uint32_t dstBegin, uint32_t dstEnd) {
  const uint64_t units = (f.bytes + 15) / 16;
  for (uint64_t unit = begin + s.thread; unit < units; unit += s.threads) {
    const uint64_t bytes = unit + 1 < units || f.bytes % 16 == 0 ? 16 : f.bytes % 16;
    const auto io = [&](uint8_t* address, bool packet) {
      return UnitIo{address, packet, reinterpret_cast<uintptr_t>(address) % 16 == 0};
    };
    typename Units::Acc acc = Units::start(io(f.src[0], f.plainSources == 0).load(unit, bytes, s, f.planOp));
    for (uint32_t i = 1; i < sources; ++i) {
      Units::add(acc, io(f.src[i], i >= f.plainSources).load(unit, bytes, s, f.planOp));
    }
    const Vec16 result = Units::finish(acc);
    for (uint32_t i = dstBegin; i < dstEnd; ++i) io(f.dst[i], f.dstPacket[i]).store(unit, bytes, result, s);
  }
}

// Calls the cold path only for a thread that has a unit there: a call passes the op and the block state
// by reference, so each thread that makes it first stores them to its stack (hundreds of bytes).
template <typename Units>
LOOM_HOST_DEVICE void fastUnitsByParts(const BlockState& s, const FastOp& f, uint64_t begin, uint32_t sources,
                                       uint32_t dstBegin, uint32_t dstEnd) {
  if (begin + s.thread < (f.bytes + 15) / 16) fastUnitsByPartsCold<Units>(s, f, begin, sources, dstBegin, dstEnd);
}

// Packet sources are read this many at a time before any of them is waited for: the polls of two peers
// overlap, and the values fit in registers beside the operands. In the inline kernel (128 registers,
// nvcc 13) 2 spill nothing; 4 spill 4-24 bytes, 8 (every source at once) 76-116 bytes per thread.
inline constexpr uint32_t kPolledTogether = 2;

// Stores one 16-byte unit into destination i, as two LL16 packets or as it is.
LOOM_HOST_DEVICE void storeFastUnit(const BlockState& s, const FastOp& f, uint32_t i, uint64_t unit,
                                    const Vec16& value) {
  if (f.dstPacket[i]) {
    LL16Packet* packets = reinterpret_cast<LL16Packet*>(f.dst[i]) + 2 * unit;
    packets[0].write(value.x, s.flag);
    packets[1].write(value.y, s.flag);
  } else {
    reinterpret_cast<Vec16*>(f.dst[i])[unit] = value;
  }
}

// The whole 16-byte units of a fast transfer or one-shot: the first `sources` sources combined into
// destinations [dstBegin, dstEnd); with kInputToo, the first source (plain) also goes, as it is, to
// destinations [dstEnd, f.destinations) (the one-shot's packet puts, from the one load).
template <typename Units, bool kInputToo>
LOOM_HOST_DEVICE void fastWholeUnits(const BlockState& s, const FastOp& f, uint64_t whole, uint32_t sources,
                                     uint32_t dstBegin, uint32_t dstEnd) {
  constexpr uint32_t K = kMaxFastOperands;
  const uint64_t flags = LL16Packet::bothFlags(s.flag);
  for (uint64_t unit = s.thread; unit < whole; unit += s.threads) {
    // Plain sources first, in order, combined as they arrive (their loads are independent, so they
    // are in flight together); then the packet sources, group by group.
    typename Units::Acc acc{};
    if (f.plainSources > 0) {
      const Vec16 first = reinterpret_cast<const Vec16*>(f.src[0])[unit];
      if constexpr (kInputToo) {
        LOOM_UNROLL
        for (uint32_t i = 0; i < K; ++i) {
          if (i >= dstEnd && i < f.destinations) storeFastUnit(s, f, i, unit, first);
        }
      }
      acc = Units::start(first);
    }
    LOOM_UNROLL
    for (uint32_t i = 1; i < K; ++i) {
      if (i < f.plainSources && i < sources) Units::add(acc, reinterpret_cast<const Vec16*>(f.src[i])[unit]);
    }
    LOOM_UNROLL
    for (uint32_t group = 0; group < K; group += kPolledTogether) {
      if (group >= sources) break;
      Vec16 in[kPolledTogether];
      bool ready[kPolledTogether] = {};
      LOOM_UNROLL
      for (uint32_t j = 0; j < kPolledTogether; ++j) {
        const uint32_t i = group + j;
        if (i >= f.plainSources && i < sources) {
          const LL16Packet* packets = reinterpret_cast<const LL16Packet*>(f.src[i]) + 2 * unit;
          const bool low = packets[0].look(in[j].x) == flags;
          ready[j] = packets[1].look(in[j].y) == flags && low;
        }
      }
      uint32_t pending = 0;  // the group's packets that were not there at the first look
      LOOM_UNROLL
      for (uint32_t j = 0; j < kPolledTogether; ++j) {
        const uint32_t i = group + j;
        if (i >= f.plainSources && i < sources && !ready[j]) pending |= 1u << j;
      }
      if (pending != 0) {
        const void* missing = nullptr;  // a packet still not there: the record names it
        spinUntil(
            s.program.wait, WaitKind::kPacket, f.planOp, s.flag,
            [&]() -> uint64_t {
              uint64_t seen = flags;
              LOOM_UNROLL
              for (uint32_t j = 0; j < kPolledTogether; ++j) {
                if (!(pending & (1u << j))) continue;
                const LL16Packet* packets = reinterpret_cast<const LL16Packet*>(f.src[group + j]) + 2 * unit;
                Vec16 value;
                const uint64_t low = packets[0].look(value.x), high = packets[1].look(value.y);
                if (low == flags && high == flags) {
                  in[j] = value;
                  pending &= ~(1u << j);
                } else {
                  seen = low != flags ? low : high;
                  missing = packets;
                }
              }
              return pending == 0 ? flags : seen;
            },
            [&](uint64_t) { return pending == 0; }, &missing);
      }
      LOOM_UNROLL
      for (uint32_t j = 0; j < kPolledTogether; ++j) {
        const uint32_t i = group + j;
        if (i >= f.plainSources && i < sources) {
          if (i == 0) {
            acc = Units::start(in[j]);
          } else {
            Units::add(acc, in[j]);
          }
        }
      }
    }
    const Vec16 result = Units::finish(acc);
    LOOM_UNROLL
    for (uint32_t i = 0; i < K; ++i) {
      if (i >= dstBegin && i < dstEnd) storeFastUnit(s, f, i, unit, result);
    }
  }
}

template <typename Units>
LOOM_HOST_DEVICE void runFastTransfer(const BlockState& s, const FastOp& f) {
  const uint64_t whole = f.aligned ? f.bytes / 16 : 0;
  fastWholeUnits<Units, false>(s, f, whole, f.sources, 0, f.destinations);
  // the short last unit, or every unit when not aligned
  fastUnitsByParts<Units>(s, f, whole, f.sources, 0, f.destinations);
}

// The fused one-shot (kOneShot): the local chunk (source 0) goes as packets to the peers (the last
// `inputDestinations` destinations), and is reduced with the peers' packets of the same chunk (the
// other sources) into the first destinations. Its sends of a unit precede its wait for that unit's
// packets, as in the two ops it replaces, so it cannot wait on a peer that waits on it. When a thread
// has one unit, the chunk is loaded once for both; with more, every unit is sent before the first
// wait (a wait per unit between sends would put one peer round trip per unit on the critical path),
// and the chunk is loaded again for the reduction (from cache).
template <typename Units>
LOOM_HOST_DEVICE void runOneShot(const BlockState& s, const FastOp& f) {
  const uint64_t whole = f.aligned ? f.bytes / 16 : 0;
  const uint32_t results = f.destinations - f.inputDestinations;
  if (whole <= s.threads) {
    fastWholeUnits<Units, true>(s, f, whole, f.sources, 0, results);
  } else {
    fastWholeUnits<CopyUnits, false>(s, f, whole, 1, results, f.destinations);
    fastWholeUnits<Units, false>(s, f, whole, f.sources, 0, results);
  }
  fastUnitsByParts<CopyUnits>(s, f, whole, 1, results, f.destinations);
  fastUnitsByParts<Units>(s, f, whole, f.sources, 0, results);
}

// One data op of an inline program. A generic kTransfer never reaches it: a program with one is not
// inlined (inline_records.cc) and runs in the generic kernel.
template <typename Reduce>
LOOM_HOST_DEVICE void runFastData(const BlockState& s, OpCode code, bool reduces, const FastOp& f) {
  if (code == OpCode::kCopy) {
    copyBytes(f.dst[0], f.src[0], f.bytes, s.thread, s.threads);
  } else if (code == OpCode::kFastTransfer) {
    if (reduces) {
      runFastTransfer<Reduce>(s, f);
    } else {
      runFastTransfer<CopyUnits>(s, f);
    }
  } else if (code == OpCode::kOneShot) {
    runOneShot<Reduce>(s, f);
  }
}

}  // namespace loom::device
