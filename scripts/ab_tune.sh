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
    rm -rf .dev/ab && mkdir -p .dev/ab && git archive "$2" | tar -x -C .dev/ab --exclude=docs && echo "$2" >.dev/ab/BRANCH
    # A device call takes 64 MiB in all: the branch's docs stay behind, and of its bundled plans only those
    # that differ from HEAD's travel; the run copies the rest from this tree (.dev/ab/PLANS lists the branch's own).
    git ls-tree --name-only "$2" plans/default/ >.dev/ab/PLANS
    git diff --name-only --diff-filter=AM HEAD "$2" -- plans/default >.dev/ab/CHANGED_PLANS
    for plan in .dev/ab/plans/default/*; do
      grep -q -x -F "${plan#.dev/ab/}" .dev/ab/CHANGED_PLANS || rm -f "$plan"
    done
    echo "bundled plans: $(wc -l <.dev/ab/CHANGED_PLANS) differ from HEAD and travel, the rest are copied from this tree on the device"
    echo "prepared $2 in .dev/ab; carry .dev/ab with build/deps and build/pylibs"
    ;;
  run)
    [ -d .dev/ab ] || { echo "no .dev/ab: run 'scripts/ab_tune.sh prepare BRANCH' here first and carry it" >&2; exit 2; }
    dest=${OUT:-build-gpu/out}
    mkdir -p "$dest"
    read -r -a stages <<<"${AB_STAGES:-tune}"
    # The branch's script runs in .dev/ab: both sides take nccl-tests' sources from this tree.
    export LOOM_NCCL_TESTS_SRC=${LOOM_NCCL_TESTS_SRC:-$PWD/.dev/nccl-tests}
    mkdir -p .dev/ab/plans/default
    while read -r plan; do
      [ -e ".dev/ab/$plan" ] || cp "$plan" ".dev/ab/$plan"
    done <.dev/ab/PLANS
    # Both trees are built first, outside the sides' budgets: a cold build takes about 2.5 minutes, which
    # half of a call's budget barely covers (each side's own build then only finds it done). The rest of
    # BUDGET_S is split between the sides.
    bash scripts/device_build.sh >/dev/null 2>"$dest/build_before.log" || { tail -n 30 "$dest/build_before.log"; exit 1; }
    (cd .dev/ab && DEPS_PREFIX=$OLDPWD/build/deps PY_DEPS=$OLDPWD/build/pylibs bash scripts/device_build.sh) \
      >/dev/null 2>"$dest/build_after.log" || { tail -n 30 "$dest/build_after.log"; exit 1; }
    # AB_ROUNDS (default 1) alternates the sides that many times (before, after, before, ...): a slow spell of
    # the host then falls on both; round r's results are in OUT/before and OUT/after (r = 1) or OUT/before_r.
    rounds=${AB_ROUNDS:-1}
    share=${BUDGET_S:+$(((BUDGET_S - SECONDS) / (2 * rounds)))}
    echo "both trees built in $SECONDS s${share:+; each side gets $share s a round}"
    for ((round = 1; round <= rounds; round++)); do
      suffix=$([ "$round" -gt 1 ] && echo "_$round")
      OUT=$dest/before$suffix BUDGET_S=$share bash scripts/multi_gpu_run.sh "${stages[@]}"
      OUT=$dest/after$suffix BUDGET_S=$share DEPS_PREFIX=$PWD/build/deps PY_DEPS=$PWD/build/pylibs \
        bash .dev/ab/scripts/multi_gpu_run.sh "${stages[@]}"
      for side in before after; do tar -xzf "$dest/$side$suffix/multi_gpu_run.tar.gz" -C "$dest/$side$suffix"; done
    done
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
