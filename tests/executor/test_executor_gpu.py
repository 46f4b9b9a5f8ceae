"""The executor on real GPUs, one process per GPU under loom.launch. Skipped, with the reason, without
NVIDIA GPUs or torch.

- every library plan for 2 (and, where the host has them, 4 and 8) GPUs, every data type, sizes from 1 KiB
  to 64 MiB including odd ones, in and out of place, against a float64 reference (gpu/plan_check.py);
- every bundled plan for 2 (4, 8) GPUs the same way (their size ranges opened down to 0);
- the fast kernel (LOOM_FAST_PATH=1) against the generic one on 2 (4) GPUs, bit for bit (issue 18);
- buffers that move within their allocations at every call, differently on each rank (gpu/shifted_buffers_check.py);
- buffers freed (PyTorch's cache emptied) and allocated anew between calls (gpu/freed_buffers_check.py);
- CUDA graphs replayed after the executor's caches turned over (gpu/graph_lifetime_check.py), also under
  compute-sanitizer memcheck;
- 1,000 back-to-back and 1,000 graph-replayed calls of each without drift (gpu/drift_check.py);
- loom.Communicator with torch tensors on 2, 4 and 8 GPUs, eagerly and inside torch.cuda.graph capture
  (gpu/collective_api_check.py);
- `loom demo` on 2, 4 and 8 GPUs, beside NCCL; the examples that use GPUs;
- the plan check under compute-sanitizer memcheck and racecheck on 2 GPUs, and the all-reduce plans on 4,
  when the tool is installed.

Cases are named by their GPU count (`[4_gpus]`), so `-k "not 2_gpus"` runs those of a wider host alone.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from loom.algorithms import ALGORITHMS
from loom.compiler.driver import compile_algorithm

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "runtime"))
from test_runtime_gpu import GPUS  # noqa: E402

SIZES = "1000,1024,4100,65536,262160,1048576,1048592,4194316,67108928"


def worlds(*counts: int):
    """Parametrise a test by GPU count, each case named `<n>_gpus`."""
    return pytest.mark.parametrize("world", counts, ids=[f"{n}_gpus" for n in counts])


def _need_gpus_and_torch(world: int) -> None:
    if GPUS < world:
        pytest.skip(f"needs {world} GPUs, this host has {GPUS}")
    pytest.importorskip("torch", reason="the GPU checks, the demo and the examples use torch tensors")


def _library_plans(world: int, folder: Path, **options) -> Path:
    _need_gpus_and_torch(world)
    return write_library_plans(world, folder, **options)


def write_library_plans(world: int, folder: Path, **options) -> Path:
    """Every library plan for `world` ranks, in and out of place, written into `folder`.
    LOOM_CHECK_ALGORITHMS (comma-separated names) narrows them, for a device call that checks a new one."""
    wanted = {name for name in os.environ.get("LOOM_CHECK_ALGORITHMS", "").split(",") if name}
    unknown = wanted - set(ALGORITHMS)
    if unknown:
        raise ValueError(f"LOOM_CHECK_ALGORITHMS: no algorithm named {', '.join(sorted(unknown))}")
    for name, algorithm in sorted(ALGORITHMS.items()):
        if world not in algorithm.world_sizes or (wanted and name not in wanted):
            continue
        for inplace in (False, True):
            extra = {"root": world - 1} if name == "broadcast" else {}
            text = compile_algorithm(name, world, inplace=inplace, verify=False, **extra, **options)
            (folder / f"{name}_{world}r{'_inplace' if inplace else ''}.json").write_text(text)
    return folder


def bundled_plans(world: int, folder: Path) -> Path:
    """The bundled plans of `world` ranks (one node, or two nodes of world/2 each), their size ranges opened
    down to 0: the program is the same at every size, and the check's sizes stay small."""
    for path in sorted((ROOT / "plans" / "default").glob("*.json")):
        plan = json.loads(path.read_text())
        if plan["world_size"] == world:
            plan["min_message_bytes"] = 0
            (folder / path.name).write_text(json.dumps(plan))
    return folder


def assert_same_digests(world: int, fast: Path, generic: Path) -> None:
    """Each rank's output digests of a plan_check.py --digests run with the fast kernel (LOOM_FAST_PATH=1)
    and one with the generic one are the same, line for line."""
    for rank in range(world):
        fast_digests = Path(f"{fast}.{rank}").read_text().splitlines()
        generic_digests = Path(f"{generic}.{rank}").read_text().splitlines()
        assert fast_digests, "no outputs were digested"
        differing = [a.split()[:4] for a, b in zip(fast_digests, generic_digests, strict=True) if a != b]
        assert not differing, f"rank {rank}: the fast path differs from the generic one in {differing[:5]}"


def compute_sanitizer() -> str:
    """The compute-sanitizer program; skips the test when it is not installed."""
    sanitizer = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    if not Path(sanitizer).exists():
        pytest.skip("compute-sanitizer is not installed")
    return sanitizer


def _launch(world: int, program: list[str], timeout: int = 600, **extra_env: str) -> str:
    command = [sys.executable, "-m", "loom.launch", "-n", str(world), "--timeout", str(timeout - 60), *program]
    # Eager module loading: plans with port channels between GPUs of one host (the library's port
    # algorithms, the bundled 2x2 plans here) are refused without it (docs/executor.md).
    environment = {**os.environ, "NCCL_NVLS_ENABLE": "0", "LOOM_DEVICE_TIMEOUT_MS": "60000"}
    environment = {**environment, "CUDA_MODULE_LOADING": "EAGER", **extra_env}
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=environment, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0 and "FAIL" not in output, failure_report(output)
    return output


def failure_report(output: str) -> str:
    """The end of a failed launch's output, after the last lines of the rank that failed first: the others'
    tracebacks (a peer closed its connection) would otherwise hide its own error."""
    first = re.search(r"rank (\d+) \S.* \(the first rank to fail\)", output)
    own = [line for line in output.splitlines() if first and line.startswith(f"[rank {first[1]}]")]
    failed_lines = [line for line in output.splitlines() if "FAIL" in line]
    return "\n".join([*own[-40:], *failed_lines[:20], "...", output[-3000:]])


@pytest.mark.gpu
@worlds(2, 4, 8)
def test_every_library_plan_matches_float64_reference(world, tmp_path):
    plans = _library_plans(world, tmp_path)
    _launch(world, [str(ROOT / "tests/executor/gpu/plan_check.py"), "--plans", str(plans), "--sizes", SIZES])


@pytest.mark.gpu
@worlds(2, 4, 8)
def test_every_bundled_plan_matches_float64_reference(world, tmp_path):
    _need_gpus_and_torch(world)
    plans = bundled_plans(world, tmp_path)
    sizes = "1000,4100,65552,1048592,16777232"  # the same programs as at 64 MiB, in a fraction of the time
    _launch(world, [str(ROOT / "tests/executor/gpu/plan_check.py"), "--plans", str(plans), "--sizes", sizes])


@pytest.mark.gpu
@worlds(2, 4)
def test_fast_and_generic_paths_agree_bit_for_bit(world, tmp_path):
    (tmp_path / "plans").mkdir()
    plans = _library_plans(world, tmp_path / "plans")
    # The bundled plans too: their instance counts make a 256 KiB LL all-reduce give each thread several
    # units of the one-shot (sends first, then the reduction), which the library plans' shapes never do.
    bundled_plans(world, plans)
    check = [str(ROOT / "tests/executor/gpu/plan_check.py"), "--plans", str(plans)]
    check += ["--sizes", "1000,4100,65552,262160,1048592"]
    fast = _launch(world, [*check, "--digests", str(tmp_path / "fast")], LOOM_FAST_PATH="1")
    generic = _launch(world, [*check, "--digests", str(tmp_path / "generic")], LOOM_FAST_PATH="0")
    assert "'specialized_transfers': 0" not in fast and "'generic_transfers': 0" not in generic
    assert_same_digests(world, tmp_path / "fast", tmp_path / "generic")


@pytest.mark.gpu
def test_buffers_moving_within_their_allocations_reuse_one_context_and_stay_right(tmp_path):
    plans = _library_plans(2, tmp_path)
    _launch(2, [str(ROOT / "tests/executor/gpu/shifted_buffers_check.py"), "--plans", str(plans)])


@pytest.mark.gpu
@pytest.mark.parametrize("tool", ["none", "memcheck"])
def test_graphs_replay_contexts_the_caches_would_have_dropped(tool):
    _need_gpus_and_torch(2)
    program = [str(ROOT / "tests/executor/gpu/graph_lifetime_check.py")]
    if tool != "none":
        sanitizer = ["--no-python", compute_sanitizer(), "--tool", tool, "--error-exitcode", "9"]
        program = [*sanitizer, "--target-processes", "all", sys.executable, *program]
    _launch(2, program)


@pytest.mark.gpu
def test_a_plan_with_more_blocks_than_the_gpu_holds_is_refused_not_hung(tmp_path):
    _need_gpus_and_torch(2)
    plan = json.loads(compile_algorithm("allreduce_allpairs_packet", 2, verify=False))
    for gpu in plan["gpus"]:  # 201 blocks per rank: more than one per multiprocessor
        gpu["threadblocks"] += [{"id": len(gpu["threadblocks"]) + i, "ops": []} for i in range(199)]
    (tmp_path / "wide.json").write_text(json.dumps(plan))
    output = _launch(2, [str(ROOT / "tests/executor/gpu/plan_check.py"), "--plans", str(tmp_path), "--sizes", "4096"])
    assert "SKIPPED, its blocks do not fit" in output and "rank 0 on GPU" in output, output[-3000:]
    assert "would run 201 thread blocks of 1024 threads at once" in output, output[-3000:]


@pytest.mark.gpu
def test_port_channels_on_one_host_are_refused_with_lazy_module_loading(tmp_path):
    _need_gpus_and_torch(2)
    plan = compile_algorithm("alltoall_port", 2, verify=False, min_message_size=0)
    (tmp_path / "alltoall_port_2r.json").write_text(plan)
    check = [str(ROOT / "tests/executor/gpu/plan_check.py"), "--plans", str(tmp_path), "--sizes", "4096"]
    with pytest.raises(AssertionError) as refused:
        _launch(2, check, CUDA_MODULE_LOADING="LAZY")
    message = str(refused.value)
    assert "runs over cuda_ipc, where the proxy thread moves GPU memory with CUDA calls" in message
    assert "needs CUDA_MODULE_LOADING=EAGER in the environment before CUDA starts (it is LAZY)" in message


@pytest.mark.gpu
def test_buffers_freed_and_allocated_anew_get_new_contexts_and_stay_right(tmp_path):
    plans = _library_plans(2, tmp_path)
    _launch(2, [str(ROOT / "tests/executor/gpu/freed_buffers_check.py"), "--plans", str(plans)])


@pytest.mark.gpu
@worlds(2, 4, 8)
def test_back_to_back_and_graph_replayed_calls_do_not_drift(world, tmp_path):
    plans = _library_plans(world, tmp_path)
    _launch(world, [str(ROOT / "tests/executor/gpu/drift_check.py"), "--plans", str(plans), "--sizes", "4100,1048592"])


@pytest.mark.gpu
@worlds(2, 4, 8)
def test_collective_api_with_torch_tensors_eagerly_and_in_cuda_graphs(world, tmp_path, monkeypatch):
    _need_gpus_and_torch(world)
    monkeypatch.setenv("LOOM_DEFAULT_PLANS", "0")  # user plans only: no bundled plans in the way
    _launch(world, [str(ROOT / "tests/executor/gpu/collective_api_check.py")], timeout=300)


@pytest.mark.gpu
@worlds(2, 4, 8)
def test_all_to_all_v_with_torch_tensors_eagerly_and_in_cuda_graphs(world, tmp_path):
    _need_gpus_and_torch(world)
    _launch(world, [str(ROOT / "tests/executor/gpu/alltoallv_check.py")], timeout=300, LOOM_CACHE_DIR=str(tmp_path))


@pytest.mark.gpu
@worlds(2, 4, 8)
def test_calls_in_symmetric_windows_eagerly_and_in_cuda_graphs(world, tmp_path):
    _need_gpus_and_torch(world)
    _launch(world, [str(ROOT / "tests/executor/gpu/symmetric_window_check.py")], timeout=300)


@pytest.mark.gpu
@worlds(2, 4, 8)
def test_loom_demo_on_gpus_beside_nccl(world, tmp_path):
    _need_gpus_and_torch(world)
    command = [sys.executable, "-m", "loom", "demo", "--gpus", str(world), "--sizes", "1K,1M", "--calls", "5"]
    environment = {**os.environ, "NCCL_NVLS_ENABLE": "0", "LOOM_CACHE_DIR": str(tmp_path)}
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=environment, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert done.stdout.startswith(f"loom demo: {world} GPUs, one process each"), output[-4000:]
    assert "NCCL µs" in done.stdout and f"demo_allreduce_packets_{world}r" in done.stdout, output[-4000:]
    assert done.stdout.rstrip().endswith("ok: 4 of 4 results matched the float64 reference"), output[-4000:]


@pytest.mark.gpu
@worlds(2, 4, 8)
def test_gpu_examples(world, tmp_path, monkeypatch):
    _need_gpus_and_torch(world)
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path))
    _launch(world, [str(ROOT / "examples/user_algorithm.py"), "--gpu"], timeout=300)
    for mode in ([], ["--graph"]):
        _launch(world, [str(ROOT / "examples/pytorch_training_loop.py"), "--steps", "20", *mode], timeout=300)


@pytest.mark.gpu
@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
@pytest.mark.parametrize("path", ["generic", "fast"])
def test_plan_check_is_clean_under_compute_sanitizer(tool, path, tmp_path):
    sanitizer = compute_sanitizer()
    plans = _library_plans(2, tmp_path, min_message_size=0, max_message_size=1 << 30)
    program = ["--no-python", sanitizer, "--tool", tool, "--error-exitcode", "9", "--target-processes", "all"]
    program += [sys.executable, str(ROOT / "tests/executor/gpu/plan_check.py"), "--plans", str(plans)]
    program += ["--sizes", "4100,65552", "--dtypes", "float32,bfloat16", "--calls", "2"]
    _launch(2, program, LOOM_FAST_PATH="1" if path == "fast" else "0")


@pytest.mark.gpu
@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
def test_4_gpu_allreduce_plans_are_clean_under_compute_sanitizer(tool, tmp_path):
    sanitizer = compute_sanitizer()
    _need_gpus_and_torch(4)
    for name in ("allreduce_allpairs_packet", "allreduce_rs_ag"):
        text = compile_algorithm(name, 4, verify=False, min_message_size=0, max_message_size=1 << 30)
        (tmp_path / f"{name}_4r.json").write_text(text)
    program = ["--no-python", sanitizer, "--tool", tool, "--error-exitcode", "9", "--target-processes", "all"]
    program += [sys.executable, str(ROOT / "tests/executor/gpu/plan_check.py"), "--plans", str(tmp_path)]
    program += ["--sizes", "4100,65552", "--dtypes", "float32", "--calls", "2"]
    _launch(4, program)
