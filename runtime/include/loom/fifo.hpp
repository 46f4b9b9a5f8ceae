#pragma once

// The host end of the FIFO between a GPU and its proxy thread (device end: device/fifo_device.hpp).
// Triggers and the tail live in mapped host memory and the head in device memory when there is a
// GPU; otherwise all three are plain host memory and host threads push (the CPU backend, tests).

#include <cstdint>
#include <memory>
#include <optional>

#include "loom/device/diagnostics.hpp"
#include "loom/device/fifo_device.hpp"

namespace loom {

class Fifo {
 public:
  static constexpr uint64_t kDefaultSize = 512;

  // `onDevice`: GPU threads push (the current device's); otherwise host threads do.
  explicit Fifo(uint64_t size = kDefaultSize, bool onDevice = true);
  ~Fifo();
  Fifo(const Fifo&) = delete;
  Fifo& operator=(const Fifo&) = delete;

  device::FifoHandle deviceHandle(const device::WaitContext& wait) const;
  // The trigger at the tail once its pusher has filled it.
  std::optional<device::ProxyTrigger> poll() const;
  // Frees the slot at the tail and moves past it (after the trigger is carried out).
  void pop();
  uint64_t tail() const { return tail_; }
  uint64_t size() const { return size_; }

 private:
  struct Storage;
  std::unique_ptr<Storage> storage_;
  uint64_t size_;
  uint64_t tail_ = 0;
};

}  // namespace loom
