#pragma once

// The process-wide view of shared host memory (loom/shared_host_memory.hpp): which segment holds a
// pointer, so that a registration of any range inside one can carry its descriptor, and how a peer's
// segment is mapped here.

#include <cstdint>
#include <memory>
#include <string>

#include "loom/shared_host_memory.hpp"

namespace loom {

struct SharedHostSegment {
  int fd = -1;
  uint8_t* base = nullptr;
  uint64_t bytes = 0;  // the mapping's length (a whole number of pages)
  uint64_t id = 0;
  SharedHostSegment() = default;
  SharedHostSegment(const SharedHostSegment&) = delete;
  SharedHostSegment& operator=(const SharedHostSegment&) = delete;
  ~SharedHostSegment();
};

// The live segment that holds [data, data + bytes), or null.
std::shared_ptr<const SharedHostSegment> findSharedHostSegment(const void* data, uint64_t bytes);

// Maps a peer's segment (its descriptor, received over the Unix socket; not taken over) and returns
// the mapping's owner; `*base` is where it starts. Checks that the file is as long as `bytes`, so
// a short file is an error here rather than a SIGBUS later.
std::shared_ptr<void> mapSharedHostSegment(int fd, uint64_t bytes, void** base, const std::string& what);

}  // namespace loom
