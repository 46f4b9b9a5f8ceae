// loom._native: the C++ runtime and executor, bound for Python. The pure-Python `loom` package
// imports it lazily so that the compiler works without it.

#include <pybind11/pybind11.h>

#include "bindings.hpp"

PYBIND11_MODULE(_native, module) {
  module.doc() = "Loom native runtime and executor";
  loom::python::bindRuntime(module);
  loom::python::bindPlan(module);
  loom::python::bindBootstrap(module);
  loom::python::bindCommunicator(module);
  loom::python::bindExecutor(module);
  loom::python::bindRegistry(module);
}
