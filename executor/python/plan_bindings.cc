#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>

#include "bindings.hpp"
#include "loom/plan.hpp"

namespace py = pybind11;

namespace loom::python {
namespace {

py::dict summaryDict(const Plan& plan) {
  PlanSummary summary = summarize(plan);
  py::dict ops;
  for (size_t i = 0; i < kOpTypeCount; ++i) {
    if (summary.opsByType[i] != 0) ops[py::str(std::string(opTypeName(static_cast<OpType>(i))))] = summary.opsByType[i];
  }
  py::dict out;
  out["ops_by_type"] = ops;
  out["threadblocks"] = summary.threadblocks;
  out["max_threadblocks_per_rank"] = summary.maxThreadblocksPerRank;
  out["max_scratch_chunks"] = summary.maxScratchChunks;
  out["channels"] = summary.channels;
  return out;
}

py::list gpuList(const Plan& plan) {
  py::list out;
  for (const GpuProgram& gpu : plan.gpus) {
    py::dict item;
    item["rank"] = gpu.rank;
    item["input_chunks"] = gpu.inputChunks;
    item["output_chunks"] = gpu.outputChunks;
    item["scratch_chunks"] = gpu.scratchChunks;
    item["channels"] = gpu.channels.size();
    item["semaphores"] = gpu.semaphores.size();
    item["threadblocks"] = gpu.threadblocks.size();
    out.append(item);
  }
  return out;
}

}  // namespace

void bindPlan(py::module_& module) {
  // Held by shared_ptr: the registry shares a registered plan instead of copying it.
  py::class_<Plan, std::shared_ptr<Plan>>(module, "Plan", "A decoded and checked execution plan (format v1).")
      .def_static("load", &Plan::load, py::arg("path"),
                  "Read, decode and check a plan file; raises loom.PlanError naming the JSON path of the first "
                  "problem.")
      .def_static("parse", &Plan::parse, py::arg("text"), py::arg("origin") = "<memory>",
                  "Decode and check plan JSON text.")
      .def_readonly("name", &Plan::name)
      .def_property_readonly("collective", [](const Plan& p) { return std::string(collectiveName(p.collective)); })
      .def_property_readonly("protocol", [](const Plan& p) { return std::string(protocolName(p.protocol)); })
      .def_readonly("inplace", &Plan::inplace)
      .def_readonly("world_size", &Plan::worldSize)
      .def_readonly("ranks_per_node", &Plan::ranksPerNode)
      .def_readonly("threads_per_block", &Plan::threadsPerBlock)
      .def_readonly("min_message_bytes", &Plan::minMessageBytes)
      .def_readonly("max_message_bytes", &Plan::maxMessageBytes)
      .def_readonly("alignment_bytes", &Plan::alignmentBytes)
      .def_readonly("reuse_scratch", &Plan::reuseScratch)
      .def_readonly("root", &Plan::root)
      .def_readonly("text", &Plan::text, "The JSON text the plan was decoded from.")
      .def_property_readonly("compiler_version", [](const Plan& p) { return p.metadata.compilerVersion; })
      .def_property_readonly("source_hash", [](const Plan& p) { return p.metadata.sourceHash; })
      .def_property_readonly("gpus", &gpuList, "Per rank: chunk counts and numbers of channels and thread blocks.")
      .def("summary", &summaryDict, "Ops by type (pipeline bodies included), thread blocks, channels, scratch.")
      .def("__repr__", [](const Plan& p) {
        return "<loom.Plan '" + p.name + "' " + std::string(collectiveName(p.collective)) + " " +
               std::to_string(p.worldSize) + " ranks, " + std::string(protocolName(p.protocol)) + ">";
      });
  module.attr("DEFAULT_MAX_PLAN_BYTES") = kDefaultMaxPlanBytes;
}

}  // namespace loom::python
