#include "user_buffer_staging.hpp"

#include <algorithm>
#include <cstring>

namespace loom {
namespace {

uint64_t alignUp(uint64_t value) { return (value + 63) / 64 * 64; }

}  // namespace

uint8_t* UserBufferStaging::reserve(uint64_t bytes) {
  if (bytes > areaBytes_) {
    uint64_t capacity = std::max<uint64_t>(areaBytes_, 1 << 16);
    while (capacity < bytes) capacity *= 2;
    area_.reset();
    area_ = backend_.allocatePeerVisible(capacity);
    areaBytes_ = capacity;
  }
  return static_cast<uint8_t*>(area_.get());
}

std::pair<const void*, void*> UserBufferStaging::stageIn(const void* input, uint64_t inputBytes, void* output,
                                                         uint64_t outputBytes) {
  const auto* in = static_cast<const uint8_t*>(input);
  auto* out = static_cast<uint8_t*>(output);
  if (in < out + outputBytes && out < in + inputBytes) {
    // In place: one span holds both, at the same distance apart as in the user's memory.
    const uint8_t* low = std::min<const uint8_t*>(in, out);
    const uint64_t span = uint64_t(std::max<const uint8_t*>(in + inputBytes, out + outputBytes) - low);
    uint8_t* area = reserve(span);
    std::memcpy(area, low, span);
    userOutput_ = const_cast<uint8_t*>(low);
    stagedOutput_ = area;
    outputSpanBytes_ = span;
    return {area + (in - low), area + (out - low)};
  }
  const uint64_t outputAt = alignUp(inputBytes);
  uint8_t* area = reserve(outputAt + outputBytes);
  std::memcpy(area, in, inputBytes);
  // The output too: where a plan leaves part of it alone, the user's bytes stay as they were.
  std::memcpy(area + outputAt, out, outputBytes);
  userOutput_ = out;
  stagedOutput_ = area + outputAt;
  outputSpanBytes_ = outputBytes;
  return {area, area + outputAt};
}

void UserBufferStaging::stageOut() {
  if (userOutput_ != nullptr) std::memcpy(userOutput_, stagedOutput_, outputSpanBytes_);
  userOutput_ = nullptr;
}

}  // namespace loom
