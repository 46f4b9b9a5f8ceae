#pragma once

// System-scope atomics that mean the same on the GPU (libcu++'s cuda::atomic_ref) and on host
// threads (std::atomic_ref). System scope, because the other side of a semaphore or a FIFO is a
// peer GPU over NVLink or a host thread.

#include <cstdint>

#include "loom/device/macros.hpp"

#if defined(__CUDACC__)
#include <cuda/atomic>
#endif
#include <atomic>

namespace loom::device {

#if LOOM_DEVICE_PASS
template <typename T>
using AtomicRef = cuda::atomic_ref<T, cuda::thread_scope_system>;
constexpr auto kRelaxed = cuda::memory_order_relaxed;
constexpr auto kAcquire = cuda::memory_order_acquire;
constexpr auto kRelease = cuda::memory_order_release;
constexpr auto kAcqRel = cuda::memory_order_acq_rel;
#else
template <typename T>
using AtomicRef = std::atomic_ref<T>;
constexpr auto kRelaxed = std::memory_order_relaxed;
constexpr auto kAcquire = std::memory_order_acquire;
constexpr auto kRelease = std::memory_order_release;
constexpr auto kAcqRel = std::memory_order_acq_rel;
#endif

template <typename T>
LOOM_HOST_DEVICE T loadAcquire(T* address) {
  return AtomicRef<T>(*address).load(kAcquire);
}
template <typename T>
LOOM_HOST_DEVICE T loadRelaxed(T* address) {
  return AtomicRef<T>(*address).load(kRelaxed);
}
template <typename T>
LOOM_HOST_DEVICE void storeRelease(T* address, T value) {
  AtomicRef<T>(*address).store(value, kRelease);
}
template <typename T>
LOOM_HOST_DEVICE void storeRelaxed(T* address, T value) {
  AtomicRef<T>(*address).store(value, kRelaxed);
}
template <typename T>
LOOM_HOST_DEVICE T fetchAddRelease(T* address, T value) {
  return AtomicRef<T>(*address).fetch_add(value, kRelease);
}
template <typename T>
LOOM_HOST_DEVICE T fetchAddAcqRel(T* address, T value) {
  return AtomicRef<T>(*address).fetch_add(value, kAcqRel);
}
template <typename T>
LOOM_HOST_DEVICE bool compareExchangeAcqRel(T* address, T& expected, T desired) {
  return AtomicRef<T>(*address).compare_exchange_strong(expected, desired, kAcqRel, kRelaxed);
}
template <typename T>
LOOM_HOST_DEVICE T fetchAddRelaxed(T* address, T value) {
  return AtomicRef<T>(*address).fetch_add(value, kRelaxed);
}

// Adds without waiting for the old value: on the GPU a `red` instruction, which does not wait for a
// round trip over NVLink the way a fetch-add does. Release: earlier writes are visible first.
LOOM_HOST_DEVICE void addRelease(uint64_t* address, uint64_t value) {
#if LOOM_DEVICE_PASS
  asm volatile("red.release.sys.global.add.u64 [%0], %1;" ::"l"(address), "l"(value) : "memory");
#else
  std::atomic_ref<uint64_t>(*address).fetch_add(value, std::memory_order_release);
#endif
}
LOOM_HOST_DEVICE void addRelaxed(uint64_t* address, uint64_t value) {
#if LOOM_DEVICE_PASS
  asm volatile("red.relaxed.sys.global.add.u64 [%0], %1;" ::"l"(address), "l"(value) : "memory");
#else
  std::atomic_ref<uint64_t>(*address).fetch_add(value, std::memory_order_relaxed);
#endif
}

// Orders this thread's earlier writes before its later ones as seen by every observer (peer GPUs,
// the host): what a FIFO push needs between the trigger's body and its valid bit.
LOOM_HOST_DEVICE void fenceSystem() {
#if LOOM_DEVICE_PASS
  __threadfence_system();
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

}  // namespace loom::device
