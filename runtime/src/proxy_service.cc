#include "loom/proxy_service.hpp"

#include <atomic>
#include <deque>
#include <mutex>
#include <thread>

#include "gpu.hpp"
#include "log.hpp"
#include "loom/error.hpp"
#include "numa.hpp"

namespace loom {

struct ProxyService::Impl {
  Communicator& communicator;
  Fifo fifo;
  int device;
  int64_t flushTimeoutMs;
  mutable std::mutex mutex;  // guards the tables below; the proxy takes it per trigger
  std::deque<RegisteredMemory> memories;
  std::deque<std::shared_ptr<HostSemaphore>> semaphores;
  std::optional<Error> error;
  std::atomic<bool> stopping{false};
  std::atomic<bool> abandoning{false};  // stop without carrying out what is still queued
  std::atomic<uint64_t> done{0};
  std::thread thread;

  Impl(Communicator& communicator, uint64_t fifoSize)
      : communicator(communicator),
        fifo(fifoSize, communicator.cudaDevice() >= 0),
        device(communicator.cudaDevice()),
        flushTimeoutMs(communicator.deviceDiagnostics().timeoutMs() > 0 ? communicator.deviceDiagnostics().timeoutMs()
                                                                        : kDefaultDeviceTimeoutMs) {}

  void run();
  void carryOut(const device::ProxyTrigger& trigger);
};

void ProxyService::Impl::run() {
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
  }
}

void ProxyService::Impl::carryOut(const device::ProxyTrigger& trigger) {
  std::shared_ptr<HostSemaphore> semaphore;
  const RegisteredMemory* dst = nullptr;
  const RegisteredMemory* src = nullptr;
  {
    std::lock_guard lock(mutex);
    auto lookup = [&](uint32_t id, const char* what) -> const RegisteredMemory* {
      if (id >= memories.size()) {
        throw Error(ErrorCategory::kInvalidArgument,
                    std::string("trigger names ") + what + " memory " + std::to_string(id) + ", which does not exist");
      }
      return &memories[id];
    };
    if (trigger.semaphore() >= semaphores.size()) {
      throw Error(ErrorCategory::kInvalidArgument,
                  "trigger names semaphore " + std::to_string(trigger.semaphore()) + ", which does not exist");
    }
    semaphore = semaphores[trigger.semaphore()];
    if (trigger.flags() & device::kTriggerData) {
      dst = lookup(trigger.dstMemory(), "destination");
      src = lookup(trigger.srcMemory(), "source");
    }
  }
  Connection& connection = semaphore->connection();
  if (trigger.flags() & device::kTriggerData) {
    connection.write(*dst, trigger.dstOffset, *src, trigger.srcOffset, trigger.bytes);
  }
  if (trigger.flags() & device::kTriggerSignal) semaphore->signal();
  if (trigger.flags() & device::kTriggerFlush) connection.flush(flushTimeoutMs);
  if (trigger.flags() == 0) connection.finishReads(flushTimeoutMs);
}

ProxyService::ProxyService(Communicator& communicator, uint64_t fifoSize)
    : impl_(std::make_unique<Impl>(communicator, fifoSize)) {}

ProxyService::~ProxyService() { stop(); }

uint32_t ProxyService::addMemory(RegisteredMemory memory) {
  if (!memory.valid()) throw Error(ErrorCategory::kInvalidArgument, "ProxyService::addMemory: no memory");
  std::lock_guard lock(impl_->mutex);
  if (impl_->memories.size() > device::ProxyTrigger::kMaxId) {
    throw Error(ErrorCategory::kInvalidArgument, "ProxyService::addMemory: more than 2^20 memories");
  }
  impl_->memories.push_back(std::move(memory));
  return uint32_t(impl_->memories.size() - 1);
}

uint32_t ProxyService::addSemaphore(std::shared_ptr<HostSemaphore> semaphore) {
  if (!semaphore) throw Error(ErrorCategory::kInvalidArgument, "ProxyService::addSemaphore: no semaphore");
  std::lock_guard lock(impl_->mutex);
  if (impl_->semaphores.size() > device::ProxyTrigger::kMaxId) {
    throw Error(ErrorCategory::kInvalidArgument, "ProxyService::addSemaphore: more than 2^20 semaphores");
  }
  impl_->semaphores.push_back(std::move(semaphore));
  return uint32_t(impl_->semaphores.size() - 1);
}

device::PortChannelHandle ProxyService::portChannel(uint32_t semaphore, uint32_t dstMemory, uint32_t srcMemory,
                                                    int channel) const {
  std::lock_guard lock(impl_->mutex);
  auto check = [](uint32_t id, size_t count, const char* what) {
    if (id >= count) {
      throw Error(ErrorCategory::kInvalidArgument,
                  std::string("ProxyService::portChannel: ") + what + " " + std::to_string(id) + " was not added");
    }
  };
  check(semaphore, impl_->semaphores.size(), "semaphore");
  check(dstMemory, impl_->memories.size(), "dst memory");
  check(srcMemory, impl_->memories.size(), "src memory");
  const HostSemaphore& host = *impl_->semaphores[semaphore];
  const int peer = host.connection().remoteRank();
  device::PortChannelHandle handle;
  handle.fifo = impl_->fifo.deviceHandle(impl_->communicator.deviceDiagnostics().waitContext(channel, peer));
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
  impl_->thread = std::thread([impl = impl_.get()] { impl->run(); });
}

void ProxyService::stop(bool finishQueued) {
  if (!impl_->thread.joinable()) return;
  impl_->abandoning = !finishQueued;
  impl_->stopping.store(true, std::memory_order_release);
  impl_->thread.join();
}

bool ProxyService::running() const { return impl_->thread.joinable(); }

void ProxyService::check() const {
  std::lock_guard lock(impl_->mutex);
  if (impl_->error) throw *impl_->error;
}

uint64_t ProxyService::triggersDone() const { return impl_->done.load(); }

}  // namespace loom
