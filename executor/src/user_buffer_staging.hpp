#pragma once

// Staging of the user's buffers for the multi-process CPU backend. A NumPy array is private memory
// of its process: a peer in another process cannot map it. A plan that reaches peers' input or
// output therefore runs on copies in shared host memory, which peers map like scratch:
//
//   stageIn   copies the input and the output into the staging area and returns where they are;
//   (the call runs on those, peers reach them through their mappings)
//   stageOut  copies the output back (in place: the whole buffer, input included).
//
// Why this is sound: such plans are bound to buffers, so every call starts with an exchange among
// all ranks (the executor's agreement on reusing contexts) that no rank passes before every rank has
// staged its buffers, and no rank reaches the next call's exchange before it has copied its output
// back. So no peer reads a staged input before it is there, nor writes a staged output that is
// still to be copied back or that a copy-in would overwrite.
//
// The area keeps its address from call to call (grown geometrically), so contexts are reused; a
// grown area is a new allocation with a new id, and the contexts of the old one are built anew.

#include <cstdint>
#include <memory>
#include <utility>

#include "backend.hpp"

namespace loom {

class UserBufferStaging {
 public:
  explicit UserBufferStaging(Backend& backend) : backend_(backend) {}

  // The staged input and output of this call. Buffers that overlap (in-place plans) are staged as
  // one span, so they alias in the staging area as they do in the user's memory.
  std::pair<const void*, void*> stageIn(const void* input, uint64_t inputBytes, void* output, uint64_t outputBytes);
  // Copies the last stageIn's output span back into the user's memory.
  void stageOut();

 private:
  uint8_t* reserve(uint64_t bytes);

  Backend& backend_;
  std::shared_ptr<void> area_;
  uint64_t areaBytes_ = 0;
  uint8_t* userOutput_ = nullptr;  // what stageOut copies, and where from
  const uint8_t* stagedOutput_ = nullptr;
  uint64_t outputSpanBytes_ = 0;
};

}  // namespace loom
