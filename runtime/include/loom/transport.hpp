#pragma once

// The ways bytes can move between two ranks. A connection uses exactly one transport; a registered
// memory lists the transports it is registered for (the CUDA IPC handle, the InfiniBand memory
// region, the TCP transport's bounds check).

#include <cstdint>
#include <string>

namespace loom {

enum class Transport : uint8_t {
  kCudaIpc = 0,  // same host: peer device memory mapped through CUDA IPC; copies by the copy engine
  kIb = 1,       // InfiniBand/RoCE through libibverbs (opened with dlopen at run time)
  kTcp = 2,      // any two hosts: a socket per connection, staged through pinned host memory
};

const char* transportName(Transport transport);

class TransportFlags {
 public:
  constexpr TransportFlags() = default;
  constexpr TransportFlags(Transport transport) : bits_(bit(transport)) {}  // NOLINT: a flag set of one
  constexpr TransportFlags operator|(TransportFlags other) const { return fromBits(bits_ | other.bits_); }
  constexpr bool has(Transport transport) const { return (bits_ & bit(transport)) != 0; }
  constexpr bool empty() const { return bits_ == 0; }
  constexpr uint8_t bits() const { return bits_; }
  static constexpr TransportFlags fromBits(uint8_t bits) {
    TransportFlags flags;
    flags.bits_ = bits & kAllBits;
    return flags;
  }
  std::string toString() const;  // "cuda_ipc|tcp"
  bool operator==(const TransportFlags&) const = default;

 private:
  static constexpr uint8_t kAllBits = 0x7;
  static constexpr uint8_t bit(Transport transport) { return uint8_t(1u << static_cast<uint8_t>(transport)); }
  uint8_t bits_ = 0;
};

constexpr TransportFlags operator|(Transport a, Transport b) { return TransportFlags(a) | TransportFlags(b); }

// How the InfiniBand transport picks its device and addresses its peer. Defaults come from the
// environment: LOOM_IB_DEVICE (e.g. "mlx5_0"; default: the first active device), LOOM_IB_PORT
// (default 1), LOOM_IB_GID_INDEX (default: -1, address by LID on InfiniBand, GID 0 on RoCE) and
// LOOM_IB_SIGNAL ("atomic": a semaphore update is an RDMA atomic add; "imm": an RDMA write with
// immediate data that the receiving side's proxy applies).
enum class IbSignalMode : uint8_t { kAtomic, kWriteWithImm };

struct IbConfig {
  std::string device;
  int port = 1;
  int gidIndex = -1;
  IbSignalMode signalMode = IbSignalMode::kAtomic;

  static IbConfig fromEnvironment();
};

}  // namespace loom
