// loom._native registry functions: the process's plan registry and selector (loom/plan_registry.hpp).
// loom.registry (Python, compiler/loom/runtime/registry.py) is the documented face of these;
// it accepts plan paths and checks arguments.

#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "loom/data_type.hpp"
#include "loom/default_plans.hpp"
#include "loom/error.hpp"
#include "loom/plan_registry.hpp"
#include "loom/tuned_table.hpp"

namespace py = pybind11;

namespace loom::python {
namespace {

Error invalid(const std::string& message) { return Error(ErrorCategory::kInvalidArgument, message); }

// pybind11 holders cannot be shared_ptr<const T>: entries cross to Python as shared_ptr<T> (their
// properties are read-only, so Python cannot change them).
using MutableEntry = std::shared_ptr<RegisteredPlan>;
MutableEntry exposed(const PlanEntry& entry) { return std::const_pointer_cast<RegisteredPlan>(entry); }
std::vector<MutableEntry> exposed(const std::vector<PlanEntry>& entries) {
  std::vector<MutableEntry> out;
  for (const PlanEntry& entry : entries) out.push_back(exposed(entry));
  return out;
}

Collective parseCollective(const std::string& name) {
  for (Collective c :
       {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter, Collective::kAllToAll,
        Collective::kBroadcast, Collective::kSendRecv, Collective::kReduce, Collective::kAllToAllV}) {
    if (name == collectiveName(c)) return c;
  }
  throw invalid(
      "collective: expected allreduce, allgather, reducescatter, alltoall, broadcast, reduce, sendrecv or alltoallv, "
      "got '" +
      name + "'");
}

DataType parseType(const std::string& name) {
  if (auto type = dataTypeFromName(name)) return *type;
  throw invalid("dtype: Loom cannot run '" + name + "'");
}

PlanSource parseSource(const std::string& name) {
  if (name == "user") return PlanSource::kUser;
  if (name == "bundled") return PlanSource::kBundled;
  if (name == "tuned") return PlanSource::kTuned;
  throw invalid("source: expected 'user', 'tuned' or 'bundled', got '" + name + "'");
}

// (ranks sharing the GPU, resident blocks), as Executor.placement gives it; None: no limit.
using PlacementArg = std::optional<std::pair<uint32_t, uint32_t>>;

SelectionRequest makeRequest(const std::string& collective, uint64_t messageBytes, const std::string& dtype,
                             uint32_t worldSize, uint32_t ranksPerNode, bool inplace, bool capturing,
                             std::optional<uint32_t> root, std::vector<std::string> tags, const std::string& op,
                             PlacementArg placement) {
  SelectionRequest request;
  if (placement) {
    if (placement->first == 0 || placement->second == 0) {
      throw invalid("placement: expected (ranks sharing the GPU, resident blocks), both at least 1, got (" +
                    std::to_string(placement->first) + ", " + std::to_string(placement->second) + ")");
    }
    request.placement = Placement{placement->first, placement->second};
  }
  request.collective = parseCollective(collective);
  request.messageBytes = messageBytes;
  request.dataType = parseType(dtype);
  request.worldSize = worldSize;
  request.ranksPerNode = ranksPerNode;
  request.inplace = inplace;
  request.capturing = capturing;
  request.root = root;
  request.tags = std::move(tags);
  request.op = parseReduceOp(op);
  return request;
}

// A Python callable the registry keeps: copies of the selector share it (a copy of a py::function would
// touch its reference count without the GIL, on whatever thread selects), and the last one lets it go under
// the GIL, or not at all once the interpreter is finalizing: the registry is a static of the process and
// outlives Python, and releasing a Python object then ends the process ("PyThreadState_Get: GIL released").
class PythonCallable {
 public:
  explicit PythonCallable(py::function function) : function_(std::move(function)) {}
  ~PythonCallable() {
    if (!interpreterRunning()) {
      function_.release();  // the interpreter is gone or going: it reclaims its own objects
      return;
    }
    py::gil_scoped_acquire gil;
    function_ = py::function();
  }
  PythonCallable(const PythonCallable&) = delete;
  PythonCallable& operator=(const PythonCallable&) = delete;

  static bool interpreterRunning() {
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsInitialized() != 0 && !Py_IsFinalizing();
#else
    return Py_IsInitialized() != 0 && !_Py_IsFinalizing();
#endif
  }
  const py::function& function() const { return function_; }

 private:
  py::function function_;
};

// A Python selector returns a candidate (PlanEntry), a loom.Plan, or None. While the interpreter shuts down
// it is not called: no plan (the caller's error says so).
Selector wrapSelector(py::function function) {
  auto callable = std::make_shared<PythonCallable>(std::move(function));
  return [callable](const SelectionRequest& request) -> std::shared_ptr<const Plan> {
    if (!PythonCallable::interpreterRunning()) return nullptr;
    py::gil_scoped_acquire gil;
    py::object chosen = callable->function()(request);
    if (chosen.is_none()) return nullptr;
    if (py::isinstance<RegisteredPlan>(chosen)) return chosen.cast<MutableEntry>()->plan();
    if (py::isinstance<Plan>(chosen)) return chosen.cast<std::shared_ptr<Plan>>();
    throw invalid("selector: must return one of request.candidates, a loom.Plan or None, got " +
                  std::string(py::str(py::type::of(chosen).attr("__name__"))));
  };
}

#define LOOM_REQUEST_ARGS                                                                                              \
  py::arg("collective"), py::arg("message_bytes"), py::arg("dtype"), py::arg("world_size"), py::arg("ranks_per_node"), \
      py::arg("inplace") = false, py::arg("capturing") = false, py::arg("root") = py::none(),                          \
      py::arg("tags") = std::vector<std::string>{}, py::arg("op") = "sum", py::arg("placement") = py::none()

}  // namespace

void bindRegistry(py::module_& module) {
  py::class_<RegisteredPlan, MutableEntry>(module, "PlanEntry", "A registered plan and the metadata it is selected by.")
      .def_property_readonly("name", [](const RegisteredPlan& e) { return e.info.name; })
      .def_property_readonly("plan", [](const RegisteredPlan& e) { return std::const_pointer_cast<Plan>(e.plan()); })
      .def_property_readonly("collective",
                             [](const RegisteredPlan& e) { return std::string(collectiveName(e.info.collective)); })
      .def_property_readonly("world_size", [](const RegisteredPlan& e) { return e.info.worldSize; })
      .def_property_readonly("ranks_per_node", [](const RegisteredPlan& e) { return e.info.ranksPerNode; })
      .def_property_readonly("min_message_bytes", [](const RegisteredPlan& e) { return e.info.minMessageBytes; })
      .def_property_readonly("max_message_bytes", [](const RegisteredPlan& e) { return e.info.maxMessageBytes; })
      .def_property_readonly("protocol",
                             [](const RegisteredPlan& e) { return std::string(protocolName(e.info.protocol)); })
      .def_property_readonly("inplace", [](const RegisteredPlan& e) { return e.info.inplace; })
      .def_property_readonly("root", [](const RegisteredPlan& e) { return e.info.root; })
      .def_property_readonly("reduce_op",
                             [](const RegisteredPlan& e) -> std::optional<std::string> {
                               if (!e.info.reduceOp) return std::nullopt;
                               return std::string(reduceOpName(*e.info.reduceOp));
                             })
      .def_property_readonly("data_types",
                             [](const RegisteredPlan& e) {
                               std::vector<std::string> out;
                               for (DataType t : e.info.dataTypes) out.emplace_back(dataTypeName(t));
                               return out;
                             })
      .def_property_readonly("tags", [](const RegisteredPlan& e) { return e.info.tags; })
      .def_property_readonly("priority", [](const RegisteredPlan& e) { return e.info.priority; })
      .def_property_readonly("thread_blocks", [](const RegisteredPlan& e) { return e.info.threadBlocks; })
      .def_property_readonly("source",
                             [](const RegisteredPlan& e) { return std::string(planSourceName(e.info.source)); })
      .def("__repr__", [](const RegisteredPlan& e) {
        return "<loom.PlanEntry '" + e.info.name + "' " + std::string(collectiveName(e.info.collective)) + " " +
               std::to_string(e.info.worldSize) + " ranks, bytes " + std::to_string(e.info.minMessageBytes) + ".." +
               std::to_string(e.info.maxMessageBytes) + ", " + std::string(planSourceName(e.info.source)) + ">";
      });

  py::class_<SelectionRequest>(module, "SelectionRequest", "One call, as a selector sees it.")
      .def_property_readonly("collective",
                             [](const SelectionRequest& r) { return std::string(collectiveName(r.collective)); })
      .def_readonly("message_bytes", &SelectionRequest::messageBytes)
      .def_property_readonly("dtype", [](const SelectionRequest& r) { return std::string(dataTypeName(r.dataType)); })
      .def_readonly("world_size", &SelectionRequest::worldSize)
      .def_readonly("ranks_per_node", &SelectionRequest::ranksPerNode)
      .def_readonly("inplace", &SelectionRequest::inplace)
      .def_readonly("capturing", &SelectionRequest::capturing)
      .def_readonly("root", &SelectionRequest::root)
      .def_property_readonly("op", [](const SelectionRequest& r) { return std::string(reduceOpName(r.op)); })
      .def_readonly("tags", &SelectionRequest::tags)
      .def_property_readonly(
          "placement",
          [](const SelectionRequest& r) {
            return py::make_tuple(r.placement.ranksSharingGpu, r.placement.residentBlocks);
          },
          "(ranks sharing the GPU, interpreter blocks it holds at once): candidates fit there")
      .def_property_readonly(
          "candidates", [](const SelectionRequest& r) { return exposed(r.candidates); },
          "Registered plans that fit, best first.")
      .def("__repr__", [](const SelectionRequest& r) {
        return "<loom.SelectionRequest " + std::string(collectiveName(r.collective)) + " " +
               std::to_string(r.messageBytes) + " bytes " + std::string(dataTypeName(r.dataType)) + ", " +
               std::to_string(r.candidates.size()) + " candidates>";
      });

  module.def(
      "registry_add",
      [](std::shared_ptr<Plan> plan, std::optional<std::string> name, std::optional<uint64_t> minBytes,
         std::optional<uint64_t> maxBytes, std::optional<std::vector<std::string>> dataTypes,
         std::vector<std::string> tags, int32_t priority, const std::string& source, bool replace) {
        if (!plan) throw invalid("plan: expected a loom.Plan, got None");
        PlanInfo info = planInfoFrom(*plan, parseSource(source));
        if (name) info.name = *name;
        if (minBytes) info.minMessageBytes = *minBytes;
        if (maxBytes) info.maxMessageBytes = *maxBytes;
        if (dataTypes) {
          for (const std::string& t : *dataTypes) info.dataTypes.push_back(parseType(t));
        }
        info.tags = std::move(tags);
        info.priority = priority;
        return exposed(PlanRegistry::global().add(plan, std::move(info), replace));
      },
      py::arg("plan"), py::arg("name") = py::none(), py::arg("min_message_bytes") = py::none(),
      py::arg("max_message_bytes") = py::none(), py::arg("data_types") = py::none(),
      py::arg("tags") = std::vector<std::string>{}, py::arg("priority") = 0, py::arg("source") = "user",
      py::arg("replace") = false);
  module.def(
      "registry_remove", [](const std::string& name) { return PlanRegistry::global().remove(name); }, py::arg("name"));
  module.def(
      "registry_clear",
      [](std::optional<std::string> source) {
        PlanRegistry::global().clear(source ? std::optional<PlanSource>(parseSource(*source)) : std::nullopt);
      },
      py::arg("source") = py::none());
  module.def(
      "registry_find", [](const std::string& name) { return exposed(PlanRegistry::global().find(name)); },
      py::arg("name"));
  module.def("registry_list", [] { return exposed(PlanRegistry::global().list()); });
  module.def(
      "registry_set_selector",
      [](std::optional<py::function> function) {
        PlanRegistry::global().setSelector(function ? wrapSelector(std::move(*function)) : Selector());
      },
      py::arg("selector"));
  module.def(
      "registry_select",
      [](const std::string& collective, uint64_t messageBytes, const std::string& dtype, uint32_t worldSize,
         uint32_t ranksPerNode, bool inplace, bool capturing, std::optional<uint32_t> root,
         std::vector<std::string> tags, const std::string& op, PlacementArg placement) {
        SelectionRequest request = makeRequest(collective, messageBytes, dtype, worldSize, ranksPerNode, inplace,
                                               capturing, root, std::move(tags), op, placement);
        return std::const_pointer_cast<Plan>(PlanRegistry::global().select(request));
      },
      LOOM_REQUEST_ARGS, "The plan for one call, or None (cached per request).");
  module.def(
      "registry_select_or_raise",
      [](const std::string& collective, uint64_t messageBytes, const std::string& dtype, uint32_t worldSize,
         uint32_t ranksPerNode, bool inplace, bool capturing, std::optional<uint32_t> root,
         std::vector<std::string> tags, const std::string& op, PlacementArg placement) {
        SelectionRequest request = makeRequest(collective, messageBytes, dtype, worldSize, ranksPerNode, inplace,
                                               capturing, root, std::move(tags), op, placement);
        return std::const_pointer_cast<Plan>(PlanRegistry::global().selectOrThrow(request));
      },
      LOOM_REQUEST_ARGS, "The plan for one call; no plan is an InvalidArgumentError saying what is registered.");
  module.def(
      "registry_candidates",
      [](const std::string& collective, uint64_t messageBytes, const std::string& dtype, uint32_t worldSize,
         uint32_t ranksPerNode, bool inplace, bool capturing, std::optional<uint32_t> root,
         std::vector<std::string> tags, const std::string& op, PlacementArg placement) {
        return exposed(PlanRegistry::global().candidates(makeRequest(collective, messageBytes, dtype, worldSize,
                                                                     ranksPerNode, inplace, capturing, root,
                                                                     std::move(tags), op, placement)));
      },
      LOOM_REQUEST_ARGS);
  module.def(
      "registry_passed_over",
      [](const std::string& collective, uint64_t messageBytes, const std::string& dtype, uint32_t worldSize,
         uint32_t ranksPerNode, bool inplace, bool capturing, std::optional<uint32_t> root,
         std::vector<std::string> tags, const std::string& op, PlacementArg placement) {
        const SelectionRequest request = makeRequest(collective, messageBytes, dtype, worldSize, ranksPerNode, inplace,
                                                     capturing, root, std::move(tags), op, placement);
        py::list out;
        for (const PlanEntry& entry : PlanRegistry::global().passedOver(request)) {
          out.append(py::make_tuple(exposed(entry), placementShortfall(entry->info, request.placement)));
        }
        return out;
      },
      LOOM_REQUEST_ARGS, "The plans that would fit but for the placement, each with why: [(PlanEntry, reason)].");
  module.def(
      "registry_load_directory",
      [](const std::string& directory, const std::string& source) {
        return PlanRegistry::global().loadDirectory(directory, parseSource(source));
      },
      py::arg("directory"), py::arg("source") = "user",
      "Registers every *.json and *.json.gz there; returns the files skipped.");
  module.def(
      "registry_load_tuned_table",
      [](const std::string& backend, const std::string& gpu, uint32_t gpus, uint32_t worldSize, uint32_t ranksPerNode) {
        return PlanRegistry::global().ensureTunedTableLoaded(TunedMachine{backend, gpu, gpus, worldSize, ranksPerNode});
      },
      py::arg("backend"), py::arg("gpu"), py::arg("gpus"), py::arg("world_size"), py::arg("ranks_per_node"),
      "Registers the tuned table of <cache root>/tuned for that machine, once (nothing with LOOM_TUNED=0); returns "
      "the plans skipped.");
  module.def(
      "registry_tuned_table_path",
      [](const std::string& backend, const std::string& gpu, uint32_t gpus, uint32_t worldSize, uint32_t ranksPerNode) {
        return findTunedTable(tunedDirectory(), TunedMachine{backend, gpu, gpus, worldSize, ranksPerNode});
      },
      py::arg("backend"), py::arg("gpu"), py::arg("gpus"), py::arg("world_size"), py::arg("ranks_per_node"),
      "The tuned table for that machine in <cache root>/tuned, or '' when there is none.");
  module.def(
      "registry_load_default_plans", [] { return PlanRegistry::global().ensureDefaultPlansLoaded(); },
      "Loads <cache root>/default once (per root); returns the files skipped.");
  // loom.runtime.install_plans: the one installer, shared with libloom_nccl.so (loom/default_plans.hpp).
  module.def("install_default_plans", &installDefaultPlans, py::arg("bundled"), py::arg("target"),
             py::arg("force") = false, py::call_guard<py::gil_scoped_release>(),
             "Installs the bundled plans into target; returns the installed files.");
  module.def("ensure_default_plans_installed", &ensureDefaultPlansInstalled, py::arg("bundled"), py::arg("target"),
             py::call_guard<py::gil_scoped_release>(),
             "Installs the bundled plans into target unless its stamp says they are there; True when it did.");
  module.def("installed_stamp", &installedStamp, py::arg("bundled"),
             "What target/.installed holds once the plans of bundled are installed there.");
  module.attr("INSTALLED_STAMP_NAME") = kInstalledStampName;
  module.def("registry_stats", [] {
    RegistryStats stats = PlanRegistry::global().stats();
    py::dict out;
    out["selections"] = stats.selections;
    out["cache_hits"] = stats.cacheHits;
    out["selector_calls"] = stats.selectorCalls;
    return out;
  });
}

}  // namespace loom::python
