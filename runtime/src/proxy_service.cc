#include "loom/proxy_service.hpp"

#include <atomic>
#include <chrono>
#include <deque>
#include <mutex>
#include <thread>

#include "gpu.hpp"
#include "log.hpp"
#include "loom/device/chaos.hpp"
#include "loom/error.hpp"
#include "loom/proxy_activity.hpp"
#include "numa.hpp"

namespace loom {
namespace {

bool present(const RegisteredMemory& memory) { return memory.valid(); }
bool present(const std::shared_ptr<HostSemaphore>& semaphore) { return semaphore != nullptr; }

// The memories or semaphores of port channels by id (below 2^20). A removed entry is left empty and
// its id handed out again.
template <typename T>
struct IdTable {
  std::deque<T> entries;  // a deque: the proxy uses an entry outside the lock while others are added
  std::vector<uint32_t> free;

  const T* find(uint32_t id) const { return id < entries.size() && present(entries[id]) ? &entries[id] : nullptr; }
  uint32_t add(T value, const char* what) {
    if (!free.empty()) {
      const uint32_t id = free.back();
      free.pop_back();
      entries[id] = std::move(value);
      return id;
    }
    if (entries.size() > device::ProxyTrigger::kMaxId) {
      throw Error(ErrorCategory::kInvalidArgument, std::string("ProxyService: more than 2^20 ") + what);
    }
    entries.push_back(std::move(value));
    return uint32_t(entries.size() - 1);
  }
  void remove(uint32_t id) {
    if (!find(id)) return;
    entries[id] = T();
    free.push_back(id);
  }
  uint64_t held() const { return entries.size() - free.size(); }
};

}  // namespace

struct ProxyService::Impl {
  Communicator& communicator;
  Fifo fifo;
  int device;
  int64_t flushTimeoutMs;
  mutable std::mutex mutex;  // guards the tables below; the proxy takes it per trigger
  IdTable<RegisteredMemory> memories;
  IdTable<std::shared_ptr<HostSemaphore>> semaphores;
  std::optional<Error> error;
  std::atomic<bool> polling{false};     // from start() until the thread ends
  std::atomic<uint64_t> emptyPolls{0};  // how often it found the FIFO empty
  std::atomic<bool> stopping{false};
  std::atomic<bool> abandoning{false};  // stop without carrying out what is still queued
  std::atomic<uint64_t> done{0};
  // What the thread is doing, for the reports of port-channel waits that run out (shared with the
  // diagnostics of every communicator whose channels use this proxy, which may outlive it).
  std::shared_ptr<ProxyActivity> activity = std::make_shared<ProxyActivity>();
  std::thread thread;

  Impl(Communicator& communicator, uint64_t fifoSize)
      : communicator(communicator),
        fifo(fifoSize, communicator.cudaDevice() >= 0),
        device(communicator.cudaDevice()),
        flushTimeoutMs(communicator.deviceDiagnostics().timeoutMs() > 0 ? communicator.deviceDiagnostics().timeoutMs()
                                                                        : kDefaultDeviceTimeoutMs) {}

  void run();
  void carryOut(const device::ProxyTrigger& trigger);
  bool drained() const;
};

// True once every trigger queued before the call is carried out: the thread found the FIFO empty in
// a poll that began after the call did. A poll that ends after the call began may have begun before
// it, so that takes two. False if that does not happen within the flush timeout.
bool ProxyService::Impl::drained() const {
  const uint64_t start = emptyPolls.load(std::memory_order_acquire);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(flushTimeoutMs);
  while (polling.load(std::memory_order_acquire) && emptyPolls.load(std::memory_order_acquire) < start + 2) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  return true;
}

void ProxyService::Impl::run() {
  struct Stopped {  // start() set `polling`
    std::atomic<bool>& polling;
    ProxyActivity& activity;
    ~Stopped() {
      activity.stopped();
      polling.store(false, std::memory_order_release);
    }
  } stopped{polling, *activity};
  activity->enter(ProxyActivity::Step::kLooking, fifo.tail());
  // The device first: a CUDA call on a fresh thread would otherwise make a context on GPU 0.
  if (device >= 0) {
    try {
      gpu::setDevice(device);
    } catch (const Error& failure) {
      std::lock_guard lock(mutex);
      error = failure;
      logWarning("proxy of rank " + std::to_string(communicator.rank()) + " cannot start: " + failure.what());
      return;
    }
    pinThreadNearDevice(device);
  }
  uint32_t idle = 0;
  // A stop carries out what the rank's programs queued before it (a put_with_signal late in a
  // program whose kernel has ended: its peer still waits for the signal), unless it abandons them
  // (an abort) or one of them fails.
  while (!abandoning.load(std::memory_order_relaxed)) {
    std::optional<device::ProxyTrigger> trigger = fifo.poll();
    if (!trigger) {
      // The only writer: a plain store keeps the spin free of atomic read-modify-writes.
      emptyPolls.store(emptyPolls.load(std::memory_order_relaxed) + 1, std::memory_order_release);
      if (stopping.load(std::memory_order_acquire)) break;
      // Spin while work is likely to follow (latency), then give the core away now and then.
      if (++idle > 4096) std::this_thread::yield();
      continue;
    }
    idle = 0;
    try {
      carryOut(*trigger);
    } catch (const Error& failure) {
      std::lock_guard lock(mutex);
      if (!error) {
        logWarning("proxy of rank " + std::to_string(communicator.rank()) + ": " + failure.what());
        error = failure;
      }
      if (stopping.load(std::memory_order_acquire)) break;
    }
    fifo.pop();
    done.fetch_add(1, std::memory_order_relaxed);
    activity->enter(ProxyActivity::Step::kLooking, fifo.tail());
  }
}

void ProxyService::Impl::carryOut(const device::ProxyTrigger& trigger) {
  std::shared_ptr<HostSemaphore> semaphore;
  const RegisteredMemory* dst = nullptr;
  const RegisteredMemory* src = nullptr;
  {
    std::lock_guard lock(mutex);
    auto lookup = [&](uint32_t id, const char* what) -> const RegisteredMemory* {
      const RegisteredMemory* memory = memories.find(id);
      if (!memory) {
        throw Error(ErrorCategory::kInvalidArgument,
                    std::string("trigger names ") + what + " memory " + std::to_string(id) + ", which does not exist");
      }
      return memory;
    };
    const std::shared_ptr<HostSemaphore>* found = semaphores.find(trigger.semaphore());
    if (!found) {
      throw Error(ErrorCategory::kInvalidArgument,
                  "trigger names semaphore " + std::to_string(trigger.semaphore()) + ", which does not exist");
    }
    semaphore = *found;
    if (trigger.flags() & device::kTriggerData) {
      dst = lookup(trigger.dstMemory(), "destination");
      src = lookup(trigger.srcMemory(), "source");
    }
  }
  Connection& connection = semaphore->connection();
  const uint64_t position = fifo.tail();
  const int peer = connection.remoteRank();
  // LOOM_CPU_CHAOS: the proxy of a CPU-backend rank comes late to what it reads and signals.
  const bool chaotic = device < 0 && chaos::enabled();
  if (trigger.flags() & device::kTriggerData) {
    if (chaotic) chaos::pauseAt(chaos::Site::kProxyRead);
    activity->enter(ProxyActivity::Step::kWrite, position, peer);
    connection.write(*dst, trigger.dstOffset, *src, trigger.srcOffset, trigger.bytes);
  }
  if (trigger.flags() & device::kTriggerSignal) {
    if (chaotic) chaos::pauseAt(chaos::Site::kProxySignal);
    activity->enter(ProxyActivity::Step::kSignal, position, peer);
    semaphore->signal();
  }
  if (trigger.flags() & device::kTriggerFlush) {
    activity->enter(ProxyActivity::Step::kFlush, position, peer);
    connection.flush(flushTimeoutMs);
  }
  if (trigger.flags() == 0) {
    activity->enter(ProxyActivity::Step::kFinishReads, position, peer);
    connection.finishReads(flushTimeoutMs);
  }
}

ProxyService::ProxyService(Communicator& communicator, uint64_t fifoSize)
    : impl_(std::make_unique<Impl>(communicator, fifoSize)) {}

ProxyService::~ProxyService() { stop(); }

uint32_t ProxyService::addMemory(RegisteredMemory memory) {
  if (!memory.valid()) throw Error(ErrorCategory::kInvalidArgument, "ProxyService::addMemory: no memory");
  std::lock_guard lock(impl_->mutex);
  return impl_->memories.add(std::move(memory), "memories");
}

uint32_t ProxyService::addSemaphore(std::shared_ptr<HostSemaphore> semaphore) {
  if (!semaphore) throw Error(ErrorCategory::kInvalidArgument, "ProxyService::addSemaphore: no semaphore");
  std::lock_guard lock(impl_->mutex);
  return impl_->semaphores.add(std::move(semaphore), "semaphores");
}

uint64_t ProxyService::memoriesHeld() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->memories.held();
}

void ProxyService::remove(const std::vector<uint32_t>& memories, const std::vector<uint32_t>& semaphores) {
  if (memories.empty() && semaphores.empty()) return;
  if (!impl_->drained()) {
    logWarning("proxy of rank " + std::to_string(impl_->communicator.rank()) + ": triggers still queued after " +
               std::to_string(impl_->flushTimeoutMs) + " ms; keeping " + std::to_string(memories.size()) +
               " memories and " + std::to_string(semaphores.size()) + " semaphores they may name");
    return;
  }
  std::lock_guard lock(impl_->mutex);
  for (uint32_t id : memories) impl_->memories.remove(id);
  for (uint32_t id : semaphores) impl_->semaphores.remove(id);
}

device::PortChannelHandle ProxyService::portChannel(uint32_t semaphore, uint32_t dstMemory, uint32_t srcMemory,
                                                    int channel, const Communicator* user) const {
  std::lock_guard lock(impl_->mutex);
  auto check = [](uint32_t id, bool added, const char* what) {
    if (!added) {
      throw Error(ErrorCategory::kInvalidArgument, std::string("ProxyService::portChannel: ") + what + " " +
                                                       std::to_string(id) + " was not added (or was removed)");
    }
  };
  const std::shared_ptr<HostSemaphore>* found = impl_->semaphores.find(semaphore);
  check(semaphore, found != nullptr, "semaphore");
  check(dstMemory, impl_->memories.find(dstMemory) != nullptr, "dst memory");
  check(srcMemory, impl_->memories.find(srcMemory) != nullptr, "src memory");
  const HostSemaphore& host = **found;
  const int peer = host.connection().remoteRank();
  device::PortChannelHandle handle;
  const Communicator& labels = user != nullptr ? *user : impl_->communicator;
  labels.deviceDiagnostics().watchProxy(impl_->activity);
  handle.fifo = impl_->fifo.deviceHandle(labels.deviceDiagnostics().waitContext(channel, peer));
  handle.semaphore = host.deviceHandle();
  handle.semaphore.waitContext.channel = channel;
  handle.semaphoreId = semaphore;
  handle.dstMemory = dstMemory;
  handle.srcMemory = srcMemory;
  return handle;
}

void ProxyService::start() {
  if (impl_->thread.joinable()) return;
  impl_->stopping = false;
  impl_->abandoning = false;
  impl_->polling = true;
  impl_->thread = std::thread([impl = impl_.get()] { impl->run(); });
}

void ProxyService::stop(bool finishQueued) {
  if (!impl_->thread.joinable()) return;
  impl_->abandoning = !finishQueued;
  impl_->stopping.store(true, std::memory_order_release);
  impl_->thread.join();
}

bool ProxyService::drain() const { return impl_->drained(); }

bool ProxyService::running() const { return impl_->thread.joinable(); }

void ProxyService::check() const {
  std::lock_guard lock(impl_->mutex);
  if (impl_->error) throw *impl_->error;
}

uint64_t ProxyService::triggersDone() const { return impl_->done.load(); }

}  // namespace loom
