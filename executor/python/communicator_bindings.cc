// loom._native.Communicator, RegisteredMemory and Connection: the channel runtime's host side for
// Python (memory is named by address and size, so numpy arrays, torch tensors and CuPy arrays all
// work through their data pointers).

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "loom/communicator.hpp"
#include "loom/connection.hpp"
#include "loom/device_diagnostics.hpp"
#include "loom/error.hpp"
#include "loom/switch_channel.hpp"
#include "py_bootstrap.hpp"
#include "py_communicator.hpp"

namespace py = pybind11;

namespace loom::python {
namespace {

Transport parseTransport(const std::string& name, const char* argument) {
  for (Transport transport : {Transport::kCudaIpc, Transport::kIb, Transport::kTcp}) {
    if (name == transportName(transport)) return transport;
  }
  throw Error(ErrorCategory::kInvalidArgument,
              std::string(argument) + ": unknown transport '" + name + "' (expected cuda_ipc, ib or tcp)");
}

TransportFlags parseTransports(const py::object& value) {
  TransportFlags flags;
  if (py::isinstance<py::str>(value)) return TransportFlags(parseTransport(value.cast<std::string>(), "transports"));
  for (const py::handle& item : value) flags = flags | parseTransport(py::cast<std::string>(item), "transports");
  return flags;
}

std::vector<std::string> transportNames(TransportFlags flags) {
  std::vector<std::string> names;
  for (Transport transport : {Transport::kCudaIpc, Transport::kIb, Transport::kTcp}) {
    if (flags.has(transport)) names.emplace_back(transportName(transport));
  }
  return names;
}

void bindMemory(py::module_& module) {
  py::class_<RegisteredMemory>(module, "RegisteredMemory",
                               "A buffer registered for transports; received ones refer to a peer's buffer.")
      .def_property_readonly(
          "address",
          [](const RegisteredMemory& m) -> std::optional<uint64_t> {
            if (m.data() == nullptr) return std::nullopt;
            return reinterpret_cast<uint64_t>(m.data());
          },
          "Where it is usable in this process (a peer's buffer mapped here), or None.")
      .def_property_readonly("original_address", &RegisteredMemory::originalAddress)
      .def_property_readonly("nbytes", &RegisteredMemory::bytes)
      .def_property_readonly("owner_rank", &RegisteredMemory::ownerRank)
      .def_property_readonly(
          "location",
          [](const RegisteredMemory& m) { return m.location() == MemoryLocation::kDevice ? "device" : "host"; })
      .def_property_readonly("device", &RegisteredMemory::deviceId)
      .def_property_readonly("transports", [](const RegisteredMemory& m) { return transportNames(m.transports()); })
      .def_property_readonly("is_local", &RegisteredMemory::isLocal)
      .def("serialize", [](const RegisteredMemory& m) {
        std::vector<uint8_t> bytes = m.serialize();
        return py::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size());
      });
}

void bindConnection(py::module_& module) {
  py::class_<Connection, std::shared_ptr<Connection>>(module, "Connection",
                                                      "A host-driven data path to one peer over one transport.")
      .def_property_readonly("transport", [](const Connection& c) { return transportName(c.transport()); })
      .def_property_readonly("local_rank", &Connection::localRank)
      .def_property_readonly("remote_rank", &Connection::remoteRank)
      .def("write", &Connection::write, py::arg("dst"), py::arg("dst_offset"), py::arg("src"), py::arg("src_offset"),
           py::arg("nbytes"), py::call_guard<py::gil_scoped_release>(),
           "Copy nbytes from this rank's src to the peer's dst (asynchronous; complete at flush()).")
      .def("write_value", &Connection::writeValue, py::arg("dst"), py::arg("dst_offset"), py::arg("value"),
           py::call_guard<py::gil_scoped_release>(),
           "Store a 64-bit value at the peer's dst + dst_offset after every earlier write.")
      .def("flush", &Connection::flush, py::arg("timeout_ms") = 30000, py::call_guard<py::gil_scoped_release>(),
           "Wait until everything posted so far is complete at the peer.");
}

void bindCommunicatorClass(py::module_& module) {
  py::class_<PyCommunicator>(module, "Communicator", "One rank's view of the job: hosts, memory, connections.")
      .def(py::init([](const PyBootstrap& bootstrap, bool hostOnly, std::optional<int> device) {
             if (hostOnly && device) throw Error(ErrorCategory::kInvalidArgument, "device: not with host_only");
             if (device && *device < 0) {
               throw Error(ErrorCategory::kInvalidArgument,
                           "device: expected a CUDA device index, got " + std::to_string(*device));
             }
             std::shared_ptr<Bootstrap> shared = bootstrap.get();
             py::gil_scoped_release release;
             const int cudaDevice =
                 hostOnly ? Communicator::kHostOnly : device.value_or(Communicator::kCurrentDevice);
             return PyCommunicator{std::make_shared<Communicator>(shared, IbConfig::fromEnvironment(), cudaDevice)};
           }),
           py::arg("bootstrap"), py::arg("host_only") = false, py::arg("device") = py::none(),
           "Collective over the bootstrap's ranks. host_only keeps the runtime's own state in host memory;\n"
           "device: the CUDA device index (default: the current device).")
      .def_property_readonly("rank", [](const PyCommunicator& c) { return c.communicator->rank(); })
      .def_property_readonly("world_size", [](const PyCommunicator& c) { return c.communicator->worldSize(); })
      .def_property_readonly("local_rank", [](const PyCommunicator& c) { return c.communicator->localRank(); })
      .def_property_readonly("local_world_size",
                             [](const PyCommunicator& c) { return c.communicator->localWorldSize(); })
      .def_property_readonly("node_count", [](const PyCommunicator& c) { return c.communicator->nodeCount(); })
      .def_property_readonly("cuda_device", [](const PyCommunicator& c) { return c.communicator->cudaDevice(); })
      .def_property_readonly("cuda_device_bus_id",
                             [](const PyCommunicator& c) { return c.communicator->cudaDeviceBusId(); })
      .def(
          "node", [](const PyCommunicator& c, int rank) { return c.communicator->node(rank); }, py::arg("rank"))
      .def(
          "register_memory",
          [](const PyCommunicator& c, uint64_t address, uint64_t nbytes, const py::object& transports) {
            return c.communicator->registerMemory(reinterpret_cast<void*>(address), nbytes,
                                                  parseTransports(transports));
          },
          py::arg("address"), py::arg("nbytes"), py::arg("transports"),
          "Register [address, address + nbytes) for a transport name or a list of them.")
      .def(
          "send_memory",
          [](const PyCommunicator& c, const RegisteredMemory& memory, int peer, uint64_t tag) {
            c.communicator->sendMemory(memory, peer, tag);
          },
          py::arg("memory"), py::arg("peer"), py::arg("tag"), py::call_guard<py::gil_scoped_release>())
      .def(
          "recv_memory",
          [](const PyCommunicator& c, int peer, uint64_t tag) { return c.communicator->recvMemory(peer, tag); },
          py::arg("peer"), py::arg("tag"), py::call_guard<py::gil_scoped_release>())
      .def(
          "connect",
          [](const PyCommunicator& c, int peer, const std::string& transport, uint64_t tag) {
            const Transport parsed = parseTransport(transport, "transport");
            py::gil_scoped_release release;
            return c.communicator->connect(peer, parsed, tag);
          },
          py::arg("peer"), py::arg("transport"), py::arg("tag"),
          "Open a connection to peer; the peer calls connect with this rank, the same transport and tag.")
      .def(
          "device_timeout_report", [](const PyCommunicator& c) { return c.communicator->deviceDiagnostics().report(); },
          "The diagnostic a timed-out device wait left, or None.");
}

}  // namespace

void bindCommunicator(py::module_& module) {
  bindMemory(module);
  bindConnection(module);
  bindCommunicatorClass(module);
  module.def("device_timeout_ms", &deviceTimeoutMs, "LOOM_DEVICE_TIMEOUT_MS, checked (default 30000; 0: none).");
  module.def(
      "switch_channels_allowed",
      [] {
        std::string why;
        const bool allowed = switchChannelsAllowed(&why);
        return py::make_tuple(allowed, why);
      },
      "(allowed, why not): switch channels need LOOM_ENABLE_NVLS=1 and no NCCL_NVLS_ENABLE=0.");
}

}  // namespace loom::python
