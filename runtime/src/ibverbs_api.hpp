#pragma once

// The libibverbs entry points the InfiniBand transport calls, as a table of function pointers.
// ibverbs.cc fills the system table with dlopen/dlsym, so Loom never links libibverbs and a host
// without it still runs; tests install a fake table (tests/runtime/fake_ibverbs.hpp) to run the
// transport without RDMA hardware.
//
// verbs.h makes ibv_post_send, ibv_post_recv, ibv_poll_cq and ibv_query_port static inline functions
// that dispatch through the context's provider tables. The system table wraps them in small
// functions, so a fake only supplies plain functions and never builds a provider ops table.

#include <infiniband/verbs.h>

#include <string>

namespace loom {

struct IbverbsApi {
  bool loaded = false;
  std::string reason;  // why the library is not usable (the dlopen or dlsym message)

  ibv_device** (*getDeviceList)(int* count) = nullptr;
  void (*freeDeviceList)(ibv_device** list) = nullptr;
  const char* (*getDeviceName)(ibv_device* device) = nullptr;
  ibv_context* (*openDevice)(ibv_device* device) = nullptr;
  int (*closeDevice)(ibv_context* context) = nullptr;
  int (*queryDevice)(ibv_context* context, ibv_device_attr* attr) = nullptr;
  int (*queryPort)(ibv_context* context, uint8_t port, ibv_port_attr* attr) = nullptr;
  int (*queryGid)(ibv_context* context, uint8_t port, int index, ibv_gid* gid) = nullptr;
  ibv_pd* (*allocPd)(ibv_context* context) = nullptr;
  int (*deallocPd)(ibv_pd* pd) = nullptr;
  ibv_mr* (*regMr)(ibv_pd* pd, void* address, size_t bytes, int access) = nullptr;
  // Optional (libibverbs 1.12 and later): registers device memory exported as a dma-buf.
  ibv_mr* (*regDmabufMr)(ibv_pd* pd, uint64_t offset, size_t bytes, uint64_t iova, int fd, int access) = nullptr;
  int (*deregMr)(ibv_mr* mr) = nullptr;
  ibv_cq* (*createCq)(ibv_context* context, int entries, void* cqContext, ibv_comp_channel* channel,
                      int vector) = nullptr;
  int (*destroyCq)(ibv_cq* cq) = nullptr;
  ibv_qp* (*createQp)(ibv_pd* pd, ibv_qp_init_attr* attr) = nullptr;
  int (*destroyQp)(ibv_qp* qp) = nullptr;
  int (*modifyQp)(ibv_qp* qp, ibv_qp_attr* attr, int mask) = nullptr;
  int (*postSend)(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) = nullptr;
  int (*postRecv)(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) = nullptr;
  int (*pollCq)(ibv_cq* cq, int entries, ibv_wc* completions) = nullptr;
  const char* (*wcStatusStr)(ibv_wc_status status) = nullptr;
};

// The table over the system's libibverbs.so.1; `loaded` is false (with the reason) without it.
const IbverbsApi& systemIbverbsApi();

// What openIbContext uses: the system table unless a test installed another. `api` must outlive
// every context opened while it is installed; nullptr restores the system table.
void setIbverbsApiForTesting(const IbverbsApi* api);
const IbverbsApi& activeIbverbsApi();

}  // namespace loom
