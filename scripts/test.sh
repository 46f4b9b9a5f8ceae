#!/usr/bin/env bash
# Every test Loom has, in one command (README command 2; .ci/run calls it after set-up):
#   ruff lint and format checks, C++ unit tests (ctest on build/), the decoder tests again under AddressSanitizer + UBSan,
#   a bounded libFuzzer run on the plan decoder, then the Python tests (pytest). GPU tests skip
#   with a reason when no GPU is present. --quick leaves out the sanitizer and fuzz builds.
# FUZZ_SECONDS sets the fuzzing time (default 30).
set -uo pipefail
cd "$(dirname "$0")/.."
python=.venv/bin/python
if [ ! -x "$python" ]; then echo "no .venv: run 'bash scripts/setup.sh' first" >&2; exit 2; fi
quick=0
if [ "${1:-}" = "--quick" ]; then quick=1; fi

failed=()
step() {
  local name=$1
  shift
  echo "== $name"
  if ! "$@"; then failed+=("$name"); fi
}

step "lint (ruff)" "$python" -m ruff check compiler tests bench
step "format (ruff)" "$python" -m ruff format --check --quiet compiler tests bench
step "C++ unit tests" ctest --test-dir build --output-on-failure -j 2
if [ $quick -eq 0 ]; then
  step "C++ unit tests under ASan+UBSan" bash scripts/sanitize.sh
  step "plan decoder fuzzing (${FUZZ_SECONDS:-30} s)" bash scripts/fuzz.sh "${FUZZ_SECONDS:-30}"
fi
step "Python tests" "$python" -m pytest -q tests

if [ ${#failed[@]} -gt 0 ]; then
  printf 'FAILED: %s\n' "${failed[@]}" >&2
  exit 1
fi
