#include "ib_context.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "connection_factory.hpp"
#include "errno_text.hpp"
#include "gpu.hpp"
#include "loom/error.hpp"
#include "registered_memory_impl.hpp"

namespace loom {
namespace {

constexpr uint64_t kMaxMessageBytesCap = uint64_t{1} << 30;

const char* portStateName(ibv_port_state state) {
  switch (state) {
    case IBV_PORT_NOP:
      return "NOP";
    case IBV_PORT_DOWN:
      return "DOWN";
    case IBV_PORT_INIT:
      return "INIT";
    case IBV_PORT_ARMED:
      return "ARMED";
    case IBV_PORT_ACTIVE:
      return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER:
      return "ACTIVE_DEFER";
  }
  return "unknown";
}

class DeviceList {
 public:
  explicit DeviceList(const IbverbsApi& api) : api_(api) {
    errno = 0;
    list_ = api.getDeviceList(&count_);
    if (list_ == nullptr) throwVerbError("InfiniBand", "ibv_get_device_list", errno != 0 ? errno : ENODEV);
  }
  ~DeviceList() { api_.freeDeviceList(list_); }
  DeviceList(const DeviceList&) = delete;
  DeviceList& operator=(const DeviceList&) = delete;

  int size() const { return count_; }
  ibv_device* operator[](int i) const { return list_[i]; }

 private:
  const IbverbsApi& api_;
  ibv_device** list_ = nullptr;
  int count_ = 0;
};

}  // namespace

void throwVerbError(const std::string& where, const char* verb, int error) {
  throw Error(ErrorCategory::kTransport, where + ": " + verb + " failed: " + errnoText(error));
}

void checkVerb(int result, const std::string& where, const char* verb) {
  if (result == 0) return;
  throwVerbError(where, verb, result > 0 ? result : (errno != 0 ? errno : EIO));
}

std::string wcStatusText(const IbverbsApi& api, ibv_wc_status status) {
  if (api.wcStatusStr != nullptr) return api.wcStatusStr(status);
  // The library's own wording, for tables that do not provide ibv_wc_status_str.
  switch (status) {
    case IBV_WC_SUCCESS:
      return "success";
    case IBV_WC_LOC_LEN_ERR:
      return "local length error";
    case IBV_WC_LOC_QP_OP_ERR:
      return "local QP operation error";
    case IBV_WC_LOC_PROT_ERR:
      return "local protection error";
    case IBV_WC_WR_FLUSH_ERR:
      return "Work Request Flushed Error";
    case IBV_WC_LOC_ACCESS_ERR:
      return "local access error";
    case IBV_WC_REM_INV_REQ_ERR:
      return "remote invalid request error";
    case IBV_WC_REM_ACCESS_ERR:
      return "remote access error";
    case IBV_WC_REM_OP_ERR:
      return "remote operation error";
    case IBV_WC_RETRY_EXC_ERR:
      return "transport retry counter exceeded";
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return "RNR retry counter exceeded";
    case IBV_WC_FATAL_ERR:
      return "fatal error";
    case IBV_WC_GENERAL_ERR:
      return "general error";
    default:
      return "status " + std::to_string(int(status));
  }
}

IbContext::IbContext(const IbverbsApi& api, const IbConfig& config) : api_(api), config_(config) {
  if (!api.loaded) throw Error(ErrorCategory::kTransport, "libibverbs is not available: " + api.reason);
  if (config.port < 1 || config.port > 255) {
    throw Error(ErrorCategory::kInvalidArgument, "InfiniBand: port " + std::to_string(config.port) + " is not 1..255");
  }
  openDevice();
  checkVerb(api.queryDevice(context_.get(), &deviceAttr_), where(), "ibv_query_device");
  errno = 0;
  pd_ = IbHandle<ibv_pd>(api.allocPd(context_.get()), {api.deallocPd});
  if (!pd_) throwVerbError(where(), "ibv_alloc_pd", errno != 0 ? errno : ENOMEM);
  useGid_ = config.gidIndex >= 0 || portAttr_.link_layer == IBV_LINK_LAYER_ETHERNET;
  gidIndex_ = config.gidIndex >= 0 ? config.gidIndex : 0;
  if (useGid_) {
    if (portAttr_.gid_tbl_len > 0 && gidIndex_ >= portAttr_.gid_tbl_len) {
      throw Error(ErrorCategory::kInvalidArgument, where() + ": GID index " + std::to_string(gidIndex_) +
                                                       " is outside the port's table of " +
                                                       std::to_string(portAttr_.gid_tbl_len));
    }
    checkVerb(api.queryGid(context_.get(), port(), gidIndex_, &gid_), where() + " GID " + std::to_string(gidIndex_),
              "ibv_query_gid");
  }
}

// The device named by config.device, else the first whose port is ACTIVE. A named device that
// cannot be used is an error about it; otherwise the error lists why each device was passed over.
void IbContext::openDevice() {
  DeviceList devices(api_);
  std::string seen;
  for (int i = 0; i < devices.size(); ++i) {
    const std::string name = api_.getDeviceName(devices[i]);
    if (!config_.device.empty() && name != config_.device) {
      seen += (seen.empty() ? "" : ", ") + name;
      continue;
    }
    std::string whyNot;
    IbHandle<ibv_context> context = tryDevice(devices[i], name, whyNot);
    if (context) {
      context_ = std::move(context);
      deviceName_ = name;
      return;
    }
    if (!config_.device.empty()) throw Error(ErrorCategory::kTransport, "InfiniBand: " + whyNot);
    seen += (seen.empty() ? "" : ", ") + whyNot;
  }
  if (!config_.device.empty()) {
    throw Error(ErrorCategory::kTransport, "InfiniBand: no RDMA device named '" + config_.device +
                                               "' (devices: " + (seen.empty() ? "none" : seen) + ")");
  }
  throw Error(ErrorCategory::kTransport, "InfiniBand: no RDMA device with port " + std::to_string(config_.port) +
                                             " ACTIVE (" + (seen.empty() ? "no devices" : seen) + ")");
}

IbHandle<ibv_context> IbContext::tryDevice(ibv_device* device, const std::string& name, std::string& whyNot) {
  errno = 0;
  IbHandle<ibv_context> context(api_.openDevice(device), {api_.closeDevice});
  if (!context) {
    whyNot = name + ": ibv_open_device failed: " + std::strerror(errno != 0 ? errno : ENODEV);
    return nullptr;
  }
  ibv_port_attr attr{};
  if (int result = api_.queryPort(context.get(), port(), &attr); result != 0) {
    const int error = result > 0 ? result : (errno != 0 ? errno : EIO);
    whyNot = name + " port " + std::to_string(config_.port) + ": ibv_query_port failed: " + std::strerror(error);
    return nullptr;
  }
  if (attr.state != IBV_PORT_ACTIVE) {
    whyNot = name + " port " + std::to_string(config_.port) + " is " + portStateName(attr.state) + ", not ACTIVE";
    return nullptr;
  }
  portAttr_ = attr;
  return context;
}

uint64_t IbContext::maxMessageBytes() const {
  const uint64_t port = portAttr_.max_msg_sz;
  return port == 0 ? kMaxMessageBytesCap : std::min(port, kMaxMessageBytesCap);
}

std::string IbContext::where() const { return "device " + deviceName_ + " port " + std::to_string(config_.port); }

IbHandle<ibv_mr> IbContext::registerRegion(void* data, uint64_t bytes, int access, const std::string& what) const {
  errno = 0;
  IbHandle<ibv_mr> mr(api_.regMr(pd_.get(), data, bytes, access), {api_.deregMr});
  if (!mr) throwVerbError(what + " on " + where(), "ibv_reg_mr", errno != 0 ? errno : EINVAL);
  return mr;
}

IbHandle<ibv_mr> IbContext::registerDmabufRegion(void* data, uint64_t bytes, int access) const {
  if (api_.regDmabufMr == nullptr) return IbHandle<ibv_mr>(nullptr, {api_.deregMr});
  uint64_t offset = 0;
  const int fd = gpu::exportDmabuf(data, bytes, &offset);
  if (fd < 0) return IbHandle<ibv_mr>(nullptr, {api_.deregMr});
  // The adapter addresses the region by its virtual address, as peers name it (originalAddress).
  IbHandle<ibv_mr> mr(api_.regDmabufMr(pd_.get(), offset, bytes, reinterpret_cast<uint64_t>(data), fd, access),
                      {api_.deregMr});
  ::close(fd);  // the registration holds its own reference to the buffer
  return mr;
}

std::shared_ptr<IbContext> openIbContext(const IbConfig& config) {
  return std::make_shared<IbContext>(activeIbverbsApi(), config);
}

void registerIbMemory(IbContext& context, RegisteredMemory::Impl& memory) {
  const bool device = memory.location == MemoryLocation::kDevice;
  // Device memory goes through dma-buf where the driver and adapter support it, else through plain
  // ibv_reg_mr, which needs the nvidia-peermem kernel module.
  const std::string what = "rank " + std::to_string(memory.ownerRank) + ": registering " +
                           std::to_string(memory.bytes) + " bytes of " + (device ? "device" : "host") + " memory" +
                           (device ? " (no dma-buf support; plain registration needs nvidia-peermem)" : "");
  constexpr int kAccess =
      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  IbHandle<ibv_mr> mr = device ? context.registerDmabufRegion(memory.localPointer, memory.bytes, kAccess)
                               : IbHandle<ibv_mr>(nullptr, {context.api().deregMr});
  if (!mr) mr = context.registerRegion(memory.localPointer, memory.bytes, kAccess, what);
  memory.ibLkey = mr->lkey;
  memory.ibRkey = mr->rkey;
  // The region keeps the context (its protection domain and device) open until it is deregistered.
  memory.ibRegion = std::shared_ptr<ibv_mr>(
      mr.release(), [owner = context.shared_from_this()](ibv_mr* region) { owner->api().deregMr(region); });
}

}  // namespace loom
