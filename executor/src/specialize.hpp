#pragma once

// The fast path, decided at resolution: the transfers of a resolved program whose shape has a
// specialised handler are marked for it (loom/device/fast_transfer.hpp); everything else stays a
// generic kTransfer. The handlers compute what the generic one does, bit for bit, so this changes
// speed only. A program whose every op specialises, and which fits, runs from inline records in the
// kernel's parameters (inline_records.hpp); the others run generically. On by default; LOOM_FAST_PATH=0
// (a strict boolean) runs every program generically, so tests compare the two paths on the same plan.

#include "resolve.hpp"

namespace loom {

// Marks the specialisable transfers of `program` (op codes kCopy and kFastTransfer) and, when every
// one of them specialises, fuses each LL one-shot pair (a packet put of a chunk, then the reduction of
// the peers' packets of that chunk with it) into one kOneShot, which loads the chunk once.
void specialize(ResolvedProgram& program);

// How many of a program's data ops run specialised and how many generically (kTransfer).
struct TransferCounts {
  uint64_t specialized = 0;
  uint64_t generic = 0;
};
TransferCounts countTransfers(const ResolvedProgram& program);

// The threads per block to launch a specialised program with: the plan's, or fewer when no data op
// has work for them all (a thread per 16-byte unit, in whole warps): a few hundred bytes need a warp
// or two, not 1024 threads that each sync the block and find nothing to do. The handlers spread
// their work over whatever threads there are, so the result is the same.
uint32_t launchThreads(const ResolvedProgram& program, uint32_t planThreads);

// Whether the fast path runs: unless LOOM_FAST_PATH is false; a value that is not a boolean is an error
// naming the variable.
bool fastPathEnabled();

}  // namespace loom
