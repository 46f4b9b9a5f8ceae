#pragma once

// Where a plan's chunks fall in bytes for one message size (docs/plan-format.md, "Buffers, chunks
// and bytes"). A buffer is `slots` equal slots of `slotBytes`, each cut into `chunksPerSlot` chunks
// of `chunkBytes` (the last ones of a slot shorter, or empty). Scratch chunks are always whole.
//
// The executor rounds chunk sizes to a multiple of max(alignment_bytes, 16): still a multiple of
// the plan's alignment (both are powers of two), and every chunk then starts on a 16-byte boundary,
// which vector loads, whole elements and whole LL packets need.

#include <cstdint>

#include "loom/plan.hpp"

namespace loom {

inline constexpr uint64_t kMinChunkAlignment = 16;

struct BufferShape {
  uint32_t slots = 1;
  uint32_t chunksPerSlot = 1;
  uint64_t slotBytes = 0;

  uint64_t bytes() const { return uint64_t(slots) * slotBytes; }
};

class BufferLayout {
 public:
  BufferLayout(const Plan& plan, uint64_t messageBytes);

  uint64_t chunkBytes() const { return chunkBytes_; }
  uint64_t alignment() const { return alignment_; }
  const BufferShape& shape(BufferType buffer) const { return shapes_[static_cast<int>(buffer)]; }
  // Bytes of one rank's input and output for this message size.
  uint64_t inputBytes() const { return shape(BufferType::kInput).bytes(); }
  uint64_t outputBytes() const { return shape(BufferType::kOutput).bytes(); }
  // Scratch of a rank that declares `scratchChunks`: whole chunks; LL plans store packets (twice
  // the data) in two halves, one per call parity, so consecutive calls never share packets.
  uint64_t scratchHalfBytes(uint32_t scratchChunks) const;
  uint64_t scratchBytes(uint32_t scratchChunks) const;

  // The byte offset in `buffer` of nominal position `x` of the range that starts at chunk `first`:
  // nominal positions count every chunk as whole (x in [0, count * chunkBytes]); a position past the
  // end of a short chunk maps to that chunk's end. Slices of nominal space thus map to contiguous
  // byte ranges that line up across buffers cut alike.
  uint64_t position(BufferType buffer, uint32_t first, uint64_t x) const;

  // Whether every data chunk is whole (no slot ends in a short chunk), and the message sizes for
  // which that holds: the multiples of wholeChunksUnit().
  bool chunksWhole() const;
  uint64_t wholeChunksUnit() const;

 private:
  uint64_t chunkBytes_ = 0;
  uint64_t alignment_ = kMinChunkAlignment;
  bool packets_ = false;
  BufferShape shapes_[2];
};

}  // namespace loom
