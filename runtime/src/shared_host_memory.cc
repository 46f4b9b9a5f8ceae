#include "loom/shared_host_memory.hpp"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <mutex>
#include <string>

#include "errno_text.hpp"
#include "loom/error.hpp"
#include "shared_host_segment.hpp"

namespace loom {
namespace {

// Live segments by base address, so a pointer anywhere inside one finds it. Never destroyed:
// segments released during static destruction still find it.
struct SegmentTable {
  std::mutex mutex;
  std::map<uintptr_t, std::weak_ptr<SharedHostSegment>> byBase;
  uint64_t nextId = 1;
};

SegmentTable& table() {
  static auto* segments = new SegmentTable();
  return *segments;
}

Error systemError(const std::string& what) { return Error(ErrorCategory::kSystem, what + ": " + errnoText(errno)); }

uint64_t pageRounded(uint64_t bytes) {
  const uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
  return (std::max<uint64_t>(bytes, 1) + page - 1) / page * page;
}

}  // namespace

SharedHostSegment::~SharedHostSegment() {
  if (base != nullptr) ::munmap(base, bytes);
  if (fd >= 0) ::close(fd);
}

SharedHostBuffer::SharedHostBuffer(uint64_t bytes) {
  auto segment = std::make_unique<SharedHostSegment>();  // closes and unmaps if a step below fails
  segment->bytes = pageRounded(bytes);
  const std::string what = "shared host memory of " + std::to_string(bytes) + " bytes";
  segment->fd = ::memfd_create("loom-host", MFD_CLOEXEC);
  if (segment->fd < 0) throw systemError(what + ": memfd_create");
  if (::ftruncate(segment->fd, off_t(segment->bytes)) != 0) throw systemError(what + ": ftruncate");
  void* base = ::mmap(nullptr, segment->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, segment->fd, 0);
  if (base == MAP_FAILED) throw systemError(what + ": mmap");
  segment->base = static_cast<uint8_t*>(base);  // a fresh memory file reads as zeros
  SegmentTable& segments = table();
  std::lock_guard lock(segments.mutex);
  segment->id = segments.nextId++;
  // The table forgets the segment when its last owner goes.
  segment_ = std::shared_ptr<SharedHostSegment>(segment.release(), [](SharedHostSegment* s) {
    std::unique_ptr<SharedHostSegment> owned(s);
    SegmentTable& all = table();
    std::lock_guard guard(all.mutex);
    all.byBase.erase(reinterpret_cast<uintptr_t>(s->base));
  });
  segments.byBase[reinterpret_cast<uintptr_t>(base)] = segment_;
}

void* SharedHostBuffer::data() const { return segment_ ? segment_->base : nullptr; }
uint64_t SharedHostBuffer::bytes() const { return segment_ ? segment_->bytes : 0; }
uint64_t SharedHostBuffer::id() const { return segment_ ? segment_->id : 0; }

uint64_t sharedHostBufferId(const void* pointer) {
  auto segment = findSharedHostSegment(pointer, 0);
  return segment ? segment->id : 0;
}

size_t sharedHostSegmentCount() {
  SegmentTable& segments = table();
  std::lock_guard lock(segments.mutex);
  return segments.byBase.size();
}

std::shared_ptr<const SharedHostSegment> findSharedHostSegment(const void* data, uint64_t bytes) {
  const auto address = reinterpret_cast<uintptr_t>(data);
  SegmentTable& segments = table();
  std::lock_guard lock(segments.mutex);
  auto it = segments.byBase.upper_bound(address);
  if (it == segments.byBase.begin()) return nullptr;
  --it;
  std::shared_ptr<SharedHostSegment> segment = it->second.lock();
  if (!segment || address - it->first >= segment->bytes || bytes > segment->bytes - (address - it->first)) {
    return nullptr;
  }
  return segment;
}

std::shared_ptr<void> mapSharedHostSegment(int fd, uint64_t bytes, void** base, const std::string& what) {
  struct stat info {};
  if (::fstat(fd, &info) != 0) throw systemError(what + ": fstat of its descriptor");
  if (uint64_t(info.st_size) < bytes) {
    throw Error(ErrorCategory::kTransport, what + ": its memory file holds " + std::to_string(info.st_size) +
                                               " bytes, the registration says " + std::to_string(bytes));
  }
  void* mapped = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (mapped == MAP_FAILED) throw systemError(what + ": mmap");
  *base = mapped;
  return std::shared_ptr<void>(mapped, [bytes](void* p) { ::munmap(p, bytes); });
}

}  // namespace loom
