#!/usr/bin/env bash
# Prepare, on this (networked) machine, what a lent GPU machine lacks to build and test Loom; it has
# nvcc, CMake, ninja, PyTorch and pytest but no internet. Run `run` with carry
# ["build/deps", "build/pylibs"] and, in the command, `eval "$(bash scripts/device_build.sh)"`.
#   build/deps    the Debian packages the build needs beyond the image (simdjson, libibverbs headers),
#                 unpacked with dpkg -x (DEPS_PREFIX of scripts/device_build.sh), and GoogleTest's sources
#                 (googletest: multi_gpu_run.sh's runtime stage builds them for the runtime's GPU tests)
#   build/pylibs  the Python packages the image lacks (lark, pytest-timeout; jsonschema and its dependencies for the
#                 schema checks), as wheels for the image's Python unpacked there (PY_DEPS)
# PY_VERSION is the image's Python (default 3.12: docs of the device tool). nccl-tests, for the
# nccl-tests GPU tests and scripts/multi_gpu_run.sh, is not fetched here: put a checkout (or a
# `git archive` of github.com/NVIDIA/nccl-tests) in .dev/nccl-tests, carry it, and point
# LOOM_NCCL_TESTS_SRC at it (multi_gpu_run.sh does by default).
set -euo pipefail
cd "$(dirname "$0")/.."
python_version=${PY_VERSION:-3.12}
rm -rf build/deps build/pylibs build/deps-debs build/pylibs-wheels
mkdir -p build/deps build/pylibs build/deps-debs build/pylibs-wheels
(cd build/deps-debs && apt-get download -q libsimdjson-dev libsimdjson14 libibverbs-dev libibverbs1 googletest >/dev/null)
for deb in build/deps-debs/*.deb; do dpkg -x "$deb" build/deps; done
mv build/deps/usr/src/googletest build/deps/googletest && rm -rf build/deps/usr/src
download() { python3 -m pip download -q --only-binary=:all: --python-version "$python_version" --dest build/pylibs-wheels "$@"; }
# shellcheck disable=SC2046
download $(grep -E '^(jsonschema|lark)==' scripts/requirements-dev.txt)
# the plugin alone: the image's pytest stays the one that runs
# shellcheck disable=SC2046
download --no-deps $(grep -E '^pytest-timeout==' scripts/requirements-dev.txt)
for wheel in build/pylibs-wheels/*.whl; do python3 -m zipfile -e "$wheel" build/pylibs; done
rm -rf build/deps-debs build/pylibs-wheels
du -sh build/deps build/pylibs
