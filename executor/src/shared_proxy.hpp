#pragma once

// The proxy of one rank's port channels, shared by the executors of a communicator and of the
// communicators split from it on the same GPU of this process: one proxy thread and FIFO per GPU
// instead of one per communicator (what NCCL's splitShare shares). Made at the first plan that has
// port channels, whichever executor builds it; it keeps the communicator it was made for (whose rank
// names its log lines) alive while any executor holds it, so a parent may go before its children.

#include <memory>
#include <mutex>

#include "loom/communicator.hpp"
#include "loom/proxy_service.hpp"

namespace loom {

class SharedProxy {
 public:
  explicit SharedProxy(int cudaDevice) : device_(cudaDevice) {}
  SharedProxy(const SharedProxy&) = delete;
  SharedProxy& operator=(const SharedProxy&) = delete;

  int device() const { return device_; }
  // The running proxy, made for `communicator` at the first call.
  ProxyService& get(const std::shared_ptr<Communicator>& communicator) {
    std::lock_guard lock(mutex_);
    if (!service_) {
      owner_ = communicator;
      service_ = std::make_unique<ProxyService>(*owner_);
      service_->start();
    }
    return *service_;
  }
  // The proxy if one was made, else null.
  ProxyService* made() const {
    std::lock_guard lock(mutex_);
    return service_.get();
  }

 private:
  mutable std::mutex mutex_;
  int device_;
  std::shared_ptr<Communicator> owner_;    // declared before the service: it outlives it
  std::unique_ptr<ProxyService> service_;  // stopped (queued triggers carried out) when the last holder goes
};

}  // namespace loom
