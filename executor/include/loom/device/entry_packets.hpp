#pragma once

// Counted calls in LL packets: the alltoallv plans of protocol "ll" (docs/executor.md, "small messages
// without the handshake"). A sender writes its send entry as LL16 packets into its region of the peer's
// scratch, led by a count packet that carries the entry's byte count; the receiver polls the count packet,
// checks it against its own receive entry and unpacks that many bytes into its output. No signal and no
// wait: one crossing of NVLink. The regions are double-buffered by call parity, and both directions of
// every pair run in every call (a lone send has a zero-byte entry back: its count packet alone), so a
// rank's call k ends only once its peer's call-k packets arrived, which the peer wrote after its call k-1
// had read everything: a half is never written while the peer may still read it (the LL plans' argument).
//
// Operands: a region is a scratch operand of fixed offset (the half's region; oddOffset for odd calls);
// its `entry` names the channel to the peer, whose wait context the receiver's reports name. The op's
// `bytes` is the plan's capacity per entry.

#include <cstdint>

#include "loom/device/block_state.hpp"
#include "loom/device/entry_copy.hpp"
#include "loom/device/packet.hpp"
#include "loom/device/program.hpp"
#include "loom/device/transfer.hpp"

namespace loom::device {

LOOM_HOST_DEVICE UnitIo plainUnits(uint8_t* address) {
  return {address, false, reinterpret_cast<uintptr_t>(address) % 16 == 0};
}

// Moves `bytes` from `from` into `to` 16-byte unit by unit, the block's threads taking every threads-th.
LOOM_HOST_DEVICE void moveUnits(const BlockState& s, const UnitIo& from, const UnitIo& to, uint64_t bytes, int32_t op) {
  const uint64_t units = (bytes + 15) / 16;
  for (uint64_t unit = s.thread; unit < units; unit += s.threads) {
    const uint64_t left = bytes - 16 * unit;
    const uint64_t length = left < 16 ? left : 16;
    to.store(unit, length, from.load(unit, length, s, op), s);
  }
}

// The sender's side: the count packet, then the entry's packets, into the peer's region.
LOOM_HOST_DEVICE void runEntryPutPackets(const BlockState& s, const Op& op) {
  const Operand& src = s.program.operands[op.first];
  const Operand& dst = s.program.operands[op.first + 1];
  const int32_t planOp = int32_t(op.planOp);
  const CallEntry from = tableEntry(*s.table, src.entry);
  checkInside(s, from, s.table->inputBytes, planOp);
  if (from.bytes > op.bytes) stopOnEntry(WaitKind::kEntryOutside, s.program.wait, op.bytes, from.bytes, planOp);
  uint8_t* region = operandAddress(s, dst);
  if (s.thread == 0) reinterpret_cast<LL16Packet*>(region)->write(from.bytes, s.flag);
  moveUnits(s, plainUnits(entryAddress(s, src, from.offset)), {region + sizeof(LL16Packet), true, true}, from.bytes,
            planOp);
}

// The receiver's side: the count packet first (every thread reads it, so the block takes one branch), then
// the packets into the receive entry.
LOOM_HOST_DEVICE void runEntryUnpackPackets(const BlockState& s, const Op& op) {
  const Operand& src = s.program.operands[op.first];
  const Operand& dst = s.program.operands[op.first + 1];
  const int32_t planOp = int32_t(op.planOp);
  const CallEntry to = tableEntry(*s.table, dst.entry);
  checkInside(s, to, s.table->outputBytes, planOp);
  const uint8_t* region = operandAddress(s, src);
  const WaitContext& where = s.program.channels[src.entry].memory.waitContext;
  const uint64_t count = reinterpret_cast<const LL16Packet*>(region)->read(s.flag, where, planOp);
  if (count != to.bytes) stopOnEntry(WaitKind::kEntrySentMismatch, where, to.bytes, count, planOp);
  moveUnits(s, {const_cast<uint8_t*>(region) + sizeof(LL16Packet), true, true},
            plainUnits(entryAddress(s, dst, to.offset)), to.bytes, planOp);
}

}  // namespace loom::device
