// loom._native.Executor: runs plans on the communicator's GPU or, for a host-only communicator, on
// host threads. Buffers arrive as addresses; loom.runtime.executor (Python) turns tensors and arrays into
// them and checks their shapes first.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "loom/data_type.hpp"
#include "loom/error.hpp"
#include "loom/executor.hpp"
#include "py_communicator.hpp"

namespace py = pybind11;

namespace loom::python {
namespace {

DataType parseDataType(const std::string& name) {
  if (auto type = dataTypeFromName(name)) return *type;
  throw Error(ErrorCategory::kInvalidArgument, "dtype: Loom cannot run '" + name +
                                                   "' (float32, float16, bfloat16, int32, uint32, float8_e4m3fn, "
                                                   "float8_e5m2)");
}

// (byte offset, bytes) per rank, as Python passes a counted call's sends and receives.
using EntryPairs = std::vector<std::pair<uint64_t, uint64_t>>;

// A counted call on buffers given by address, with its entries from Python's pairs.
CountedCall countedCallOf(uint64_t input, uint64_t inputBytes, uint64_t output, uint64_t outputBytes,
                          const EntryPairs& sends, const EntryPairs& receives) {
  CountedCall call;
  call.input = reinterpret_cast<const void*>(input);
  call.inputBytes = inputBytes;
  call.output = reinterpret_cast<void*>(output);
  call.outputBytes = outputBytes;
  for (const auto& [offset, bytes] : sends) call.sends.push_back({offset, bytes});
  for (const auto& [offset, bytes] : receives) call.receives.push_back({offset, bytes});
  return call;
}

}  // namespace

ReduceOp parseReduceOp(const std::string& name) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax}) {
    if (name == reduceOpName(op)) return op;
  }
  throw Error(ErrorCategory::kInvalidArgument, "op: expected 'sum', 'min' or 'max', got '" + name + "'");
}

void bindExecutor(py::module_& module) {
  py::class_<Executor, std::shared_ptr<Executor>>(module, "Executor", "Runs plans for one rank.")
      .def(py::init([](const PyCommunicator& communicator, const Executor* shareProxyOf) {
             py::gil_scoped_release release;
             return std::make_shared<Executor>(communicator.communicator, shareProxyOf);
           }),
           py::arg("communicator"), py::arg("share_proxy_of") = nullptr,
           "share_proxy_of: the executor of the communicator this one was split from; on the same device both "
           "use one proxy thread for their port channels")
      .def(
          "execute",
          [](Executor& executor, const Plan& plan, uint64_t input, uint64_t output, uint64_t messageBytes,
             const std::string& dtype, const std::string& op, uint64_t stream) {
            const DataType type = parseDataType(dtype);
            const ReduceOp reduce = parseReduceOp(op);
            py::gil_scoped_release release;
            executor.execute(plan, reinterpret_cast<const void*>(input), reinterpret_cast<void*>(output), messageBytes,
                             type, reduce, reinterpret_cast<void*>(stream));
          },
          py::arg("plan"), py::arg("input"), py::arg("output"), py::arg("message_bytes"), py::arg("dtype"),
          py::arg("op") = "sum", py::arg("stream") = 0,
          "One collective call on buffers given by address (see loom.Executor for tensors).")
      .def(
          "execute_counted",
          [](Executor& executor, const Plan& plan, uint64_t input, uint64_t inputBytes, uint64_t output,
             uint64_t outputBytes, const EntryPairs& sends, const EntryPairs& receives, uint64_t deviceEntries,
             uint64_t stream) {
            CountedCall call = countedCallOf(input, inputBytes, output, outputBytes, sends, receives);
            call.deviceEntries = reinterpret_cast<const MessageEntry*>(deviceEntries);
            py::gil_scoped_release release;
            executor.executeCounted(plan, call, reinterpret_cast<void*>(stream));
          },
          py::arg("plan"), py::arg("input"), py::arg("input_bytes"), py::arg("output"), py::arg("output_bytes"),
          py::arg("sends") = EntryPairs{}, py::arg("receives") = EntryPairs{}, py::arg("device_entries") = 0,
          py::arg("stream") = 0,
          "One counted call (an alltoallv plan) on buffers given by address: sends[p] and receives[q] are "
          "(byte offset, bytes) per rank, or device_entries the address of 2 x world size such uint64 pairs "
          "(sends, then receives) that the kernel reads when it runs.")
      .def_static(
          "execute_counted_group",
          [](const std::vector<py::tuple>& calls, uint64_t stream) {
            std::vector<GroupedCountedCall> group;
            for (size_t i = 0; i < calls.size(); ++i) {
              const py::tuple& t = calls[i];
              if (t.size() != 8) {
                throw py::value_error("calls[" + std::to_string(i) +
                                      "]: expected (executor, plan, input, input_bytes, output, output_bytes, sends, "
                                      "receives)");
              }
              group.push_back({t[0].cast<Executor*>(), t[1].cast<const Plan*>(),
                               countedCallOf(t[2].cast<uint64_t>(), t[3].cast<uint64_t>(), t[4].cast<uint64_t>(),
                                             t[5].cast<uint64_t>(), t[6].cast<EntryPairs>(), t[7].cast<EntryPairs>())});
            }
            py::gil_scoped_release release;
            Executor::executeCountedGroup(group, reinterpret_cast<void*>(stream));
          },
          py::arg("calls"), py::arg("stream") = 0,
          "Counted calls of two-rank plans on different executors of this rank as one launch "
          "(Executor::executeCountedGroup): each call (executor, plan, input, input_bytes, output, output_bytes, "
          "sends, receives), buffers by address.")
      .def(
          "copy_local",
          [](Executor& executor, uint64_t input, uint64_t output, uint64_t bytes, uint64_t stream) {
            py::gil_scoped_release release;
            executor.copyLocal(reinterpret_cast<const void*>(input), reinterpret_cast<void*>(output), bytes,
                               reinterpret_cast<void*>(stream));
          },
          py::arg("input"), py::arg("output"), py::arg("bytes"), py::arg("stream") = 0,
          "A copy between this rank's buffers (a call of a job of one rank, a send to itself) on the stream.")
      .def(
          "register_window",
          [](Executor& executor, uint64_t base, uint64_t bytes) {
            py::gil_scoped_release release;
            return executor.registerWindow(reinterpret_cast<void*>(base), bytes);
          },
          py::arg("base"), py::arg("bytes"),
          "Collective: this rank's bytes at base become a symmetric window (every rank registers one of the same "
          "bytes at the same call and uses it at the same offsets); calls on buffers in windows exchange no "
          "addresses. Returns the window's handle.")
      .def(
          "deregister_window",
          [](Executor& executor, uint64_t window) {
            py::gil_scoped_release release;
            executor.deregisterWindow(window);
          },
          py::arg("window"), "Collective: waits for the calls in flight and forgets the window.")
      .def(
          "abort",
          [](Executor& executor, int64_t waitMs) {
            py::gil_scoped_release release;
            return executor.abort(waitMs);
          },
          py::arg("wait_ms") = 5000,
          "Like ncclCommAbort: end a call in flight on another thread and free what the plans hold, without "
          "waiting for peers. False when the call in flight did not return within wait_ms.")
      .def(
          "async_error",
          [](const Executor& executor) -> std::optional<std::string> {
            std::optional<Error> error;
            {
              py::gil_scoped_release release;
              error = executor.asyncError();
            }
            if (!error) return std::nullopt;
            return std::string(error->what());
          },
          "What makes the communicator unusable, without waiting for a call in flight (ncclCommGetAsyncError): an "
          "earlier call's failure, else the ranks whose process is gone; None when nothing is known.")
      .def_property_readonly("on_gpu", &Executor::onGpu)
      .def_property_readonly(
          "tuned_machine",
          [](const Executor& e) {
            const TunedMachine machine = e.tunedMachine();
            py::dict out;
            out["backend"] = machine.backend;
            out["gpu"] = machine.gpu;
            out["gpus"] = machine.gpus;
            out["world_size"] = machine.worldSize;
            out["ranks_per_node"] = machine.ranksPerNode;
            return out;
          },
          "The machine as a tuned table names it: the table `loom tune` writes here, and the one loaded.")
      .def_property_readonly(
          "placement",
          [](const Executor& e) {
            const Placement placement = e.placement();
            return py::make_tuple(placement.ranksSharingGpu, placement.residentBlocks);
          },
          "Where this rank's plans run, for selection: (ranks sharing the GPU, interpreter blocks the GPU holds at "
          "once); 4294967295 blocks for no limit.")
      .def(
          "capturing", [](const Executor& e, uint64_t stream) { return e.capturing(reinterpret_cast<void*>(stream)); },
          py::arg("stream"), "Whether a CUDA graph is being captured on the stream (a cudaStream_t as int).")
      .def("stats", [](const Executor& executor) {
        ExecutorStats stats = executor.stats();
        py::dict out;
        out["plans_built"] = stats.plansBuilt;
        out["contexts_built"] = stats.contextsBuilt;
        out["specialized_transfers"] = stats.specializedTransfers;
        out["generic_transfers"] = stats.genericTransfers;
        out["inlined_contexts"] = stats.inlinedContexts;
        out["proxy_memories"] = stats.proxyMemories;
        out["proxy_sharers"] = stats.proxySharers;
        out["freed_buffer_contexts_dropped"] = stats.freedBufferContextsDropped;
        out["buffer_exchanges"] = stats.bufferExchanges;
        out["window_calls"] = stats.windowCalls;
        out["grouped_calls"] = stats.groupedCalls;
        out["launches"] = stats.launches;
        return out;
      });
  module.def(
      "plan_buffer_bytes",
      [](const Plan& plan, uint64_t messageBytes) {
        return py::make_tuple(messageBytes, planOutputBytes(plan, messageBytes));
      },
      py::arg("plan"), py::arg("message_bytes"), "(input bytes, output bytes) of one call.");
}

}  // namespace loom::python
