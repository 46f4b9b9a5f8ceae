#!/usr/bin/env bash
# Build the Python package with its native module on a GPU host where Debian packages cannot be
# installed: DEPS_PREFIX (default build/deps) holds simdjson and the libibverbs headers unpacked
# (dpkg -x), PY_DEPS (default build/pylibs) Python packages the host lacks: lark, and for the pytest
# GPU tests jsonschema with its dependencies (pip download --python-version of the host, unzipped). Installs into
# build-gpu/site; prints the PYTHONPATH and LD_LIBRARY_PATH to use. Tests are not built here.
# scripts/device_deps.sh prepares both folders on a machine with internet.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=$(realpath "${DEPS_PREFIX:-build/deps}")
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH="/usr/local/cuda/bin:$PATH"; fi
export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
python3 -m pip install --no-build-isolation --no-deps --upgrade --target build-gpu/site -Cbuild-dir=build-gpu \
  -Ccmake.build-type=Release "-Ccmake.define.CMAKE_PREFIX_PATH=$prefix/usr" \
  "-Ccmake.define.LOOM_IBVERBS_INCLUDE_DIR=$prefix/usr/include" . >&2
echo "export PYTHONPATH=$PWD/build-gpu/site:$(realpath "${PY_DEPS:-build/pylibs}") LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
