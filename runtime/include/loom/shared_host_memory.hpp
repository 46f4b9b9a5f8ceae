#pragma once

// Host memory that the processes of one host can share: an anonymous memory file (memfd_create)
// mapped shared. The owner registers it like any host memory (Communicator::registerMemory finds
// the segment behind the pointer); Communicator::sendMemory passes the file's descriptor to a rank
// of the same host that runs in another process, over the Unix socket that also carries cuMem
// descriptors, and that rank maps it. Ranks that are threads of one process need none of this.
//
// The CPU backend keeps what peers touch here (semaphore counters, scratch, staged user buffers)
// when some rank of its host runs in another process. Owned: unmapped and closed when the last
// handle goes (registrations that refer to it keep it too).

#include <cstdint>
#include <memory>

namespace loom {

struct SharedHostSegment;

class SharedHostBuffer {
 public:
  SharedHostBuffer() = default;
  // Zeroed, page aligned. A System error when the kernel refuses (memfd_create, ftruncate, mmap).
  explicit SharedHostBuffer(uint64_t bytes);

  void* data() const;
  uint64_t bytes() const;
  // Never reused within the process: tells a new buffer from a freed one at the same address.
  uint64_t id() const;
  bool valid() const { return segment_ != nullptr; }

 private:
  std::shared_ptr<SharedHostSegment> segment_;
};

// The id of the live shared host buffer that holds `pointer`, 0 when none does.
uint64_t sharedHostBufferId(const void* pointer);
// Shared host segments alive in this process (leak tests).
size_t sharedHostSegmentCount();

}  // namespace loom
