#pragma once

// The flat program the interpreter runs: a plan resolved for one rank and one message size. Every
// thread block has a contiguous run of fixed-size op records whose chunk references are already
// byte offsets; operands name a buffer of this rank or of the peer behind a channel. Built on the
// host (executor/src/resolve.cc), read by the GPU kernel and by the CPU backend alike.

#include <cstdint>

#include "loom/device/diagnostics.hpp"
#include "loom/device/macros.hpp"
#include "loom/device/port_channel_device.hpp"
#include "loom/device/semaphore_device.hpp"

namespace loom::device {

enum class OpCode : uint8_t {
  kTransfer,            // move or reduce bytes: any mix of local, peer (memory channel) and packet operands
  kCopy,                // a kTransfer resolution specialised: one plain source, one plain destination
  kFastTransfer,        // a kTransfer specialised: 1-8 sources (plain, then `packetSources` of packets),
                        // 1-8 destinations; fast_transfer.hpp
  kOneShot,             // a packet put of a chunk and the reduction of the peers' packets of that chunk with it,
                        // fused (fast_transfer.hpp): the last `inputDestinations` destinations get the chunk
  kPortPut,             // ask the proxy to copy one local range to each port destination (+ signal, + flush)
  kSignal,              // one channel per operand
  kWait,                // one channel per operand
  kFlush,               // one port channel per operand
  kBarrier,             // `barrier` counter, `participants` thread blocks
  kSemAcquire,          // one semaphore per operand
  kSemRelease,          // one semaphore per operand
  kNop,                 // synchronise the block's threads
  kEntryCopy,           // a copy between parts of two entries of a counted call (entry_copy.hpp): one source, one
                        // destination, its length the source entry's, which the destination entry must equal
  kEntryPutPackets,     // a send entry as LL packets, led by a count packet, into a peer's region (entry_packets.hpp)
  kEntryUnpackPackets,  // a peer's packets from this rank's region into a receive entry of the count they carry
};

// A data op with a specialised handler (specialize.cc chose it; fast_transfer.hpp runs it).
LOOM_HOST_DEVICE constexpr bool specializedData(OpCode code) {
  return code == OpCode::kCopy || code == OpCode::kFastTransfer || code == OpCode::kOneShot;
}

inline constexpr uint8_t kOpSyncBefore = 1;   // synchronise the block's threads before the op
inline constexpr uint8_t kOpSyncAfter = 2;    // and after it
inline constexpr uint8_t kOpRelaxed = 4;      // signal/wait: no memory ordering, only the count
inline constexpr uint8_t kOpReduces = 8;      // kTransfer: combine the sources with the call's operator
inline constexpr uint8_t kOpPortSignal = 16;  // kPortPut: signal after the data
inline constexpr uint8_t kOpPortFlush = 32;   // kPortPut: and wait until the proxy is done
inline constexpr uint8_t kOpReadsOnly = 64;   // kFlush: wait only until the proxy no longer reads this rank's memory
inline constexpr uint8_t kOpPublish = 128;  // kSignal: first write the operand's receive entry into the peer's mailbox

// Sources and destinations of one transfer are gathered in registers; the resolver keeps ops
// within this bound (a reduction over every peer of a 64-rank node, plus its local operands).
inline constexpr uint32_t kMaxTransferOperands = 72;
// A kFastTransfer has at most this many sources and this many destinations (its loops over them
// unroll to this count, so its operands stay in registers).
inline constexpr uint32_t kMaxFastOperands = 8;

inline constexpr uint16_t kLocalOperand = 0xFFFF;  // Operand::channel of this rank's own buffers
// Operand::buffer of a port channel's staging area: packets bound for a peer over a port channel are
// written here (at the offset they will have in the peer's scratch), then the proxy copies them.
inline constexpr uint8_t kStagingBuffer = 3;

// One message of a counted call (an alltoallv plan): where it starts in the rank's input (a send) or
// output (a receive), and its length. A call's table holds a rank's send entry to every peer, then its
// receive entry from every peer: entry p sends to rank p, entry n + q receives from rank q.
struct CallEntry {
  uint64_t offset;
  uint64_t bytes;
};

// Where an operand's byte range comes from: fixed when the program is resolved, or a part of an entry
// read at run time (counted calls): an entry of the call's table, or the entry a peer published into this
// rank's mailbox of a channel (the peer's receive entry, which a put into the peer's output fills).
enum class OperandSizing : uint8_t { kFixed = 0, kTableEntry = 1, kMailbox = 2 };

// A place in a buffer. For kTransfer the byte range has the op's `bytes` of data; a packet operand
// holds them as LL16 packets (twice the bytes). Sync ops use `channel` (or the semaphore index) only.
// An operand sized by an entry (kEntryCopy) is chunks [firstChunk, firstChunk + chunkCount) of the
// entry's `entryChunks`, cut at run time as a slot's chunks are (docs/plan-format.md); a publishing
// signal's operand names its receive entry in `entry` and the peer's mailbox in `offset`.
struct Operand {
  uint64_t offset;     // bytes from the start of the buffer (for LL scratch: of half 0)
  uint64_t oddOffset;  // added on odd calls: the second half of double-buffered LL scratch
  uint16_t channel;    // the rank's channel index, or kLocalOperand
  uint8_t buffer;      // loom::BufferType
  uint8_t packet;      // 1: LL16 packets live here
  OperandSizing sizing;
  uint8_t reserved;
  uint16_t entry;  // kTableEntry: the table's entry; kMailbox: the channel whose mailbox (this rank's) holds it
  uint16_t firstChunk;
  uint16_t chunkCount;
  uint16_t entryChunks;
};

// A counted call's table as the kernel gets it: in its parameters (host counts: a CUDA graph captures
// them by value), or in memory the caller keeps (counts in device memory: each replay reads what is
// there then). Each mailbox is kMailboxBytes of the scratch, one per channel of the rank, at 0.
inline constexpr uint32_t kMaxHeldEntries = 32;  // 16 peers' send and receive entries
inline constexpr uint64_t kMailboxBytes = sizeof(CallEntry);
struct CallTable {
  const CallEntry* entries;  // null: `held`
  CallEntry held[kMaxHeldEntries];
  uint64_t inputBytes;  // this rank's buffers: every entry must lie inside them (checked as it is read)
  uint64_t outputBytes;
  uint32_t peers;      // the world size: receive entries start at `peers`
  uint32_t alignment;  // chunks of an entry are cut on multiples of this
};

struct Op {
  OpCode code;
  uint8_t flags;
  uint8_t srcs;                // operands [first, first + srcs) are sources,
  uint8_t dsts;                // the next `dsts` destinations (sync ops: all operands count as srcs)
  uint32_t first;              // index of the first operand in Program::operands
  uint32_t planOp;             // the op's index in its plan thread block (a pipeline's index for its body)
  uint32_t barrier;            // kBarrier: the rank's barrier counter
  uint32_t participants;       // kBarrier: how many thread blocks meet
  uint32_t packetSources;      // kFastTransfer, kOneShot: the last this many sources are LL packets
  uint32_t inputDestinations;  // kOneShot: the last this many destinations get source 0 as it is
  uint64_t bytes;              // kTransfer / kPortPut: data bytes moved
};

// A plan bound to user buffers over memory channels keeps one context per set of allocations: a call
// whose buffers lie elsewhere in the same allocations moves each peer's input and output by the
// difference (Program::peerShifts), so nothing is registered, exchanged or uploaded again.
inline constexpr uint32_t kMaxShiftedPeers = 16;

// What the interpreter knows of a channel during one call.
struct ChannelView {
  MemorySemaphoreHandle memory;  // memory channels
  PortChannelHandle port;        // port channels (port.dstMemory is unused: see portMemory)
  void* peerBuffers[3];          // memory channels: the peer's input, output, scratch mapped here
  uint32_t portMemory[3];        // port channels: the proxy's ids of the peer's input, output, scratch
  void* staging;                 // port channels: where packets for the peer are assembled
  uint32_t stagingMemory;        // port channels: the proxy's id of `staging`
  uint32_t isPort;
  int32_t peer;
  uint32_t shiftSlot;  // memory channels: the peer's row of Program::peerShifts
};

// Everything one rank's interpreter needs for one call; passed to the kernel by value.
struct Program {
  const Op* ops;
  const Operand* operands;
  const uint32_t* blockOps;  // block b runs ops [blockOps[b], blockOps[b + 1])
  ChannelView* channels;
  void* buffers[3];         // this rank's input, output, scratch
  uint32_t portBuffers[3];  // the proxy's ids of this rank's input, output, scratch
  uint64_t* callCounts;     // one per block: calls this block has finished (flags, LL halves)
  uint64_t* semaphores;     // the plan's cross-block semaphores
  uint64_t* barriers;       // arrivals per barrier
  WaitContext wait;         // rank, diagnostics record, timeout
  uint32_t blocks;
  int64_t peerShifts[kMaxShiftedPeers][2];  // bytes added to a peer's mapped input, output this call
};

}  // namespace loom::device
