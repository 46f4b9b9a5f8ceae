#include "loom/ibverbs.hpp"

#include <dlfcn.h>

#include <atomic>
#include <cstring>

#include "ibverbs_api.hpp"

namespace loom {
namespace {

struct SystemLibrary {
  void* handle = nullptr;
  IbverbsApi api;
  // The exported ibv_query_port takes the old, shorter port attribute struct; queryPort below only
  // calls it for providers without the extended context.
  int (*queryPortCompat)(ibv_context*, uint8_t, _compat_ibv_port_attr*) = nullptr;

  SystemLibrary() {
    handle = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* error = dlerror();
      api.reason = error ? error : "dlopen(libibverbs.so.1) failed";
      return;
    }
    api.loaded = resolveAll();
    resolve(api.regDmabufMr, "ibv_reg_dmabuf_mr", /*required=*/false);
    if (!api.loaded) {
      dlclose(handle);
      handle = nullptr;
    }
  }

  bool resolveAll() {
    return resolve(api.getDeviceList, "ibv_get_device_list") && resolve(api.freeDeviceList, "ibv_free_device_list") &&
           resolve(api.getDeviceName, "ibv_get_device_name") && resolve(api.openDevice, "ibv_open_device") &&
           resolve(api.closeDevice, "ibv_close_device") && resolve(api.queryDevice, "ibv_query_device") &&
           resolve(queryPortCompat, "ibv_query_port") && resolve(api.queryGid, "ibv_query_gid") &&
           resolve(api.allocPd, "ibv_alloc_pd") && resolve(api.deallocPd, "ibv_dealloc_pd") &&
           resolve(api.regMr, "ibv_reg_mr") && resolve(api.deregMr, "ibv_dereg_mr") &&
           resolve(api.createCq, "ibv_create_cq") && resolve(api.destroyCq, "ibv_destroy_cq") &&
           resolve(api.createQp, "ibv_create_qp") && resolve(api.destroyQp, "ibv_destroy_qp") &&
           resolve(api.modifyQp, "ibv_modify_qp") && resolve(api.wcStatusStr, "ibv_wc_status_str");
  }

  // dlsym returns the default version of a versioned symbol (IBVERBS_1.1 for the 1.0/1.1 pairs),
  // which is the one verbs.h declares.
  template <typename Fn>
  bool resolve(Fn& fn, const char* symbol, bool required = true) {
    fn = reinterpret_cast<Fn>(dlsym(handle, symbol));
    if (fn == nullptr && required) api.reason = std::string("libibverbs.so.1 lacks ") + symbol;
    return fn != nullptr;
  }
};

const SystemLibrary& systemLibrary() {
  // Never destroyed or closed: memory regions released during static destruction still call into it.
  static const SystemLibrary* library = [] {
    auto* created = new SystemLibrary();
    created->api.queryPort = nullptr;
    if (created->api.loaded) {
      created->api.queryPort = [](ibv_context* context, uint8_t port, ibv_port_attr* attr) {
        // What verbs.h's inline ibv_query_port does, without linking the exported symbol.
        verbs_context* extended = verbs_get_ctx_op(context, query_port);
        if (extended != nullptr) return extended->query_port(context, port, attr, sizeof(*attr));
        std::memset(attr, 0, sizeof(*attr));
        return systemLibrary().queryPortCompat(context, port, reinterpret_cast<_compat_ibv_port_attr*>(attr));
      };
      created->api.postSend = [](ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) { return ibv_post_send(qp, wr, bad); };
      created->api.postRecv = [](ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) { return ibv_post_recv(qp, wr, bad); };
      created->api.pollCq = [](ibv_cq* cq, int entries, ibv_wc* wc) { return ibv_poll_cq(cq, entries, wc); };
    }
    return created;
  }();
  return *library;
}

std::atomic<const IbverbsApi*> testingApi{nullptr};

}  // namespace

const IbverbsApi& systemIbverbsApi() { return systemLibrary().api; }

void setIbverbsApiForTesting(const IbverbsApi* api) { testingApi.store(api, std::memory_order_release); }

const IbverbsApi& activeIbverbsApi() {
  const IbverbsApi* api = testingApi.load(std::memory_order_acquire);
  return api != nullptr ? *api : systemIbverbsApi();
}

IbverbsStatus ibverbsStatus() {
  const IbverbsApi& api = systemIbverbsApi();
  IbverbsStatus status;
  status.loaded = api.loaded;
  status.reason = api.reason;
  if (!status.loaded) return status;
  int count = 0;
  ibv_device** list = api.getDeviceList(&count);
  if (list == nullptr) return status;
  for (int i = 0; i < count; ++i) status.devices.emplace_back(api.getDeviceName(list[i]));
  api.freeDeviceList(list);
  return status;
}

}  // namespace loom
