#pragma once

// The interpreter kernels of one (data type, operator), as the host-side entry points that
// cudaLaunchKernelExC and the occupancy queries take. Each data type's kernels live in a translation unit
// of their own (generated from interpreter_kernels.cu.in: executor/CMakeLists.txt), so that nvcc compiles
// the 21 instances of each kernel side by side rather than in one file.

#include "loom/data_type.hpp"
#include "loom/plan.hpp"

namespace loom {

struct InterpreterKernels {
  const void* interpret = nullptr;  // Program's tables, blocks of up to 1024 threads
  const void* narrow = nullptr;     // the same, blocks of up to 512 (two units per step)
  const void* inlined = nullptr;    // a specialised program in the parameters (the fast path)
};

// One function per data type, each defined in its generated file.
InterpreterKernels interpreterKernelsFloat32(ReduceOp op);
InterpreterKernels interpreterKernelsFloat16(ReduceOp op);
InterpreterKernels interpreterKernelsBFloat16(ReduceOp op);
InterpreterKernels interpreterKernelsInt32(ReduceOp op);
InterpreterKernels interpreterKernelsUInt32(ReduceOp op);
InterpreterKernels interpreterKernelsFloat8E4M3(ReduceOp op);
InterpreterKernels interpreterKernelsFloat8E5M2(ReduceOp op);

}  // namespace loom
