#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.hpp"
#include "loom/error.hpp"
#include "loom/ibverbs.hpp"

namespace py = pybind11;

namespace loom::python {
namespace {

// Python classes live in loom/errors.py so that pure-Python code raises the same types.
const char* errorClassName(ErrorCategory category) {
  switch (category) {
    case ErrorCategory::kInvalidPlan:
      return "PlanError";
    case ErrorCategory::kInvalidArgument:
      return "InvalidArgumentError";
    case ErrorCategory::kTimeout:
      return "LoomTimeoutError";
    case ErrorCategory::kTransport:
      return "TransportError";
    case ErrorCategory::kCuda:
      return "CudaError";
    case ErrorCategory::kSystem:
      return "LoomSystemError";
  }
  return "LoomError";
}

void translate(std::exception_ptr pending) {
  try {
    if (pending) std::rethrow_exception(pending);
  } catch (const PlanError& error) {
    py::object cls = py::module_::import("loom.errors").attr("PlanError");
    py::object instance = cls(error.detail(), py::arg("path") = error.jsonPath(), py::arg("origin") = error.origin());
    PyErr_SetObject(cls.ptr(), instance.ptr());
  } catch (const Error& error) {
    py::object cls = py::module_::import("loom.errors").attr(errorClassName(error.category()));
    PyErr_SetObject(cls.ptr(), cls(error.what()).ptr());
  }
}

}  // namespace

void bindRuntime(py::module_& module) {
  py::register_exception_translator(&translate);
  module.def(
      "ibverbs_status",
      [] {
        IbverbsStatus status = ibverbsStatus();
        py::dict out;
        out["loaded"] = status.loaded;
        out["reason"] = status.reason;
        out["devices"] = status.devices;
        return out;
      },
      "Whether libibverbs could be opened at run time, why not, and the RDMA devices it lists.");
}

}  // namespace loom::python
