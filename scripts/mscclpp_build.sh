#!/usr/bin/env bash
# Build MSCCL++ offline on a GPU host from build/mscclpp-deps (scripts/mscclpp_deps.sh), for sm_90 only,
# without InfiniBand, GDRCopy or Python bindings: its NCCL-compatible library (libmscclpp_nccl.so) and its
# executor's test driver (executor_test, when MPI is there), into build-mscclpp. Prints the library folder.
# MSCCLPP_CMAKE_ARGS adds CMake arguments (a toolkit without NVML's stub needs CUDA_nvml_LIBRARY).
set -euo pipefail
cd "$(dirname "$0")/.."
deps=$(realpath "${MSCCLPP_DEPS:-build/mscclpp-deps}")
archs=${MSCCLPP_GPU_ARCHS:-90}
work=build-mscclpp
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH="/usr/local/cuda/bin:$PATH"; fi
mkdir -p "$work/src"
[ -f "$work/src/CMakeLists.txt" ] || tar -xzf "$deps/mscclpp.tar.gz" -C "$work/src"
targets=(mscclpp_nccl)
tests=OFF
if command -v mpicxx >/dev/null || command -v mpicc >/dev/null; then
  tests=ON
  targets+=(executor_test)
fi
cmake -S "$work/src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DMSCCLPP_BYPASS_GPU_CHECK=ON -DMSCCLPP_USE_CUDA=ON "-DMSCCLPP_GPU_ARCHS=$archs" \
  -DMSCCLPP_USE_IB=OFF -DMSCCLPP_USE_GDRCOPY=OFF -DMSCCLPP_BUILD_PYTHON_BINDINGS=OFF \
  -DMSCCLPP_BUILD_TESTS=$tests "-DFETCHCONTENT_SOURCE_DIR_JSON=$deps/json" -DFETCHCONTENT_FULLY_DISCONNECTED=ON \
  "-DNUMA_ROOT_DIR=$deps/usr" "-DNUMA_INCLUDE_DIR=$deps/usr/include" \
  "-DNUMA_LIB_DIR=$deps/usr/lib/x86_64-linux-gnu" ${MSCCLPP_CMAKE_ARGS:-} >&2
cmake --build "$work/build" --target "${targets[@]}" >&2
echo "$PWD/$work/build/lib"
