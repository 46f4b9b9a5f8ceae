"""Ranks sharing one GPU (LOOM_SHARE_GPU=1, issue 16): 4, 8 and 16 ranks as threads of one process on
GPU 0, so every 4-, 8-, 2x4- and 2x8-rank plan runs on a machine with one GPU. Skipped, with the reason,
without a GPU or torch. What their timings mean: docs/testing.md (kernel costs on one GPU, not NVLink).

- every library plan for 4 and 8 ranks and every bundled 4-, 8-, 2x4- and 2x8-rank plan (16 ranks) whose
  blocks fit, every data type, odd sizes, in and out of place, against float64 on fresh data (gpu/plan_check.py);
- the fast kernel (LOOM_FAST_PATH=1) against the generic one at 4 ranks, bit for bit (issue 18);
- a pipeline sized in bytes (MSCCL++'s LoopIterationContext(unit=...)) at 3 ranks;
- the drift check at 4 ranks; loom.Communicator with torch tensors eagerly and in CUDA graphs at 4 and 8,
  all-to-all-v included (host and device splits, graph replays with new splits, bf16 entries at 2-byte offsets);
- compute-sanitizer memcheck and racecheck on a 4-rank case, and memcheck on all-to-all-v at 2-byte offsets;
- with nothing registered by hand, every collective to 64 MiB at 2, 3, 4, 6 and 8 ranks on the plans the
  selector picks to fit the GPU (gpu/bundled_selection_check.py);
- the refusals: sharing without LOOM_SHARE_GPU=1, a malformed LOOM_SHARE_GPU, blocks that do not fit.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GPU_CHECKS = ROOT / "tests" / "executor" / "gpu"
sys.path.insert(0, str(ROOT / "tests" / "runtime"))
from test_cpu_backend import _alltoall_through_scratch  # noqa: E402
from test_executor_gpu import assert_same_digests, bundled_plans, compute_sanitizer, write_library_plans  # noqa: E402
from test_runtime_gpu import GPUS  # noqa: E402

pytestmark = pytest.mark.gpu
ENVIRONMENT = {
    "NCCL_NVLS_ENABLE": "0",
    "LOOM_DEVICE_TIMEOUT_MS": "30000",
    "PYTHONUNBUFFERED": "1",
    "CUDA_DEVICE_MAX_CONNECTIONS": "32",
    "CUDA_MODULE_LOADING": "EAGER",
}


@pytest.fixture(autouse=True)
def _need_a_gpu_and_torch():
    if GPUS < 1:
        pytest.skip("needs a GPU, this host has none")
    pytest.importorskip("torch", reason="the GPU checks use torch tensors")


def _run(program: list[str], timeout: int = 300, **extra_env: str) -> str:
    """Run a check in a child Python; past `timeout` it is sent SIGABRT, so its fault handler prints where
    each thread was (a hang names itself), and the test fails with that output."""
    environment = {**os.environ, **ENVIRONMENT, **extra_env}
    child = subprocess.Popen(
        [sys.executable, "-X", "faulthandler", *program],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=environment,
    )
    try:
        output, _ = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        child.send_signal(signal.SIGABRT)
        output, _ = child.communicate(timeout=60)
        pytest.fail(f"still ran after {timeout} s; where its threads were:\n{output[-12000:]}")
    assert child.returncode == 0 and "FAIL" not in output, _failure_report(output)
    return output


def _failure_report(output: str) -> str:
    """The first failures (the cause; later ones are often other ranks giving up), where in the check each
    failed rank was (the last lines of its traceback, marked with its rank by gpu/ranks.py), and the end."""
    lines = output.splitlines()
    first = [line for line in lines if "FAIL" in line or "Error:" in line][:20]
    traceback_of: dict[str, list[str]] = {}
    for line in lines:
        match = re.match(r"\[rank (\d+)\] ", line)
        if match:
            traceback_of.setdefault(match.group(1), []).append(line)
    where = [line for rank in sorted(traceback_of, key=int) for line in traceback_of[rank][-8:]]
    report = ["first failures:", *first, "where each failed rank was:", *where, "end of output:", output[-3000:]]
    return "\n".join(report)


def _check_plans(world: int, plans: Path, sizes: str) -> None:
    check = [str(GPU_CHECKS / "plan_check.py"), "--share-gpu", str(world)]
    output = _run([*check, "--plans", str(plans), "--sizes", sizes])
    print(output[-3000:])


# The sizes of a rank's input. Every rank draws every rank's input on the host for its float64 reference, so
# the work grows with the square of the ranks on one GPU: 8 ranks stop at 1 MiB, 4 at 4 MiB (the 64 MiB
# case of two GPUs would take minutes here and runs the same programs; issue 21 runs it on 4 and 8 GPUs).
LIBRARY_SIZES = {4: "1000,1024,4100,65536,262160,1048576,1048592,4194316", 8: "1000,1024,4100,65536,262160,1048592"}
BUNDLED_SIZES = {
    2: "1000,4100,65552,1048592,4194316",
    4: "1000,4100,65552,1048592,4194316",
    8: "1000,4100,65552,1048592",
    16: "1000,4100,65552,262160",
}


@pytest.mark.parametrize("world", [4, 8])
def test_every_library_plan_matches_float64_on_one_gpu(world, tmp_path):
    _check_plans(world, write_library_plans(world, tmp_path), LIBRARY_SIZES[world])


# 2: a one-GPU host checks the 2-rank plans too (the 2-GPU kinds are lent less often); 16: the 2x8 plans
# whose blocks fit (docs/testing.md).
@pytest.mark.parametrize("world", [2, 4, 8, 16])
def test_every_bundled_plan_matches_float64_on_one_gpu(world, tmp_path):
    _check_plans(world, bundled_plans(world, tmp_path), BUNDLED_SIZES[world])


def test_a_pipeline_sized_in_bytes_matches_float64_on_one_gpu(tmp_path):
    """MSCCL++'s byte-sized pipeline (LoopIterationContext(unit=...), issue 19): 3 ranks, 64-byte slices,
    the last one short, through peers' scratch (test_cpu_backend.py runs the same plan on the CPU)."""
    (tmp_path / "alltoall_pipelined_3r.json").write_text(_alltoall_through_scratch(unit=64))
    _check_plans(3, tmp_path, "48,12300,1344")


@pytest.mark.parametrize("world", [4, 8])
def test_fast_and_generic_paths_agree_bit_for_bit_on_one_gpu(world, tmp_path):
    """Every library plan for 4 and 8 ranks, every data type, odd sizes: the fast kernel (the default) and
    the generic one write the same bytes (issue 18). A plan whose blocks of all ranks do not fit on the GPU
    at once is skipped by both runs alike."""
    plans = write_library_plans(world, tmp_path)
    check = [str(GPU_CHECKS / "plan_check.py"), "--share-gpu", str(world), "--plans", str(plans)]
    check += ["--sizes", "1000,4100,65552"]
    fast = _run([*check, "--digests", str(tmp_path / "fast")], 450, LOOM_FAST_PATH="1")
    generic = _run([*check, "--digests", str(tmp_path / "generic")], 450, LOOM_FAST_PATH="0")
    assert "'specialized_transfers': 0" not in fast and "'generic_transfers': 0" not in generic
    assert_same_digests(world, tmp_path / "fast", tmp_path / "generic")


def test_drift_check_at_4_ranks_on_one_gpu(tmp_path):
    plans = write_library_plans(4, tmp_path)
    _run([str(GPU_CHECKS / "drift_check.py"), "--share-gpu", "4", "--plans", str(plans), "--sizes", "4100,1048592"])


@pytest.mark.parametrize("world", [2, 3, 4, 6, 8])
def test_bundled_plans_selected_to_fit_the_gpu_match_float64_to_64_mib(world, tmp_path):
    # Nothing registered by hand: the selector passes over plans whose blocks the GPU cannot hold for every
    # rank on it, and the JIT compiles fewer instances where none fits (issue 55).
    output = _run(
        [str(GPU_CHECKS / "bundled_selection_check.py"), "--share-gpu", str(world)], 540, LOOM_CACHE_DIR=str(tmp_path)
    )
    assert f"bundled selection at {world} ranks sharing the GPU: 0 failures" in output, output[-4000:]


@pytest.mark.parametrize("world", [4, 8])
def test_collective_api_eagerly_and_in_cuda_graphs_on_one_gpu(world):
    _run([str(GPU_CHECKS / "collective_api_check.py"), "--share-gpu", str(world)], LOOM_DEFAULT_PLANS="0")


@pytest.mark.parametrize("world", [4, 8])
def test_all_to_all_v_eagerly_and_in_cuda_graphs_on_one_gpu(world, tmp_path):
    # The JIT compiles alltoallv_fullmesh into a fresh cache; graph replays take new device-side splits.
    _run([str(GPU_CHECKS / "alltoallv_check.py"), "--share-gpu", str(world)], LOOM_CACHE_DIR=str(tmp_path))


@pytest.mark.parametrize("separate", [False, True], ids=["one_launch", "separate"])
@pytest.mark.parametrize("plan", ["packet", "pair"])
@pytest.mark.parametrize("world", [4, 8])
def test_counted_group_ring_with_ranks_drifting_apart(world, plan, separate, request):
    # Each rank's two pairs in one launch per call (Executor.execute_counted_group), or, to compare, a launch
    # each on streams of their own; ranks sleep at random before some calls (docs/testing.md says why).
    if world == 8 and not separate and not request.config.option.runxfail:
        # 1 x H200, 2026-11-29: a rank's first launch stalled while other ranks still set up their pairs,
        # until the device timeout; the separate launches pass. `pytest --runxfail` runs it.
        pytest.xfail("8 ranks sharing one GPU stall in their first grouped launch (docs/testing.md)")
    _run(
        [str(GPU_CHECKS / "counted_group_check.py"), "--share-gpu", str(world), "--plan", plan]
        + (["--separate"] if separate else [])
    )


@pytest.mark.parametrize("world", [2, 3])
def test_all_to_all_v_in_packets_is_clean_under_memcheck(world, tmp_path):
    # The packet plan writes a count packet and the entry's packets into fixed scratch regions: none may
    # leave them, and the unpacked bytes none of the receive entry. Eager calls only: under the sanitizer the
    # ranks' graph replays do not run side by side (1 x H200, 2026-11-29: the replay waited for its peer until
    # the device timeout, after eager calls without an error).
    sanitizer = compute_sanitizer()
    program = [str(GPU_CHECKS / "alltoallv_check.py"), "--share-gpu", str(world), "--packets-only", "--no-graphs"]
    environment = {**os.environ, **ENVIRONMENT, "LOOM_DEVICE_TIMEOUT_MS": "120000", "LOOM_CACHE_DIR": str(tmp_path)}
    command = [sanitizer, "--tool", "memcheck", "--error-exitcode", "9", sys.executable, *program]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=environment, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0 and "FAIL" not in output, _failure_report(output)


@pytest.mark.parametrize("world", [4, 8])
def test_calls_in_symmetric_windows_on_one_gpu(world):
    _run([str(GPU_CHECKS / "symmetric_window_check.py"), "--share-gpu", str(world)])


# Groups of 2 and 4 (bundled plans), and of 3 and 6 (no bundled plan: the JIT compiles theirs on first use).
@pytest.mark.parametrize(
    "colors",
    ["0,1,0,1", "0,0,0,0,1,1,1,1", "0,0,0,1", "0,0,0,0,0,0,1,1"],
    ids=["groups_2_2", "groups_4_4", "groups_3_1", "groups_6_2"],
)
def test_split_groups_match_float64_on_one_gpu(colors, tmp_path):
    world = len(colors.split(","))
    subprocess.run([sys.executable, "-m", "loom", "install-plans", "--cache-dir", str(tmp_path)], check=True)
    output = _run(
        # Small calls: the groups' plans for large ones use more blocks than ranks sharing one GPU can hold at once.
        [str(GPU_CHECKS / "subgroup_check.py"), "--share-gpu", str(world), "--colors", colors, "--sizes", "64,120"],
        LOOM_CACHE_DIR=str(tmp_path),
    )
    assert output.count(": 0 failures") == world, output[-4000:]


@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
def test_a_4_rank_case_is_clean_under_compute_sanitizer(tool, tmp_path):
    sanitizer = compute_sanitizer()
    plans = write_library_plans(4, tmp_path, min_message_size=0, max_message_size=1 << 30)
    program = [str(GPU_CHECKS / "plan_check.py"), "--share-gpu", "4", "--plans", str(plans), "--filter", "allreduce"]
    program += ["--sizes", "4100,65552", "--dtypes", "float32", "--calls", "1"]
    environment = {**os.environ, **ENVIRONMENT, "LOOM_DEVICE_TIMEOUT_MS": "120000"}
    command = [sanitizer, "--tool", tool, "--error-exitcode", "9", sys.executable, *program]
    done = subprocess.run(command, capture_output=True, text=True, timeout=560, env=environment, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0 and "FAIL" not in output, _failure_report(output)


def test_all_to_all_v_at_two_byte_offsets_is_clean_under_memcheck(tmp_path):
    # The device copy reads the aligned 16-byte blocks around a misaligned source: none may leave the buffer.
    sanitizer = compute_sanitizer()
    program = [str(GPU_CHECKS / "alltoallv_check.py"), "--share-gpu", "2", "--offsets-only"]
    environment = {**os.environ, **ENVIRONMENT, "LOOM_DEVICE_TIMEOUT_MS": "120000", "LOOM_CACHE_DIR": str(tmp_path)}
    command = [sanitizer, "--tool", "memcheck", "--error-exitcode", "9", sys.executable, *program]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=environment, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0 and "FAIL" not in output, _failure_report(output)


REFUSALS = textwrap.dedent(
    """
    import sys, torch, loom
    from loom.runtime.host_ranks import run_ranks
    from loom.compiler.driver import compile_algorithm

    def body(bootstrap):
        torch.cuda.set_device(0)
        return loom.Communicator(bootstrap)

    world = int(sys.argv[1])
    for rank, result in sorted(run_ranks(world, None, body).items()):
        print(f"rank {rank}: {type(result).__name__}: {result}")
    if sys.argv[2] == "too-many-blocks":
        text = compile_algorithm("allreduce_allpairs_packet", world, instances=64, verify=False)
        plan = loom.Plan.parse(text)

        def call(bootstrap):
            torch.cuda.set_device(0)
            with torch.cuda.stream(torch.cuda.Stream()):
                comm = loom.Communicator(bootstrap)
                data = torch.ones(1 << 16, device="cuda")
                comm.executor.execute(plan, data, torch.empty_like(data))
                torch.cuda.current_stream().synchronize()

        for rank, result in sorted(run_ranks(world, None, call).items()):
            print(f"call rank {rank}: {type(result).__name__}: {result}")
    """
)


def _refusal_output(world: int, mode: str, **extra_env: str) -> str:
    environment = {**os.environ, **ENVIRONMENT, **extra_env}
    if "LOOM_SHARE_GPU" not in extra_env:
        environment.pop("LOOM_SHARE_GPU", None)
    done = subprocess.run(
        [sys.executable, "-c", REFUSALS, str(world), mode],
        capture_output=True,
        text=True,
        timeout=300,
        env=environment,
        check=False,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return done.stdout


def test_sharing_a_gpu_is_refused_unless_enabled():
    output = _refusal_output(2, "create")
    assert output.count("InvalidArgumentError: device: ranks 0, 1 use GPU") == 2, output
    assert "For testing only, ranks that are threads of one process may share a GPU with LOOM_SHARE_GPU=1" in output
    output = _refusal_output(2, "create", LOOM_SHARE_GPU="maybe")
    assert output.count("LOOM_SHARE_GPU") >= 2 and "maybe" in output, output
    output = _refusal_output(2, "create", LOOM_SHARE_GPU="1", CUDA_DEVICE_MAX_CONNECTIONS="8")
    assert output.count("need CUDA_DEVICE_MAX_CONNECTIONS=32 in the environment before CUDA starts (it is 8)") == 2
    output = _refusal_output(17, "create", LOOM_SHARE_GPU="1")
    assert output.count("at most 16 ranks may share one GPU (there are 17)") == 17, output
    output = _refusal_output(2, "create", LOOM_SHARE_GPU="1", CUDA_MODULE_LOADING="LAZY")
    assert output.count("need CUDA_MODULE_LOADING=EAGER in the environment before CUDA starts (it is LAZY)") == 2


def test_blocks_that_cannot_all_be_resident_are_refused_not_hung():
    output = _refusal_output(8, "too-many-blocks", LOOM_SHARE_GPU="1")
    assert output.count("Communicator: <") + output.count("Communicator: ") >= 8, output
    assert output.count("the GPU holds at most") == 8, output
    assert "ranks 0, 1, 2, 3, 4, 5, 6, 7" in output and "the call would hang" in output, output


def test_loom_demo_on_one_gpu_runs_on_the_gpu(tmp_path):
    command = ["-m", "loom", "demo", "--gpus", "1", "--sizes", "1K,64K", "--calls", "5", "--repeats", "3"]
    output = _run(command, timeout=400, LOOM_CACHE_DIR=str(tmp_path))
    assert output.startswith("loom demo: 1 GPU: 2 and 4 ranks sharing it"), output[-3000:]
    assert "2 ranks sharing one" in output and "4 ranks sharing one" in output, output[-3000:]
    assert "world size 1 on one" in output and "NCCL µs" in output, output[-3000:]
    assert output.rstrip().endswith("ok: 12 of 12 results matched the float64 reference"), output[-3000:]
