#!/usr/bin/env bash
# Issues 20 and 21's runs on a host with 2 or more GPUs (GPUS, default all visible), one stage per
# call (each fits a 10-minute device call), logs and results packed into OUT/multi_gpu_run.tar.gz (OUT
# defaults to build-gpu/out). Needs build/deps and
# build/pylibs (scripts/device_deps.sh) and, for the nccl stages, nccl-tests' sources in
# LOOM_NCCL_TESTS_SRC (default .dev/nccl-tests: `git archive` of github.com/NVIDIA/nccl-tests).
#
#   scripts/multi_gpu_run.sh check   # every GPU check at 2 and 4 ranks (executor), 3 to 16 sharing GPU 0 (shared)
#   scripts/multi_gpu_run.sh nccl    # libloom_nccl.so under torchrun; nccl-tests with MPI, 0 wrong, 8 B - 1 GiB;
#                                    # compute-sanitizer on plan checks (nccl-only and sanitizer: either half)
#   scripts/multi_gpu_run.sh bench   # collective_bench (graph, eager reused and fresh; generic path too), demo
#                                    # (bench-graph, bench-eager, bench-generic, demo: one part each)
#   scripts/multi_gpu_run.sh comms       # splits and one process driving every GPU (issue 38); COMMS_CASES and
#                                        # SPLIT_CASES narrow its one-process and shared-GPU steps
#   scripts/multi_gpu_run.sh nccl-bench  # bench/nccl_bench.py: torch and nccl-tests, NCCL beside the library
#   scripts/multi_gpu_run.sh split-bench # bench/nccl_bench.py --split: a split group's all-reduce beside the default's
#   scripts/multi_gpu_run.sh runtime     # the runtime's GPU tests (tests/runtime/test_runtime_gpu.py), GoogleTest built first
#   scripts/multi_gpu_run.sh peers       # bench/peers.py: NCCL, torch symmetric memory and Loom in the same processes
#   scripts/multi_gpu_run.sh alltoallv   # all-to-all-v and symmetric windows on every GPU and with 4 and 8 ranks sharing GPU 0 (issue 39)
#   scripts/multi_gpu_run.sh p2p-check   # send/recv through the library: torch pipeline, MoE, nccl-tests (issue 39)
#   scripts/multi_gpu_run.sh faults      # abort, a killed rank, recovery on GPUs; a killed rank under torch (issue 41)
#   scripts/multi_gpu_run.sh p2p         # bench/p2p_bench.py: send/recv, exchange and all-to-all-v, NCCL beside the library
#   scripts/multi_gpu_run.sh mscclpp     # MSCCL++ built offline (scripts/mscclpp_build.sh, 2.5 min on an H200 host), its NCCL
#                                        # library a peer in bench/peers.py and under nccl-tests (bench/nccl_tests_peers.py),
#                                        # its executor beside Loom's on its own plan files (bench/executor_peers.py); more
#                                        # than one call holds: SKIP_STEPS picks the steps of each (the build is kept while warm)
#   scripts/multi_gpu_run.sh split-latency # bench/nccl_split_latency.py: parent and split through the NCCL API, no torch.distributed
#   scripts/multi_gpu_run.sh profile     # bench/kernel_profile.sh: the 1 KiB all-reduce kernel, generic and fast
#   scripts/multi_gpu_run.sh fast        # fast path: bit for bit, drift, API, sanitizers; graph replay to 1 MiB
#   scripts/multi_gpu_run.sh launch-overlap  # graph replay and eager to 1 MiB, LOOM_PDL=0 and 1 interleaved
#   scripts/multi_gpu_run.sh small-allreduce # graph-replayed all-reduce 1 - 64 KiB, NCCL in turns (issue 11's 0.4x)
#   scripts/multi_gpu_run.sh nvlink      # bench/nvlink_ceiling.py: SM stores, SM loads and copy engines, mesh and ring
#   scripts/multi_gpu_run.sh tune        # bench/tune_plans.py: candidates timed at every size, the table they pick
#   scripts/multi_gpu_run.sh apply       # that table written into tuned_sizes.json, the bundled plans rebuilt
#
# Several stages run in one call in the order given (check is executor and shared; each builds first).
# CASES, a pytest -k expression, narrows the executor stage, SHARED_CASES the shared one: CASES="not 2_gpus"
# on a host of 4 or 8 GPUs runs only the cases that need more than 2 (the 2-GPU ones are issue 20's run). BUDGET_S, the seconds
# the whole call may take, shortens the steps so that the results are packed before it ends.
# TUNE_COLLECTIVES narrows the tune stage (default allreduce,allgather,reducescatter,alltoall; reduce tunes reduce_packet and reduce_read).
set -uo pipefail
cd "$(dirname "$0")/.." || exit
[ $# -gt 0 ] || { echo "stages: check (executor, shared), nccl, bench, nccl-bench, fast, tune, apply, profile" >&2; exit 2; }
# Everything the stages write goes to build-gpu/run and is packed into one archive in OUT at the end
# (a device call brings back only a few files); build-gpu/run stays for a later look on the same host.
dest=${OUT:-build-gpu/out}
out=$PWD/build-gpu/run
rm -rf "$out"
mkdir -p "$out" "$dest"
trap 'tar -czf "$dest/multi_gpu_run.tar.gz" -C "$out" .' EXIT
trap 'exit 143' TERM INT
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
export LOOM_NCCL_TESTS_SRC=${LOOM_NCCL_TESTS_SRC:-$PWD/.dev/nccl-tests}
gpus=${GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv >"$out/gpus.txt" 2>&1
eval "$(bash scripts/device_build.sh 2>"$out/build.log")" || { tail -n 40 "$out/build.log"; exit 1; }
export LOOM_BUILD_DIR=$PWD/build-gpu
python3 -c "import torch; print('torch', torch.__version__, 'NCCL', torch.cuda.nccl.version())" >"$out/versions.txt"
# hypothesis's plugin (installed on the GPU hosts, unused here) imports hypothesis at the session's end: seconds that a
# step's time limit once cut into after every test had passed.
pytest=(python3 -m pytest -q -p no:cacheprovider -p no:hypothesispytest -m gpu --timeout 420 -rs)
status=0
step() {  # step NAME SECONDS COMMAND...: run with a time limit, log to OUT/NAME.log, print the tail
  local name=$1 limit=$2
  shift 2
  # SKIP_STEPS, a bash regex of step names, leaves steps out (a rerun of what failed in a stage).
  if [ -n "${SKIP_STEPS:-}" ] && [[ $name =~ ^(${SKIP_STEPS})$ ]]; then
    echo "== $name: skipped (SKIP_STEPS)"
    return
  fi
  if [ -n "${BUDGET_S:-}" ]; then
    # A timeout around this script waits for the running step (bash defers its trap), so each step gets at
    # most what is left of BUDGET_S, less 20 s to pack the results.
    local left=$((BUDGET_S - SECONDS - 20))
    [ "$left" -lt "$limit" ] && limit=$left
    if [ "$limit" -le 0 ]; then
      echo "== $name: not run, BUDGET_S=$BUDGET_S spent"
      status=1
      return
    fi
  fi
  local start=$SECONDS
  timeout -s INT -k 20 "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  echo "== $name: exit $rc in $((SECONDS - start)) s"
  tail -n 6 "$out/$name.log"
  [ $rc -eq 0 ] || status=1
}
tuned_plans() {  # once per call
  [ -e "$out/tuned_plans.log" ] ||
    python3 bench/tuned_plans.py --world-size "$gpus" --out build-gpu/tuned_plans >"$out/tuned_plans.log" 2>&1
}
stages=()
for stage in "$@"; do
  case $stage in
    check) stages+=(executor shared) ;;
    nccl) stages+=(nccl sanitizer) ;;
    bench) stages+=(bench-graph bench-eager bench-generic demo) ;;
    nccl-only) stages+=(nccl) ;;
    *) stages+=("$stage") ;;
  esac
done
for stage in "${stages[@]}"; do
case $stage in
  executor)
    step executor_gpu 420 "${pytest[@]}" --durations=0 tests/executor/test_executor_gpu.py \
      -k "not sanitizer${CASES:+ and ($CASES)}" \
      tests/executor/test_world_size_one.py
    ;;
  shared)
    step shared_gpu 400 "${pytest[@]}" tests/executor/test_shared_gpu.py \
      -k "${SHARED_CASES:-fast_and_generic or bundled_plan or sized_in_bytes}"
    ;;
  nccl)
    step nccl_torch 150 "${pytest[@]}" tests/nccl/test_nccl_gpu.py
    step nccl_tests 300 "${pytest[@]}" -s tests/nccl/test_nccl_tests_multi_gpu.py
    ;;
  comms)
    # Issue 38: communicators a real job makes. One process driving every GPU (CuPy initAll, nccl-tests -g N),
    # a torch parallel job (DeviceMesh splits, HSDP, TP, DDP) against plain NCCL, and split groups on GPU 0.
    step nccl_one_process 300 "${pytest[@]}" -s tests/nccl/test_nccl_one_process_gpu.py -k "${COMMS_CASES:-cupy or nccl_tests}"
    step nccl_parallel 240 "${pytest[@]}" -s tests/nccl/test_nccl_parallel_gpu.py
    step shared_split 240 "${pytest[@]}" tests/executor/test_shared_gpu.py -k "split_groups${SPLIT_CASES:+ and ($SPLIT_CASES)}"
    # nccl-tests over the library with 4 ranks on GPU 0, and 3 whose plans the JIT compiles at ncclGroupEnd.
    step nccl_shared 300 "${pytest[@]}" -s tests/nccl/test_nccl_tests_shared_gpu.py
    # A split group and its parent on one proxy per rank: port-channel all-to-alls in turns, one GPU per rank.
    colors=$(printf '0,%.0s' $(seq "$gpus")) && colors=${colors%,}
    step split_port 150 env CUDA_MODULE_LOADING=EAGER python3 -m loom.launch -n "$gpus" --timeout 120 \
      tests/executor/gpu/subgroup_check.py --colors "$colors" --port-plans --sizes 1000
    ;;
  sanitizer)
    step sanitizer 150 "${pytest[@]}" tests/executor/test_executor_gpu.py -k sanitizer
    ;;
  bench-graph | bench-eager | bench-generic)
    tuned_plans
    # Up to 16 MiB each size is timed 3 times more, NCCL and Loom in turns (medians): a slow spell of the
    # host then falls on both alike (eager calls' host times moved by 10 us between sizes on 2 x H200).
    launch=(python3 -m loom.launch -n "$gpus" --timeout 200 bench/collective_bench.py --plans build-gpu/tuned_plans
      --refine 1 --refine-rounds 3)
    # All-to-all too from 4 GPUs (issue 21); at 2 it is a plain exchange.
    [ "$gpus" -ge 4 ] && launch+=(--collectives allreduce,allgather,reducescatter,alltoall)
    case $stage in
      bench-graph) step bench_graph 170 "${launch[@]}" --mode graph --out "$out/bench_graph.json" ;;
      bench-eager)
        step bench_eager-reused 120 "${launch[@]}" --mode eager-reused --out "$out/bench_eager-reused.json"
        step bench_eager-fresh 120 "${launch[@]}" --mode eager-fresh --out "$out/bench_eager-fresh.json"
        ;;
      bench-generic)
        LOOM_FAST_PATH=0 step bench_graph_generic 120 "${launch[@]}" --mode graph --max-bytes 1048576 \
          --out "$out/bench_graph_generic.json"
        ;;
    esac
    ;;
  demo)
    step demo 60 python3 -m loom demo
    ;;
  fast)
    # The fast path against the generic one: bit for bit (2 GPUs and ranks sharing GPU 0), drift and
    # the collective API on it, the sanitizers on its kernels, and graph replay up to 1 MiB both ways.
    step fast_gpu 300 "${pytest[@]}" tests/executor/test_executor_gpu.py tests/executor/test_shared_gpu.py \
      -k "fast_and_generic or (sanitizer and fast and not 4_rank)"
    LOOM_FAST_PATH=1 step fast_drift_api 150 "${pytest[@]}" tests/executor/test_executor_gpu.py -k "drift or collective_api"
    tuned_plans
    small=(python3 -m loom.launch -n "$gpus" --timeout 100 bench/collective_bench.py --plans build-gpu/tuned_plans
      --max-bytes 1048576 --mode graph)
    LOOM_FAST_PATH=0 step bench_small_generic 100 "${small[@]}" --out "$out/bench_small_generic.json"
    LOOM_FAST_PATH=1 step bench_small_fast 100 "${small[@]}" --out "$out/bench_small_fast.json"
    ;;
  small-allreduce)
    # Issue 11's small-size targets alone (a kernel change's A/B): 5 rounds in turns with NCCL, medians.
    tuned_plans
    step small_allreduce 120 python3 -m loom.launch -n "$gpus" --timeout 100 bench/collective_bench.py \
      --plans build-gpu/tuned_plans --collectives allreduce --max-bytes 65536 --mode graph --refine 1 \
      --refine-rounds 5 --out "$out/small_allreduce.json"
    ;;
  nvlink)
    # What the GPUs move without Loom or NCCL, by pattern (the ceiling of the large-message plans).
    step nvlink 150 python3 bench/nvlink_ceiling.py --out "$out/nvlink.json"
    ;;
  launch-overlap)
    # Programmatic dependent launch (docs/executor.md) off and on, interleaved twice: graph replay and
    # eager calls (reused tensors) up to 1 MiB, NCCL beside each run.
    tuned_plans
    small=(python3 -m loom.launch -n "$gpus" --timeout 100 bench/collective_bench.py --plans build-gpu/tuned_plans
      --max-bytes 1048576)
    for round in 1 2; do
      for pdl in 0 1; do
        LOOM_PDL=$pdl step "graph_pdl${pdl}_$round" 100 "${small[@]}" --mode graph --out "$out/graph_pdl${pdl}_$round.json"
      done
    done
    for pdl in 0 1; do
      LOOM_PDL=$pdl step "eager_pdl$pdl" 100 "${small[@]}" --mode eager-reused --out "$out/eager_pdl$pdl.json"
    done
    ;;
  tune)
    # bench/tune_plans.py's candidates for GPUS ranks, each timed by graph replay at every size it suits
    # (the 3 fastest of each size up to 16 MiB timed 3 times more, interleaved with NCCL: medians). Every
    # power of two up to 16 MiB is measured: a winner's range reaches halfway to the next measured size,
    # and a one-block LL plan that won at 16 KiB ran 32 KiB slower than NCCL (9.2 against 7.6 µs in nccl-tests);
    # `python bench/tune_plans.py pick candidates_<n>r.json --write` then stores the table they choose.
    python3 bench/tune_plans.py candidates --world-size "$gpus" --out build-gpu/candidates >"$out/candidates.log" 2>&1 ||
      status=1
    step tune_bench 420 python3 -m loom.launch -n "$gpus" --timeout 400 bench/collective_bench.py \
      --plans build-gpu/candidates --every-plan --calls-per-graph 10 --repeats 5 --refine 3 --refine-rounds 3 \
      --collectives "${TUNE_COLLECTIVES:-allreduce,allgather,reducescatter,alltoall}" \
      --out "build-gpu/candidates_${gpus}r.json" \
      --sizes 1024,2048,4096,8192,16384,32768,65536,131072,262144,524288,1048576,2097152,4194304,8388608,16777216,67108864,134217728,268435456,1073741824
    cp "build-gpu/candidates_${gpus}r.json" "$out/"
    python3 bench/tune_plans.py pick "$out/candidates_${gpus}r.json" >"$out/table_${gpus}r.txt" 2>&1 || status=1
    ;;
  apply)
    # The table the last tune stage picked, written into the tree here (so later stages of this host run the
    # bundled plans it makes) and brought back in applied/ to be committed.
    step apply 120 bash -c "python3 bench/tune_plans.py pick build-gpu/candidates_${gpus}r.json --write &&
      python3 plans/build_default_plans.py"
    mkdir -p "$out/applied/plans"
    # The table the package here reads (build-gpu/site's copy, which pick --write changed).
    cp "$(python3 -c 'from loom.algorithms.tuned_sizes import TABLE_FILE; print(TABLE_FILE)')" "$out/applied/"
    cp plans/default/*"_${gpus}r"*.json "$out/applied/plans/" 2>/dev/null
    ;;
  profile)
    tuned_plans
    # The LL all-reduce at 1 and 64 KiB, and the 64 KiB LL all-gather (slower inline than generic on 2 H200s).
    for case in allreduce_allpairs_packet:1024 allreduce_allpairs_packet:65536 allgather_fullmesh_packet:65536; do
      plan=${case%:*} size=${case#*:}
      for path in generic fast; do
        LOOM_FAST_PATH=$([ $path = fast ] && echo 1 || echo 0) WORLD_SIZE=$gpus step "profile_${path}_${plan%%_*}_$size" 150 \
          bash bench/kernel_profile.sh build-gpu/tuned_plans "${plan}_${gpus}r" "$size" "$out/profile_${path}_${plan%%_*}_$size.csv"
      done
    done
    ;;
  nccl-bench)
    # Sets mpi (1 when built with MPI) and real_nccl_dir (the real NCCL the programs are linked against).
    eval "$(python3 tests/nccl/nccl_tests_build.py build-gpu/nccl-tests 2>"$out/nccl_tests_build.log")" || status=1
    LD_LIBRARY_PATH=${real_nccl_dir:-}:$LD_LIBRARY_PATH
    export LD_LIBRARY_PATH
    step nccl_bench 480 python3 bench/nccl_bench.py --nproc "$gpus" --rounds 3 --nccl-tests build-gpu/nccl-tests/bin ${mpi:+--mpi} \
      --library build-gpu/executor/nccl/libloom_nccl.so --out "$out/nccl.md" --data "$out/nccl.json"
    ;;
  split-bench)
    # Issue 38: the all-reduce on a group made by ncclCommSplit beside the default group's, NCCL and the library.
    step split_bench 240 python3 bench/nccl_bench.py --nproc "$gpus" --split --max-bytes 67108864 --repeats 5 \
      --library build-gpu/executor/nccl/libloom_nccl.so --out "$out/nccl_split.md" --data "$out/nccl_split.json"
    ;;
  runtime)
    # On one GPU only the cuMem descriptor case runs (two processes on GPU 0); the others need 2 or more.
    # The runtime's GPU programs need GoogleTest, which the image lacks: built from build/deps/googletest.
    deps=$(realpath build/deps)
    step runtime_build 300 bash -c "cmake -S '$deps/googletest' -B build-gtest -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_INSTALL_PREFIX='$PWD/build-gtest/install' && cmake --build build-gtest --target install && \
      cmake -S . -B build-rt -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOOM_BUILD_TESTS=ON \
      '-DCMAKE_PREFIX_PATH=$deps/usr;$PWD/build-gtest/install' -DLOOM_IBVERBS_INCLUDE_DIR='$deps/usr/include' && \
      cmake --build build-rt --target loom_runtime_gpu_tests loom_runtime_timeout_test"
    LOOM_BUILD_DIR=$PWD/build-rt step runtime_gpu 200 "${pytest[@]}" tests/runtime/test_runtime_gpu.py
    ;;
  peers)
    # Issue 40: the strongest peers beside Loom (PEERS_ARGS narrows: sizes, dtypes, modes, collectives).
    step peers 300 torchrun --nproc-per-node "$gpus" bench/peers.py --out "$out/peers.json" \
      ${PEERS_ARGS:---max-bytes 67108864 --modes graph}
    ;;
  alltoallv)
    # Issue 39: all-to-all-v through loom.Communicator (host splits, device splits, graph replays with new
    # splits) on every GPU, and 4 and 8 ranks sharing GPU 0.
    step alltoallv_gpu 200 "${pytest[@]}" tests/executor/test_executor_gpu.py -k all_to_all_v
    step alltoallv_shared 200 "${pytest[@]}" tests/executor/test_shared_gpu.py -k all_to_all_v
    # Symmetric windows (registered buffers): calls in them exchange no addresses, eagerly and in graphs.
    step windows_gpu 150 "${pytest[@]}" tests/executor/test_executor_gpu.py -k symmetric_windows
    step windows_shared 150 "${pytest[@]}" tests/executor/test_shared_gpu.py -k symmetric_windows
    ;;
  p2p-check)
    # Issue 39: send/recv through the library on two ranks: a torch pipeline, MoE all_to_all_single with
    # new splits every step, batch_isend_irecv, gather and scatter against plain NCCL; nccl-tests sendrecv
    # and alltoall under MPI, 0 wrong.
    step nccl_p2p 240 "${pytest[@]}" -s tests/nccl/test_nccl_point_to_point_gpu.py
    step nccl_tests_p2p 300 "${pytest[@]}" -s tests/nccl/test_nccl_tests_multi_gpu.py -k "sendrecv or alltoall"
    ;;
  faults)
    # Issue 41: abort while a kernel spins (ranks sharing GPU 0, and one per GPU), a rank killed while the
    # survivor's kernels wait on it (known within 1 s, abort, recovery), and the same kill under torch (2 s).
    step faults_gpu 300 "${pytest[@]}" -s tests/executor/test_gpu_faults.py
    step faults_torch 200 "${pytest[@]}" -s tests/nccl/test_nccl_faults_gpu.py
    ;;
  p2p)
    # Issue 39: send/recv, a grouped exchange and all-to-all-v through the NCCL API, the library beside NCCL
    # (P2P_ARGS narrows: patterns, sizes, modes).
    step p2p 420 torchrun --nproc-per-node "$gpus" bench/p2p_bench.py --out "$out/p2p.json" ${P2P_ARGS:-}
    ;;
  mscclpp)
    # Issue 40: MSCCL++'s NCCL-compatible library beside Loom, NCCL and torch's symmetric memory. Its build
    # needs build/mscclpp-deps (scripts/mscclpp_deps.sh on a machine with the network); it falls back to the
    # NCCL that torch ships for what it does not run itself.
    step mscclpp_build 540 bash scripts/mscclpp_build.sh
    lib=$PWD/build-mscclpp/build/lib/libmscclpp_nccl.so
    nccl_lib=$(python3 -c 'import sys; sys.path.insert(0, "bench"); from nccl_api import torch_nccl; print(torch_nccl())')
    [ -e "$lib" ] && step peers_mscclpp 300 env MSCCLPP_NCCL_LIB_PATH="$nccl_lib" torchrun --nproc-per-node "$gpus" \
      bench/peers.py --out "$out/peers_mscclpp.json" --nccl-api "mscclpp=$lib" \
      ${PEERS_ARGS:---max-bytes 67108864 --modes graph}
    # nccl-tests over NCCL, libloom_nccl.so and libmscclpp_nccl.so in turns (0 wrong, and the times).
    [ -e "$lib" ] && step nccl_tests_mscclpp 360 python3 bench/nccl_tests_peers.py --nproc "$gpus" --mscclpp "$lib" \
      --out "$out/nccl_tests_peers.json" ${NCCL_TESTS_PEERS_ARGS:---max-bytes 268435456 --rounds 1}
    # Interpreter against interpreter: MSCCL++'s executor_test and Loom on the same MSCCL++ plan files.
    driver=$(find build-mscclpp/build -name executor_test -type f -perm -u+x 2>/dev/null | head -n 1)
    plans=$(ls build-mscclpp/src/test/execution-files/*.json 2>/dev/null | paste -sd, -)
    [ -n "$driver" ] && [ -n "$plans" ] && step executor_peers 300 python3 bench/executor_peers.py --nproc "$gpus" \
      --executor-test "$driver" --plans "$plans" --out "$out/executor_peers.json" ${EXECUTOR_PEERS_ARGS:-}
    ;;
  split-latency)
    # Issue 38: the same all-reduce on a parent and its ncclCommSplit child, called through ctypes, in turns.
    step split_latency 240 env LOOM_NCCL_DEBUG=INFO torchrun --nproc-per-node "$gpus" bench/nccl_split_latency.py \
      --library build-gpu/executor/nccl/libloom_nccl.so --json "$out/nccl_split_latency.json"
    ;;
  *)
    echo "unknown stage $stage" >&2
    status=1
    ;;
esac
done
exit $status
