#!/usr/bin/env bash
# Build Loom with CUDA (sm_90 by default) on a GPU host and run every test there: the C++ unit tests
# and the Python tests, GPU-marked ones included. For hosts where packages cannot be installed,
# DEPS_PREFIX names a folder with the Debian packages unpacked into it (dpkg -x PKG.deb DEPS_PREFIX);
# Python packages then come from PYTHONPATH. Logs go to LOG_DIR (default build-gpu/logs).
set -uo pipefail
cd "$(dirname "$0")/.."
prefix=${DEPS_PREFIX:-}
logs=${LOG_DIR:-build-gpu/logs}
site=${LOOM_SITE:-$PWD/build-gpu/site}
mkdir -p "$logs"
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH="/usr/local/cuda/bin:$PATH"; fi
defines=(-Cbuild-dir=build-gpu -Ccmake.define.LOOM_BUILD_TESTS=ON -Ccmake.build-type=Release)
if [ -n "$prefix" ]; then
  defines+=("-Ccmake.define.CMAKE_PREFIX_PATH=$prefix/usr" "-Ccmake.define.LOOM_IBVERBS_INCLUDE_DIR=$prefix/usr/include")
  export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv 2>&1 | tee "$logs/gpus.txt"
nvcc --version | tail -n 2

failed=()
echo "== build (pip install into $site)"
if ! python3 -m pip install --no-build-isolation --no-deps --upgrade --target "$site" "${defines[@]}" . \
  >"$logs/build.log" 2>&1; then
  tail -n 40 "$logs/build.log"
  exit 1
fi
grep -E "CUDA compiler|architectures" "$logs/build.log" | head -n 3
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
export LOOM_BUILD_DIR="$PWD/build-gpu"  # where tests/runtime/test_runtime_gpu.py finds the GPU programs

echo "== C++ unit tests"
ctest --test-dir build-gpu --output-on-failure -j 8 >"$logs/ctest.log" 2>&1 || failed+=(ctest)
tail -n 3 "$logs/ctest.log"
echo "== Python tests"
python3 -m pytest -q -p no:cacheprovider tests >"$logs/pytest.log" 2>&1 || failed+=(pytest)
tail -n 15 "$logs/pytest.log"
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${failed[*]}"
  exit 1
fi
