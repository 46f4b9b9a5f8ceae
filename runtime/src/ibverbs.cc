#include "loom/ibverbs.hpp"

#include <dlfcn.h>
#include <infiniband/verbs.h>

#include <memory>

namespace loom {
namespace {

// The entry points Loom uses so far; the transport adds more as it needs them.
struct IbverbsLibrary {
  void* handle = nullptr;
  decltype(&ibv_get_device_list) getDeviceList = nullptr;
  decltype(&ibv_free_device_list) freeDeviceList = nullptr;
  decltype(&ibv_get_device_name) getDeviceName = nullptr;
  std::string reason;

  IbverbsLibrary() {
    handle = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* error = dlerror();
      reason = error ? error : "dlopen(libibverbs.so.1) failed";
      return;
    }
    if (!resolve(getDeviceList, "ibv_get_device_list") || !resolve(freeDeviceList, "ibv_free_device_list") ||
        !resolve(getDeviceName, "ibv_get_device_name")) {
      dlclose(handle);
      handle = nullptr;
    }
  }
  ~IbverbsLibrary() {
    if (handle != nullptr) dlclose(handle);
  }
  IbverbsLibrary(const IbverbsLibrary&) = delete;
  IbverbsLibrary& operator=(const IbverbsLibrary&) = delete;

  template <typename Fn>
  bool resolve(Fn& fn, const char* symbol) {
    fn = reinterpret_cast<Fn>(dlsym(handle, symbol));
    if (fn == nullptr) reason = std::string("libibverbs.so.1 lacks ") + symbol;
    return fn != nullptr;
  }
};

const IbverbsLibrary& library() {
  static const IbverbsLibrary instance;
  return instance;
}

}  // namespace

IbverbsStatus ibverbsStatus() {
  const IbverbsLibrary& lib = library();
  IbverbsStatus status;
  status.loaded = lib.handle != nullptr;
  status.reason = lib.reason;
  if (!status.loaded) return status;
  int count = 0;
  ibv_device** list = lib.getDeviceList(&count);
  if (list == nullptr) return status;
  for (int i = 0; i < count; ++i) status.devices.emplace_back(lib.getDeviceName(list[i]));
  lib.freeDeviceList(list);
  return status;
}

}  // namespace loom
