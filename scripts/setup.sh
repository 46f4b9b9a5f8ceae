#!/usr/bin/env bash
# Set up Loom on a fresh Debian 12 machine: system packages (apt-get), a virtual environment in .venv
# with the pinned Python packages, then the CMake build (build/, C++ tests included) installed into
# .venv in editable mode, then the bundled default plans copied into the cache directory (loom
# install-plans). Safe to run again. PYTHON picks the interpreter (default: python3).
set -euo pipefail
cd "$(dirname "$0")/.."

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi

echo "== system packages"
mapfile -t packages < <(grep -v '^\s*#' scripts/apt-packages.txt | grep -v '^\s*$')
missing=()
for package in "${packages[@]}"; do
  name="${package%%=*}"
  want="${package#*=}"
  have=$(dpkg-query -W -f='${Version}' "$name" 2>/dev/null || true)
  if [ -z "$have" ] || { [ "$want" != "$package" ] && [ "$want" != "$have" ]; }; then missing+=("$package"); fi
done
if [ ${#missing[@]} -gt 0 ]; then
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

echo "== python environment (.venv)"
python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then "$python" -m venv .venv; fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -r scripts/requirements-dev.txt

echo "== build and install (build/)"
# nvcc is optional; when the CUDA toolkit is in its usual place, let CMake find it.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH="/usr/local/cuda/bin:$PATH"; fi
.venv/bin/python -m pip install -q --no-build-isolation -e . \
  -Cbuild-dir=build -Ccmake.define.LOOM_BUILD_TESTS=ON -Ccmake.build-type=Release
echo "== default plans (<cache root>/default: \$LOOM_CACHE_DIR, else ~/.cache/loom)"
.venv/bin/loom install-plans
echo "== ready: $(.venv/bin/loom --version); activate with 'source .venv/bin/activate'"
