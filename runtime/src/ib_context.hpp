#pragma once

// One opened RDMA device with its protection domain, shared by a communicator's InfiniBand
// registrations and connections (each holds it alive). Every verbs object is owned by an IbHandle,
// whose deleter is the matching destroy verb of the table the context was opened with.

#include <cstdint>
#include <memory>
#include <string>

#include "ibverbs_api.hpp"
#include "loom/registered_memory.hpp"
#include "loom/transport.hpp"

namespace loom {

template <typename T>
struct IbDeleter {
  int (*destroy)(T*) = nullptr;
  void operator()(T* object) const {
    if (object != nullptr) destroy(object);
  }
};
template <typename T>
using IbHandle = std::unique_ptr<T, IbDeleter<T>>;

// A Transport error "<where>: <verb> failed: <strerror> (errno N)".
[[noreturn]] void throwVerbError(const std::string& where, const char* verb, int error);
// For verbs that return 0 or an error number (some return -1 and set errno instead).
void checkVerb(int result, const std::string& where, const char* verb);
// "remote access error": the library's text for a completion status, or Loom's own without it.
std::string wcStatusText(const IbverbsApi& api, ibv_wc_status status);

class IbContext : public std::enable_shared_from_this<IbContext> {
 public:
  IbContext(const IbverbsApi& api, const IbConfig& config);

  const IbverbsApi& api() const { return api_; }
  const IbConfig& config() const { return config_; }
  ibv_context* context() const { return context_.get(); }
  ibv_pd* pd() const { return pd_.get(); }
  const ibv_device_attr& deviceAttr() const { return deviceAttr_; }
  const ibv_port_attr& portAttr() const { return portAttr_; }
  uint8_t port() const { return uint8_t(config_.port); }
  // RoCE (an Ethernet link layer) and an explicit gidIndex address peers by GID, InfiniBand by LID.
  bool useGid() const { return useGid_; }
  int gidIndex() const { return gidIndex_; }
  const ibv_gid& gid() const { return gid_; }
  // The largest message one work request may carry: the port's limit, capped at 1 GiB.
  uint64_t maxMessageBytes() const;
  // "device mlx5_0 port 1", for messages.
  std::string where() const;

  // Registers [data, data + bytes) with the protection domain; `what` names it in errors.
  IbHandle<ibv_mr> registerRegion(void* data, uint64_t bytes, int access, const std::string& what) const;
  // Device memory through a dma-buf descriptor (no nvidia-peermem needed); null when the library,
  // the driver or the adapter cannot, so the caller falls back to registerRegion.
  IbHandle<ibv_mr> registerDmabufRegion(void* data, uint64_t bytes, int access) const;

 private:
  void openDevice();
  IbHandle<ibv_context> tryDevice(ibv_device* device, const std::string& name, std::string& whyNot);

  const IbverbsApi& api_;
  IbConfig config_;
  std::string deviceName_;
  IbHandle<ibv_context> context_;
  IbHandle<ibv_pd> pd_;  // declared after context_: deallocated before the device closes
  ibv_device_attr deviceAttr_{};
  ibv_port_attr portAttr_{};
  bool useGid_ = false;
  int gidIndex_ = 0;
  ibv_gid gid_{};
};

}  // namespace loom
