#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "loom/plan.hpp"

namespace loom::python {

void bindRuntime(pybind11::module_& module);    // errors, ibverbs status
void bindPlan(pybind11::module_& module);       // loom.Plan
void bindBootstrap(pybind11::module_& module);  // UniqueId, Bootstrap, launch_environment()
void bindCommunicator(pybind11::module_& module);  // Communicator, RegisteredMemory, Connection
void bindExecutor(pybind11::module_& module);      // Executor
void bindRegistry(pybind11::module_& module);      // the plan registry and selector

// "sum", "min" or "max"; anything else is an InvalidArgument error naming the argument `op`.
ReduceOp parseReduceOp(const std::string& name);

}  // namespace loom::python
