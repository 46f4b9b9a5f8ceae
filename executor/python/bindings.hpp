#pragma once

#include <pybind11/pybind11.h>

namespace loom::python {

void bindRuntime(pybind11::module_& module);  // errors, ibverbs status
void bindPlan(pybind11::module_& module);     // loom.Plan

}  // namespace loom::python
