#!/usr/bin/env bash
# A/B of a branch against this tree on a GPU host: the tune stage of scripts/multi_gpu_run.sh (every
# candidate plan timed at every size, NCCL beside it) run in this tree and then in the branch's, on the
# same warm machine, and `bench/tune_plans.py compare` of the two runs.
#
#   scripts/ab_tune.sh prepare BRANCH   # here: the branch's tree into .dev/ab (git archive), to carry
#   scripts/ab_tune.sh run              # on the GPU host (GPUS, BUDGET_S as multi_gpu_run.sh): both tunes,
#                                       # OUT/before, OUT/after and OUT/compare.md
#
# AB_STAGES (default tune) runs other stages of multi_gpu_run.sh on both sides instead, e.g.
# AB_STAGES="fast nccl-bench" for a fast-path change; compare.md is written for the tune stage only.
#
# Device call: carry build/deps, build/pylibs and .dev/ab (and .dev/nccl-tests for the nccl stages). Both
# trees are built before either side runs (about 2.5 minutes each on a fresh machine), and what is left of
# BUDGET_S is split between the sides.
set -uo pipefail
cd "$(dirname "$0")/.." || exit
case ${1:-} in
  prepare)
    [ -n "${2:-}" ] || { echo "usage: scripts/ab_tune.sh prepare BRANCH" >&2; exit 2; }
    rm -rf .dev/ab && mkdir -p .dev/ab && git archive "$2" | tar -x -C .dev/ab && echo "$2" >.dev/ab/BRANCH
    # Bundled plans the branch does not change stay out of the carry (a device call takes 64 MiB in all):
    # the run copies this tree's.
    if git diff --quiet HEAD "$2" -- plans/default; then
      rm -rf .dev/ab/plans/default
      echo "plans/default as in HEAD: left out, copied from this tree on the device"
    fi
    echo "prepared $2 in .dev/ab; carry .dev/ab with build/deps and build/pylibs"
    ;;
  run)
    [ -d .dev/ab ] || { echo "no .dev/ab: run 'scripts/ab_tune.sh prepare BRANCH' here first and carry it" >&2; exit 2; }
    dest=${OUT:-build-gpu/out}
    mkdir -p "$dest"
    read -r -a stages <<<"${AB_STAGES:-tune}"
    # The branch's script runs in .dev/ab: both sides take nccl-tests' sources from this tree.
    export LOOM_NCCL_TESTS_SRC=${LOOM_NCCL_TESTS_SRC:-$PWD/.dev/nccl-tests}
    [ -d .dev/ab/plans/default ] || cp -r plans/default .dev/ab/plans/default
    # Both trees are built first, outside the sides' budgets: a cold build takes about 2.5 minutes, which
    # half of a call's budget barely covers (each side's own build then only finds it done). The rest of
    # BUDGET_S is split between the sides.
    bash scripts/device_build.sh >/dev/null 2>"$dest/build_before.log" || { tail -n 30 "$dest/build_before.log"; exit 1; }
    (cd .dev/ab && DEPS_PREFIX=$OLDPWD/build/deps PY_DEPS=$OLDPWD/build/pylibs bash scripts/device_build.sh) \
      >/dev/null 2>"$dest/build_after.log" || { tail -n 30 "$dest/build_after.log"; exit 1; }
    half=${BUDGET_S:+$(((BUDGET_S - SECONDS) / 2))}
    echo "both trees built in $SECONDS s${half:+; each side gets $half s}"
    OUT=$dest/before BUDGET_S=$half bash scripts/multi_gpu_run.sh "${stages[@]}"
    OUT=$dest/after BUDGET_S=$half DEPS_PREFIX=$PWD/build/deps PY_DEPS=$PWD/build/pylibs \
      bash .dev/ab/scripts/multi_gpu_run.sh "${stages[@]}"
    for side in before after; do tar -xzf "$dest/$side/multi_gpu_run.tar.gz" -C "$dest/$side"; done
    gpus=${GPUS:-$(nvidia-smi -L | grep -c '^GPU')}
    # Other stages than tune: both sides' logs and results are in OUT/before and OUT/after to compare.
    [ -e "$dest/before/candidates_${gpus}r.json" ] || exit 0
    {
      echo "A/B: this tree (before) against $(cat .dev/ab/BRANCH 2>/dev/null || echo .dev/ab) (after), ${gpus} GPUs"
      PYTHONPATH=$PWD/compiler:$PWD/build/pylibs python3 bench/tune_plans.py compare "$dest/before/candidates_${gpus}r.json" "$dest/after/candidates_${gpus}r.json"
    } >"$dest/compare.md"
    cat "$dest/compare.md"
    ;;
  *)
    echo "usage: scripts/ab_tune.sh prepare BRANCH | run" >&2
    exit 2
    ;;
esac
