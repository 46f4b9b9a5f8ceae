#!/usr/bin/env bash
# Build the libFuzzer target for the plan decoder with clang (build-fuzz/) and run it for a bounded
# time (seconds, default 30), seeded with every plan in the repository. Crashes land in build-fuzz/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
cxx=$(command -v clang++-14 || command -v clang++)
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$cxx" -DLOOM_FUZZ=ON \
  -DLOOM_BUILD_PYTHON=OFF -DLOOM_BUILD_TESTS=OFF -DLOOM_ENABLE_CUDA=OFF >/dev/null
cmake --build build-fuzz -j 2 --target plan_decoder_fuzz
corpus=build-fuzz/corpus
rm -rf "$corpus" && mkdir -p "$corpus"
find examples plans tests/data -name '*.json' -size -64k -exec cp {} "$corpus"/ \; 2>/dev/null || true
cd build-fuzz
./tests/plan_decoder_fuzz -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
  -dict=../tests/fuzz/plan.dict -print_final_stats=1 corpus 2>&1 | tail -n 25
