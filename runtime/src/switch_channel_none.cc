// Switch channels in a build without CUDA.

#include "loom/error.hpp"
#include "loom/switch_channel.hpp"

namespace loom {

struct SwitchChannel::Impl {};

SwitchChannel::SwitchChannel(Communicator&, const std::vector<int>&, uint64_t, uint64_t) {
  std::string why;
  if (!switchChannelsAllowed(&why)) throw Error(ErrorCategory::kInvalidArgument, "switch channel refused: " + why);
  throw Error(ErrorCategory::kCuda, "switch channel: this build of Loom has no CUDA (nvcc was not found)");
}
SwitchChannel::~SwitchChannel() = default;
device::SwitchChannelHandle SwitchChannel::deviceHandle() const { return {}; }
uint64_t SwitchChannel::bytes() const { return 0; }

}  // namespace loom
