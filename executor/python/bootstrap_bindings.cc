// loom._native.UniqueId, loom._native.Bootstrap and loom._native.launch_environment().

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "loom/bootstrap.hpp"
#include "loom/bootstrap_split.hpp"
#include "loom/error.hpp"
#include "loom/launch_environment.hpp"
#include "loom/unique_id.hpp"
#include "py_bootstrap.hpp"

namespace py = pybind11;

namespace loom::python {
namespace {

// Copies any contiguous bytes-like object (bytes, bytearray, memoryview, numpy array) so that the
// GIL can be released while the bytes travel.
std::vector<uint8_t> bytesFrom(const py::handle& object, const char* what) {
  Py_buffer view;
  if (PyObject_GetBuffer(object.ptr(), &view, PyBUF_SIMPLE) != 0) {
    PyErr_Clear();
    throw py::type_error(std::string(what) + ": expected a bytes-like object, got " +
                         std::string(py::str(py::type::handle_of(object).attr("__name__"))));
  }
  const auto* data = static_cast<const uint8_t*>(view.buf);
  std::vector<uint8_t> bytes(data, data + view.len);
  PyBuffer_Release(&view);
  return bytes;
}

py::bytes toPython(const std::vector<uint8_t>& bytes) {
  return py::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

// Lets Ctrl-C through while a call waits with the GIL released: the event loop calls this about
// every 100 ms, and a pending KeyboardInterrupt (or any signal handler's exception) ends the wait.
void checkPythonSignals() {
  py::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

py::dict environmentDict(const LaunchEnvironment& env) {
  py::dict out;
  out["launcher"] = env.launcher;
  out["rank"] = env.rank;
  out["world_size"] = env.worldSize;
  out["local_rank"] = env.localRank;
  out["local_world_size"] = env.localWorldSize;
  out["address"] = env.uniqueId.address();
  out["address_source"] = env.addressSource;
  out["secret_from_environment"] = env.secretFromEnvironment;
  out["unique_id"] = env.uniqueId;
  return out;
}

}  // namespace

void bindBootstrap(py::module_& module) {
  py::class_<UniqueId> uniqueId(module, "UniqueId",
                                "Where rank 0 listens and the job's 128-bit secret: what every rank needs to join a "
                                "bootstrap. Rank 0 creates it and hands it to the others (to_bytes / hex, or pickle).");
  uniqueId.attr("SIZE") = UniqueId::kBytes;
  uniqueId
      .def_static(
          "create", [](const std::string& host) { return UniqueId::create(host); }, py::arg("host") = "",
          "Listen on HOST (default: LOOM_BOOTSTRAP_HOST, else the first non-loopback IPv4 interface, else "
          "127.0.0.1) at a free port, with a new random secret. The socket waits for the rank-0 Bootstrap of this "
          "process.")
      .def_static(
          "from_address",
          [](const std::string& hostPort, const std::string& secretHex) {
            return UniqueId::fromAddress(hostPort, UniqueId::parseSecret(secretHex, "secret"));
          },
          py::arg("address"), py::arg("secret"), "An id for a known 'host:port' and a secret of 32 hex digits.")
      .def_static(
          "from_bytes",
          [](const py::object& data) {
            std::vector<uint8_t> bytes = bytesFrom(data, "UniqueId.from_bytes");
            return UniqueId::fromBytes(bytes);
          },
          py::arg("data"))
      .def_static(
          "from_hex", [](const std::string& hex) { return UniqueId::fromHex(hex); }, py::arg("text"))
      .def("to_bytes",
           [](const UniqueId& id) {
             UniqueId::Bytes bytes = id.toBytes();
             return py::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size());
           })
      .def("hex", &UniqueId::toHex)
      .def_property_readonly("address", &UniqueId::address, "'host:port' where rank 0 listens")
      .def_property_readonly("port", &UniqueId::port)
      .def("__eq__", [](const UniqueId& a,
                        const py::object& b) { return py::isinstance<UniqueId>(b) && a == b.cast<const UniqueId&>(); })
      .def("__hash__", [](const UniqueId& id) { return py::hash(py::str(id.toHex())); })
      .def("__repr__", [](const UniqueId& id) { return "UniqueId(address='" + id.address() + "')"; })
      .def(py::pickle(
          [](const UniqueId& id) {
            UniqueId::Bytes bytes = id.toBytes();
            return py::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size());
          },
          [](const py::bytes& state) { return UniqueId::fromBytes(bytesFrom(state, "UniqueId state")); }));

  py::class_<PyBootstrap>(module, "Bootstrap",
                          "The ranks of a job finding each other over TCP: all_gather, barrier, send/recv of bytes. "
                          "Every blocking call releases the GIL, can be interrupted with Ctrl-C, and times out after "
                          "timeout_ms with loom.LoomTimeoutError naming the ranks that did not answer.")
      .def(py::init([](int rank, int worldSize, const UniqueId& id, std::optional<int64_t> timeoutMs) {
             py::gil_scoped_release release;
             return std::make_unique<PyBootstrap>(Bootstrap(rank, worldSize, id, timeoutMs, checkPythonSignals));
           }),
           py::arg("rank"), py::arg("world_size"), py::arg("unique_id"), py::arg("timeout_ms") = py::none(),
           "Join the job; returns once every rank has joined. timeout_ms defaults to LOOM_BOOTSTRAP_TIMEOUT_MS, "
           "else 30000.")
      .def_static(
          "from_environment",
          [](std::optional<int64_t> timeoutMs) {
            py::gil_scoped_release release;
            return std::make_unique<PyBootstrap>(Bootstrap::fromEnvironment(timeoutMs, checkPythonSignals));
          },
          py::arg("timeout_ms") = py::none(),
          "Join with the rank, world size, address and secret that the launcher set (loom.launch, torchrun, Open "
          "MPI, Slurm).")
      .def_property_readonly("rank", [](const PyBootstrap& self) { return self.get()->rank(); })
      .def_property_readonly("world_size", [](const PyBootstrap& self) { return self.get()->worldSize(); })
      .def_property_readonly("timeout_ms", [](const PyBootstrap& self) { return self.get()->timeoutMs(); })
      .def_property_readonly("closed", &PyBootstrap::closed)
      .def(
          "peer_address", [](const PyBootstrap& self, int rank) { return self.get()->peerAddress(rank); },
          py::arg("rank"), "'host:port' where that rank accepts bootstrap connections")
      .def(
          "all_gather",
          [](const PyBootstrap& self, const py::object& data) {
            std::shared_ptr<Bootstrap> bootstrap = self.get();
            std::vector<uint8_t> mine = bytesFrom(data, "all_gather");
            std::vector<Bootstrap::Bytes> blocks;
            {
              py::gil_scoped_release release;
              blocks = bootstrap->allGather(mine);
            }
            py::list out;
            for (const Bootstrap::Bytes& block : blocks) out.append(toPython(block));
            return out;
          },
          py::arg("data"), "Every rank's bytes, indexed by rank (sizes may differ).")
      .def(
          "barrier",
          [](const PyBootstrap& self) {
            std::shared_ptr<Bootstrap> bootstrap = self.get();
            py::gil_scoped_release release;
            bootstrap->barrier();
          },
          "Return once every rank has called barrier().")
      .def(
          "send",
          [](const PyBootstrap& self, int peer, uint64_t tag, const py::object& data) {
            std::shared_ptr<Bootstrap> bootstrap = self.get();
            std::vector<uint8_t> bytes = bytesFrom(data, "send");
            py::gil_scoped_release release;
            bootstrap->send(peer, tag, bytes);
          },
          py::arg("peer"), py::arg("tag"), py::arg("data"))
      .def(
          "recv",
          [](const PyBootstrap& self, int peer, uint64_t tag) {
            std::shared_ptr<Bootstrap> bootstrap = self.get();
            Bootstrap::Bytes bytes;
            {
              py::gil_scoped_release release;
              bytes = bootstrap->recv(peer, tag);
            }
            return toPython(bytes);
          },
          py::arg("peer"), py::arg("tag"), "The oldest message from PEER with TAG, waiting for it if need be.")
      .def("close", &PyBootstrap::close, "Close every connection now (also done when the object is collected).")
      .def("__enter__", [](PyBootstrap& self) -> PyBootstrap& { return self; })
      .def("__exit__", [](PyBootstrap& self, const py::args&) { self.close(); })
      .def("__repr__", [](const PyBootstrap& self) {
        if (self.closed()) return std::string("Bootstrap(closed)");
        auto bootstrap = self.get();
        return "Bootstrap(rank=" + std::to_string(bootstrap->rank()) +
               ", world_size=" + std::to_string(bootstrap->worldSize()) + ")";
      });

  module.def(
      "split_bootstrap",
      [](const PyBootstrap& parent, int color, int key) -> py::object {
        std::shared_ptr<Bootstrap> bootstrap = parent.get();
        SubgroupBootstrap group;
        {
          py::gil_scoped_release release;
          group = splitBootstrap(*bootstrap, color, key);
        }
        if (!group.bootstrap) return py::none();
        py::object child = py::cast(std::make_unique<PyBootstrap>(group.bootstrap));
        return py::make_tuple(child, group.parentRanks);
      },
      py::arg("parent"), py::arg("color"), py::arg("key"),
      "Collective over every rank of PARENT: ranks with one color form a group ranked by (key, parent rank). "
      "Returns (bootstrap, parent_ranks) of this rank's group, or None for color -1 (no group).");
  module.def(
      "launch_environment", [] { return environmentDict(detectLaunchEnvironment()); },
      "What Bootstrap.from_environment() would use: launcher, rank, world_size, local_rank, local_world_size, "
      "address, address_source, secret_from_environment, unique_id.");
  module.attr("DEFAULT_BOOTSTRAP_TIMEOUT_MS") = kDefaultBootstrapTimeoutMs;
}

}  // namespace loom::python
