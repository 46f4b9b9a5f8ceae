#pragma once

// The specialised data handler (kFastTransfer): what resolution picks for the common shapes of a
// transfer (executor/src/specialize.cc): a put to a few peers, packets to a few peers, a reduction of
// up to 8 sources, the packet reduction of LL all-reduces. Against the generic handler
// (transfer.hpp) it gathers its operands once per op into arrays the compiler keeps in registers
// (loops unrolled to kMaxFastOperands), decides alignment once per op instead of per unit, and
// reads every packet source of a unit before it tests any flag, so the polls of all peers overlap.
// The arithmetic is the generic handler's, in the same order: results are bit for bit the same
// (LOOM_GENERIC_PATH=1 runs every transfer generically, to compare).

#include <cstdint>

#include "loom/device/block_state.hpp"
#include "loom/device/copy.hpp"
#include "loom/device/macros.hpp"
#include "loom/device/packet.hpp"
#include "loom/device/program.hpp"
#include "loom/device/transfer.hpp"

namespace loom::device {

template <typename Units>
LOOM_HOST_DEVICE void runFastTransfer(const BlockState& s, const Op& op) {
  constexpr uint32_t K = kMaxFastOperands;
  const Operand* operands = s.program.operands + op.first;
  const uint32_t sources = op.srcs, destinations = op.dsts, plainSources = op.srcs - op.packetSources;
  uint8_t* src[K];
  uint8_t* dst[K];
  bool dstPacket[K];
  uintptr_t addressBits = 0;  // the plain operands' addresses or-ed: 16-byte aligned when its low bits are 0
LOOM_UNROLL
  for (uint32_t i = 0; i < K; ++i) {
    src[i] = i < sources ? operandAddress(s, operands[i]) : nullptr;
    if (i < plainSources) addressBits |= reinterpret_cast<uintptr_t>(src[i]);
    dst[i] = i < destinations ? operandAddress(s, operands[sources + i]) : nullptr;
    dstPacket[i] = i < destinations && operands[sources + i].packet != 0;
    if (i < destinations && !dstPacket[i]) addressBits |= reinterpret_cast<uintptr_t>(dst[i]);
  }
  // Whole 16-byte units here; the short last unit, or every unit when a plain operand is not
  // 16-byte aligned, goes through the generic handler.
  const uint64_t whole = addressBits % 16 == 0 ? op.bytes / 16 : 0;
  const int32_t planOp = int32_t(op.planOp);
  const uint64_t flags = LL16Packet::bothFlags(s.flag);
  for (uint64_t unit = s.thread; unit < whole; unit += s.threads) {
    Vec16 in[K];
    uint64_t seen[K][2];
LOOM_UNROLL
    for (uint32_t i = 0; i < K; ++i) {
      if (i < plainSources) {
        in[i] = reinterpret_cast<const Vec16*>(src[i])[unit];
      } else if (i < sources) {
        const LL16Packet* packets = reinterpret_cast<const LL16Packet*>(src[i]) + 2 * unit;
        seen[i][0] = packets[0].look(in[i].x);
        seen[i][1] = packets[1].look(in[i].y);
      }
    }
LOOM_UNROLL
    for (uint32_t i = 0; i < K; ++i) {  // only now wait for the packets that were not there yet
      if (i >= plainSources && i < sources) {
        const LL16Packet* packets = reinterpret_cast<const LL16Packet*>(src[i]) + 2 * unit;
        if (seen[i][0] != flags) in[i].x = packets[0].read(s.flag, s.program.wait, planOp);
        if (seen[i][1] != flags) in[i].y = packets[1].read(s.flag, s.program.wait, planOp);
      }
    }
    typename Units::Acc acc = Units::start(in[0]);
LOOM_UNROLL
    for (uint32_t i = 1; i < K; ++i) {
      if (i < sources) Units::add(acc, in[i]);
    }
    const Vec16 result = Units::finish(acc);
LOOM_UNROLL
    for (uint32_t i = 0; i < K; ++i) {
      if (i >= destinations) continue;
      if (dstPacket[i]) {
        LL16Packet* packets = reinterpret_cast<LL16Packet*>(dst[i]) + 2 * unit;
        packets[0].write(result.x, s.flag);
        packets[1].write(result.y, s.flag);
      } else {
        reinterpret_cast<Vec16*>(dst[i])[unit] = result;
      }
    }
  }
  transferUnits<Units>(s, op, whole);
}

}  // namespace loom::device
