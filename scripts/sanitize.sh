#!/usr/bin/env bash
# Build the native libraries and C++ unit tests with AddressSanitizer + UBSan (build-asan/) and run them.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DLOOM_SANITIZE=ON -DLOOM_BUILD_PYTHON=OFF \
  -DLOOM_ENABLE_CUDA=OFF -DLOOM_BUILD_TESTS=ON >/dev/null
cmake --build build-asan -j 2
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j 2
