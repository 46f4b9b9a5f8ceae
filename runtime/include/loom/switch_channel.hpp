#pragma once

// A switch channel: NVLink SHARP (NVLS) multicast memory shared by a group of GPUs of one host, for
// in-switch reduce and broadcast (device side: device/switch_channel_device.hpp).
//
// Opt-in only. Multicast objects can put a shared GPU host out of service, so a switch channel is
// refused unless LOOM_ENABLE_NVLS=1, and refused whenever NCCL_NVLS_ENABLE=0 is set, whatever
// LOOM_ENABLE_NVLS says. No test of this project enables it.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/communicator.hpp"
#include "loom/device/switch_channel_device.hpp"

namespace loom {

// Whether switch channels may be created in this process; when not, `why` says which variable
// forbids it. Malformed values of either variable are errors.
bool switchChannelsAllowed(std::string* why = nullptr);

class SwitchChannel {
 public:
  // Collective over `ranks` (all on this host, each with its own GPU): the first rank creates the
  // multicast object and passes it to the others; each binds `bytes` of new device memory to it.
  SwitchChannel(Communicator& communicator, const std::vector<int>& ranks, uint64_t bytes, uint64_t tag);
  ~SwitchChannel();
  SwitchChannel(const SwitchChannel&) = delete;
  SwitchChannel& operator=(const SwitchChannel&) = delete;

  device::SwitchChannelHandle deviceHandle() const;
  uint64_t bytes() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom
