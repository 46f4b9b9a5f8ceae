#pragma once

// Counted calls (alltoallv plans, docs/executor.md "counted plans"): ops whose byte ranges are entries of
// the call's table, read at run time. A publishing signal writes this rank's receive entry from a peer
// into the peer's mailbox of the channel; a kEntryCopy copies a part of a send entry into a part of a
// receive entry, this rank's own or the one a peer published into this rank's mailbox. Each part is the
// entry cut into chunks as a plan's slot is: chunk c = ceil(bytes / k) rounded up to the alignment.

#include <cstdint>

#include "loom/device/atomics.hpp"
#include "loom/device/block_state.hpp"
#include "loom/device/copy.hpp"
#include "loom/device/diagnostics.hpp"
#include "loom/device/macros.hpp"
#include "loom/device/program.hpp"

namespace loom::device {

LOOM_HOST_DEVICE CallEntry tableEntry(const CallTable& table, uint32_t index) {
  return table.entries != nullptr ? table.entries[index] : table.held[index];
}

// The entry a peer published into this rank's mailbox of channel `channel` (relaxed: the peer's signal,
// which this block waited for, orders it).
LOOM_HOST_DEVICE CallEntry mailboxEntry(const Program& program, uint32_t channel) {
  auto* words = reinterpret_cast<uint64_t*>(static_cast<uint8_t*>(program.buffers[2]) + kMailboxBytes * channel);
  return {loadRelaxed(&words[0]), loadRelaxed(&words[1])};
}

// [begin, end) of chunks [first, first + count) of an entry of `bytes` cut into `chunks` chunks.
struct EntryPart {
  uint64_t begin;
  uint64_t end;
};
LOOM_HOST_DEVICE EntryPart entryPart(uint64_t bytes, const Operand& o, uint32_t alignment) {
  const uint64_t chunks = o.entryChunks == 0 ? 1 : o.entryChunks;
  uint64_t chunk = (bytes + chunks - 1) / chunks;
  chunk = (chunk + alignment - 1) / alignment * alignment;
  const uint64_t begin = uint64_t(o.firstChunk) * chunk, end = uint64_t(o.firstChunk + o.chunkCount) * chunk;
  return {begin < bytes ? begin : bytes, end < bytes ? end : bytes};
}

// Stops the call on an entry that cannot run (a record the host explains, then a trap or an exception).
LOOM_HOST_DEVICE void stopOnEntry(WaitKind kind, const WaitContext& where, uint64_t expected, uint64_t seen,
                                  int32_t op) {
  reportTimeout(where, kind, op, expected, seen, 0);
}

LOOM_HOST_DEVICE void checkInside(const BlockState& s, const CallEntry& entry, uint64_t limit, int32_t op) {
  if (entry.offset > limit || entry.bytes > limit - entry.offset) {
    stopOnEntry(WaitKind::kEntryOutside, s.program.wait, limit, entry.offset + entry.bytes, op);
  }
}

// A publishing signal's first step, by the thread that then signals the channel: the receive entry into
// the peer's mailbox. The entry is checked against this rank's output first: the peer writes it.
LOOM_HOST_DEVICE void publishEntry(const BlockState& s, const Operand& o, const ChannelView& channel, int32_t op) {
  const CallEntry entry = tableEntry(*s.table, o.entry);
  checkInside(s, entry, s.table->outputBytes, op);
  auto* words = reinterpret_cast<uint64_t*>(static_cast<uint8_t*>(channel.peerBuffers[2]) + o.offset);
  storeRelaxed(&words[0], entry.offset);
  storeRelaxed(&words[1], entry.bytes);
}

// The same over a port channel, where the proxy moves the bytes: the entry goes into this rank's staging
// area at the mailbox's offset (the staging area mirrors the peer's scratch), and one trigger copies it into
// the peer's mailbox and then signals the peer, so the entry arrives before the signal that announces it.
LOOM_HOST_DEVICE void publishEntryThroughProxy(const BlockState& s, const Operand& o, ChannelView& channel,
                                               int32_t op) {
  const CallEntry entry = tableEntry(*s.table, o.entry);
  checkInside(s, entry, s.table->outputBytes, op);
  auto* words = reinterpret_cast<uint64_t*>(static_cast<uint8_t*>(channel.staging) + o.offset);
  storeRelaxed(&words[0], entry.offset);
  storeRelaxed(&words[1], entry.bytes);
  PortChannelHandle& port = channel.port;
  port.fifo.push(o.offset, o.offset, kMailboxBytes,
                 ProxyTrigger::makeMeta(kTriggerData | kTriggerSignal, port.semaphoreId, channel.portMemory[2],
                                        channel.stagingMemory),
                 op);
}

// The data address of a part of an entry: this rank's buffer, or a peer's output through a channel.
LOOM_HOST_DEVICE uint8_t* entryAddress(const BlockState& s, const Operand& o, uint64_t at) {
  if (o.channel == kLocalOperand) return static_cast<uint8_t*>(s.program.buffers[o.buffer]) + at;
  const ChannelView& channel = s.program.channels[o.channel];
  const int64_t shift = s.program.peerShifts[channel.shiftSlot][o.buffer];
  return static_cast<uint8_t*>(channel.peerBuffers[o.buffer]) + at + shift;
}

// One part of a send entry into the same part of a receive entry. Every thread reads the entries and
// checks them alike, so the block takes one branch.
LOOM_HOST_DEVICE void runEntryCopy(const BlockState& s, const Op& op) {
  const Operand& src = s.program.operands[op.first];
  const Operand& dst = s.program.operands[op.first + 1];
  const int32_t planOp = int32_t(op.planOp);
  const CallEntry from = tableEntry(*s.table, src.entry);
  checkInside(s, from, s.table->inputBytes, planOp);
  CallEntry to{};
  if (dst.sizing == OperandSizing::kMailbox) {
    to = mailboxEntry(s.program, dst.entry);
    if (from.bytes != to.bytes) {
      const ChannelView& channel = s.program.channels[dst.channel];
      const WaitContext& where = channel.isPort ? channel.port.semaphore.waitContext : channel.memory.waitContext;
      stopOnEntry(WaitKind::kEntryMismatch, where, to.bytes, from.bytes, planOp);
    }
  } else {
    to = tableEntry(*s.table, dst.entry);
    checkInside(s, to, s.table->outputBytes, planOp);
    if (from.bytes != to.bytes) stopOnEntry(WaitKind::kEntryMismatch, s.program.wait, to.bytes, from.bytes, planOp);
  }
  const EntryPart part = entryPart(from.bytes, src, s.table->alignment);
  const EntryPart into = entryPart(to.bytes, dst, s.table->alignment);
  if (dst.channel != kLocalOperand && s.program.channels[dst.channel].isPort) {
    // The proxy copies out of this rank's registered input into the peer's registered output, in one trigger
    // that also signals (and is waited for) when the op fused those; an empty part still signals.
    uint64_t flags = part.end > part.begin ? kTriggerData : 0;
    if (op.flags & kOpPortSignal) flags |= kTriggerSignal;
    if (op.flags & kOpPortFlush) flags |= kTriggerFlush;
    if (s.thread == 0 && flags != 0) {
      ChannelView& channel = s.program.channels[dst.channel];
      const uint64_t position =
          channel.port.fifo.push(to.offset + into.begin, from.offset + part.begin, part.end - part.begin,
                                 ProxyTrigger::makeMeta(flags, channel.port.semaphoreId, channel.portMemory[dst.buffer],
                                                        s.program.portBuffers[src.buffer]),
                                 planOp);
      if (op.flags & kOpPortFlush) channel.port.fifo.sync(position, planOp);
    }
    return;
  }
  if (part.end <= part.begin) return;
  copyBytes(entryAddress(s, dst, to.offset + into.begin), entryAddress(s, src, from.offset + part.begin),
            part.end - part.begin, s.thread, s.threads);
}

}  // namespace loom::device
