#include "buffer_layout.hpp"

#include <algorithm>
#include <string>

#include "loom/error.hpp"

namespace loom {
namespace {

uint64_t roundUp(uint64_t value, uint64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

// How many per-rank slots a buffer of the collective holds (the all-gather output, the
// reduce-scatter input and both all-to-all buffers hold one piece per rank).
uint32_t slotsOf(Collective collective, BufferType buffer, uint32_t worldSize) {
  switch (collective) {
    case Collective::kAllGather:
      return buffer == BufferType::kOutput ? worldSize : 1;
    case Collective::kReduceScatter:
      return buffer == BufferType::kInput ? worldSize : 1;
    case Collective::kAllToAll:
    case Collective::kAllToAllV:  // slots are the call's entries; the nominal layout cuts them evenly
      return worldSize;
    default:
      return 1;
  }
}

}  // namespace

BufferLayout::BufferLayout(const Plan& plan, uint64_t messageBytes) {
  const GpuProgram& any = plan.gpus.front();
  const uint32_t n = plan.worldSize;
  alignment_ = std::max<uint64_t>(plan.alignmentBytes, kMinChunkAlignment);
  packets_ = plan.protocol == Protocol::kLL;
  // Slot size: the input is one rank's message, cut into as many slots as it holds.
  const uint32_t inputSlots = slotsOf(plan.collective, BufferType::kInput, n);
  if (messageBytes % inputSlots != 0) {
    throw Error(ErrorCategory::kInvalidArgument,
                "message bytes: plan '" + plan.name + "' (" + std::string(collectiveName(plan.collective)) +
                    ") cuts the input into " + std::to_string(inputSlots) + " equal pieces, but " +
                    std::to_string(messageBytes) + " bytes do not divide by " + std::to_string(inputSlots));
  }
  const uint64_t slotBytes = messageBytes / inputSlots;
  const uint32_t chunksPerSlot = any.inputChunks / inputSlots;
  // An empty message still gets whole (unused) chunks, so that positions never divide by zero.
  chunkBytes_ = std::max(roundUp((slotBytes + chunksPerSlot - 1) / chunksPerSlot, alignment_), alignment_);
  for (BufferType buffer : {BufferType::kInput, BufferType::kOutput}) {
    shapes_[static_cast<int>(buffer)] = {slotsOf(plan.collective, buffer, n), chunksPerSlot, slotBytes};
  }
}

uint64_t BufferLayout::scratchHalfBytes(uint32_t scratchChunks) const {
  return uint64_t(scratchChunks) * chunkBytes_ * (packets_ ? 2 : 1);
}

uint64_t BufferLayout::scratchBytes(uint32_t scratchChunks) const {
  return scratchHalfBytes(scratchChunks) * (packets_ ? 2 : 1);
}

uint64_t BufferLayout::position(BufferType buffer, uint32_t first, uint64_t x) const {
  const uint64_t chunk = first + x / chunkBytes_;
  const uint64_t within = x % chunkBytes_;
  if (buffer == BufferType::kScratch) return chunk * chunkBytes_ + within;
  const BufferShape& s = shape(buffer);
  const uint64_t slot = chunk / s.chunksPerSlot;
  const uint64_t start = std::min(chunk % s.chunksPerSlot * chunkBytes_, s.slotBytes);
  const uint64_t length = std::min(chunkBytes_, s.slotBytes - start);
  return slot * s.slotBytes + start + std::min(within, length);
}

bool BufferLayout::chunksWhole() const {
  for (const BufferShape& s : shapes_) {
    if (s.slotBytes != uint64_t(s.chunksPerSlot) * chunkBytes_) return false;
  }
  return true;
}

uint64_t BufferLayout::wholeChunksUnit() const {
  const BufferShape& input = shape(BufferType::kInput);
  return uint64_t(input.slots) * input.chunksPerSlot * alignment_;
}

}  // namespace loom
