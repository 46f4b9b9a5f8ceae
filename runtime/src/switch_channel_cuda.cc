// Switch channels over CUDA multicast objects. Reached only when switchChannelsAllowed() says so;
// the driver's multicast entry points are not even looked up otherwise.

#include <unistd.h>

#include <algorithm>

#include "communicator_impl.hpp"
#include "cuda_check.hpp"
#include "cuda_driver.hpp"
#include "deadline.hpp"
#include "loom/error.hpp"
#include "loom/switch_channel.hpp"
#include "setup_tags.hpp"

namespace loom {
namespace {

struct MulticastDriver {
  decltype(&::cuMulticastCreate) create = nullptr;
  decltype(&::cuMulticastAddDevice) addDevice = nullptr;
  decltype(&::cuMulticastBindMem) bindMem = nullptr;
  decltype(&::cuMulticastUnbind) unbind = nullptr;
  decltype(&::cuMulticastGetGranularity) granularity = nullptr;
};

const MulticastDriver& multicastDriver() {
  static const MulticastDriver driver = [] {
    MulticastDriver d;
    resolveDriverEntryPoint(d.create, "cuMulticastCreate");
    resolveDriverEntryPoint(d.addDevice, "cuMulticastAddDevice");
    resolveDriverEntryPoint(d.bindMem, "cuMulticastBindMem");
    resolveDriverEntryPoint(d.unbind, "cuMulticastUnbind");
    resolveDriverEntryPoint(d.granularity, "cuMulticastGetGranularity");
    return d;
  }();
  return driver;
}

// A group step: every member tells the first rank it is done, the first rank releases them all.
void groupBarrier(Bootstrap& bootstrap, const std::vector<int>& ranks, uint64_t tag) {
  const uint8_t byte = 1;
  if (bootstrap.rank() == ranks[0]) {
    for (size_t i = 1; i < ranks.size(); ++i) bootstrap.recv(ranks[i], tag);
    for (size_t i = 1; i < ranks.size(); ++i) bootstrap.send(ranks[i], tag, std::span(&byte, 1));
  } else {
    bootstrap.send(ranks[0], tag, std::span(&byte, 1));
    bootstrap.recv(ranks[0], tag);
  }
}

}  // namespace

struct SwitchChannel::Impl {
  int device = -1;
  uint64_t bytes = 0;
  CUmemGenericAllocationHandle multicast{};
  CUmemGenericAllocationHandle memory{};
  CUdeviceptr multicastAddress = 0;
  CUdeviceptr localAddress = 0;
  bool bound = false;

  ~Impl() {
    // Nothing was made (a refused or failed start): no driver call, which could throw here.
    if (!multicast && !memory) return;
    const CudaDriver& d = cudaDriver();
    if (multicastAddress) {
      d.memUnmap(multicastAddress, bytes);
      d.memAddressFree(multicastAddress, bytes);
    }
    if (localAddress) {
      d.memUnmap(localAddress, bytes);
      d.memAddressFree(localAddress, bytes);
    }
    if (bound) multicastDriver().unbind(multicast, device, 0, bytes);
    if (memory) d.memRelease(memory);
    if (multicast) d.memRelease(multicast);
  }

  CUdeviceptr map(CUmemGenericAllocationHandle handle, uint64_t granularity) {
    const CudaDriver& d = cudaDriver();
    CUdeviceptr address = 0;
    checkDriver(d.memAddressReserve(&address, bytes, granularity, 0, 0), "cuMemAddressReserve");
    if (CUresult status = d.memMap(address, bytes, 0, handle, 0); status != CUDA_SUCCESS) {
      d.memAddressFree(address, bytes);
      checkDriver(status, "cuMemMap");
    }
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (CUresult status = d.memSetAccess(address, bytes, &access, 1); status != CUDA_SUCCESS) {
      d.memUnmap(address, bytes);
      d.memAddressFree(address, bytes);
      checkDriver(status, "cuMemSetAccess");
    }
    return address;
  }
};

SwitchChannel::SwitchChannel(Communicator& communicator, const std::vector<int>& ranks, uint64_t bytes, uint64_t tag)
    : impl_(std::make_unique<Impl>()) {
  std::string why;
  if (!switchChannelsAllowed(&why)) throw Error(ErrorCategory::kInvalidArgument, "switch channel refused: " + why);
  const std::string where = "switch channel on rank " + std::to_string(communicator.rank());
  if (ranks.size() < 2 || std::find(ranks.begin(), ranks.end(), communicator.rank()) == ranks.end()) {
    throw Error(ErrorCategory::kInvalidArgument, where + ": the group needs 2 or more ranks including this one");
  }
  for (int r : ranks) {
    if (!communicator.sameNode(r))
      throw Error(ErrorCategory::kInvalidArgument, where + ": rank " + std::to_string(r) + " is on another host");
  }
  Impl& impl = *impl_;
  impl.device = communicator.cudaDevice();
  if (impl.device < 0) throw Error(ErrorCategory::kInvalidArgument, where + ": this rank has no GPU");
  const CudaDriver& d = cudaDriver();
  const MulticastDriver& mc = multicastDriver();
  CUmulticastObjectProp prop{};
  prop.numDevices = unsigned(ranks.size());
  prop.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  prop.size = bytes;
  size_t granularity = 0;
  checkDriver(mc.granularity(&granularity, &prop, CU_MULTICAST_GRANULARITY_RECOMMENDED), "cuMulticastGetGranularity");
  impl.bytes = prop.size = (bytes + granularity - 1) / granularity * granularity;
  const uint64_t wireTag = setupTag(SetupPurpose::kConnection, tag, "switch channel");
  Communicator::Impl& comm = communicator.impl();
  const Deadline deadline(communicator.bootstrap().timeoutMs());
  if (communicator.rank() == ranks[0]) {
    checkDriver(mc.create(&impl.multicast, &prop), "cuMulticastCreate");
    int fd = -1;
    checkDriver(d.memExportToShareableHandle(&fd, impl.multicast, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                "exporting the multicast object");
    for (size_t i = 1; i < ranks.size(); ++i) comm.mailbox().send(ranks[i], wireTag, fd, deadline);
    ::close(fd);
  } else {
    const int fd = comm.mailbox().receive(ranks[0], wireTag, deadline);
    CUresult status = d.memImportFromShareableHandle(&impl.multicast, reinterpret_cast<void*>(intptr_t(fd)),
                                                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    ::close(fd);
    checkDriver(status, "importing the multicast object");
  }
  checkDriver(mc.addDevice(impl.multicast, impl.device), "cuMulticastAddDevice");
  // Every device joins before anyone binds memory.
  groupBarrier(communicator.bootstrap(), ranks, wireTag);
  CUmemAllocationProp memoryProp{};
  memoryProp.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  memoryProp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  memoryProp.location.id = impl.device;
  checkDriver(d.memCreate(&impl.memory, impl.bytes, &memoryProp, 0), "cuMemCreate for the switch channel");
  checkDriver(mc.bindMem(impl.multicast, 0, impl.memory, 0, impl.bytes, 0), "cuMulticastBindMem");
  impl.bound = true;
  impl.localAddress = impl.map(impl.memory, granularity);
  impl.multicastAddress = impl.map(impl.multicast, granularity);
  groupBarrier(communicator.bootstrap(), ranks, wireTag);
}

SwitchChannel::~SwitchChannel() = default;

device::SwitchChannelHandle SwitchChannel::deviceHandle() const {
  return {reinterpret_cast<void*>(impl_->multicastAddress), reinterpret_cast<void*>(impl_->localAddress)};
}

uint64_t SwitchChannel::bytes() const { return impl_->bytes; }

}  // namespace loom
