#!/usr/bin/env bash
# How long the interpreter kernel itself runs, with nothing to wait for: rank 0 runs under Nsight
# Compute (kernels serialised, with host gaps between them), the other ranks run freely and so are
# always ahead, so rank 0 finds its peers' data already there. The kernel's duration is then the
# interpreter's own cost (program fetch, puts, the reduction, stores); the rest of a graph-replayed
# call is the launch gap and the wait for the peer. Single-pass metrics only: a replayed kernel would
# have its memory restored under peers that already wrote into it. For scale, the same metrics of a
# trivial kernel (a 16-element fill) are printed first.
#
#   bench/kernel_profile.sh PLAN_DIR FILTER BYTES OUT_CSV   (after scripts/device_build.sh's env)
set -euo pipefail
plans=$1 filter=$2 bytes=$3 out=$4
ncu=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
metrics=gpu__time_duration.sum,sm__cycles_elapsed.max
summarise() {
  python3 - "$1" "$2" <<'PY'
import csv, statistics, sys
rows = [r for r in csv.DictReader(line for line in open(sys.argv[1]) if line.startswith('"'))]
for metric in ("gpu__time_duration.sum", "sm__cycles_elapsed.max"):
    values = [float(r["Metric Value"].replace(",", "")) for r in rows if r["Metric Name"] == metric]
    if values:
        unit = next(r["Metric Unit"] for r in rows if r["Metric Name"] == metric)
        print(f"{sys.argv[2]}: {metric}: {len(values)} kernels, min {min(values):.0f}, median {statistics.median(values):.0f} {unit}")
PY
}
"$ncu" --kernel-name regex:elementwise --launch-count 50 --cache-control none --clock-control none --metrics $metrics \
  --csv --log-file "$out.fill" python3 -c "
import torch
x = torch.zeros(16, device='cuda')
for _ in range(60): x.fill_(1.0)
torch.cuda.synchronize()"
summarise "$out.fill" "16-element fill"
export LOOM_PROFILE_NCU=$ncu LOOM_PROFILE_OUT=$out LOOM_PROFILE_METRICS=$metrics
python3 -m loom.launch -n "${WORLD_SIZE:-2}" --timeout 170 --no-python bash -c '
  args=(tests/executor/gpu/drift_check.py --plans "$0" --filter "$1" --sizes "$2" --calls 100 --calls-per-graph 10)
  if [ "$RANK" = 0 ]; then
    exec "$LOOM_PROFILE_NCU" --kernel-name regex:interpret --launch-count 200 --cache-control none \
      --clock-control none --metrics "$LOOM_PROFILE_METRICS" --csv \
      --log-file "$LOOM_PROFILE_OUT" python3 "${args[@]}"
  fi
  exec python3 "${args[@]}"' "$plans" "$filter" "$bytes"
summarise "$out" "interpreter, $filter, $bytes B"
