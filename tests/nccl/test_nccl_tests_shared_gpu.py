"""nccl-tests, unchanged, over libloom_nccl.so with 4 ranks sharing one GPU (issue 17): NVIDIA's public
nccl-tests, built here from the sources in LOOM_NCCL_TESTS_SRC, run as `-t 4 -g 1 -c 1` (four threads of
one process, one rank each, with their correctness check) from 8 B to 1 GiB. A shim in front of the CUDA
runtime (gpu/one_gpu_devices.c) shows the threads' device indices 0..3 as GPU 0, so the four ranks share
it (LOOM_SHARE_GPU=1); NCCL refuses two ranks on one GPU, so every call must be Loom's, and the log says
why nothing is forwarded. Skipped, with the reason, without a GPU, the library, the sources or make."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from loom.compiler.driver import compile_algorithm

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "runtime"))
from test_runtime_gpu import GPUS  # noqa: E402

sys.path.insert(0, str(ROOT / "tests" / "nccl"))
from nccl_tests_build import (  # noqa: E402
    CUDA,
    build_nccl_tests,
    failure_report,
    nccl_tests_rows,
    size_bytes,
    why_not_buildable,
)

BUILD = Path(os.environ.get("LOOM_BUILD_DIR", ROOT / "build"))
LIBRARY = BUILD / "executor" / "nccl" / "libloom_nccl.so"
RANKS = 4

pytestmark = pytest.mark.gpu

# (program, its size range). Many bundled 4-rank plans are tuned for 4 GPUs (up to 128 blocks per rank),
# more than 4 ranks can keep resident on one GPU at once: Loom refuses them (the refusal is checked), so the
# runs use a cache where those are compiled again with fewer instances, until they fit.
CASES = {
    "all_reduce_perf": ("8", "1G"),
    "reduce_scatter_perf": ("8", "1G"),
    "broadcast_perf": ("8", "1G"),
    "alltoall_perf": ("8", "1G"),
    "all_gather_perf": ("8", "1G"),
}


@pytest.fixture(scope="module")
def nccl_tests(tmp_path_factory) -> dict[str, Path]:
    """The nccl-tests programs and the shim, built once: linked against a libnccl.so that is this library
    (as a program built against NCCL and run with it preloaded sees it)."""
    if GPUS < 1:
        pytest.skip("needs an NVIDIA GPU, this host has none")
    reason = why_not_buildable(LIBRARY)
    if reason:
        pytest.skip(reason)
    source = os.environ["LOOM_NCCL_TESTS_SRC"]
    work = tmp_path_factory.mktemp("nccl-tests")
    try:
        binaries = build_nccl_tests(Path(source), work, LIBRARY, BUILD)
    except RuntimeError as error:
        pytest.fail(str(error))
    shim = work / "one_gpu_devices.so"
    compile_shim = ["cc", "-shared", "-fPIC", "-O2", f"-I{CUDA / 'include'}", "-o", str(shim)]
    sources = [
        ROOT / "tests" / "nccl" / "gpu" / "one_gpu_devices.c",
        ROOT / "tests" / "executor" / "gpu" / "thread_stacks.c",
    ]
    subprocess.run([*compile_shim, *map(str, sources), "-ldl", "-lpthread"], check=True)
    # The bundled plans, where the library's registry loads them (as `loom install-plans` puts them).
    subprocess.run([sys.executable, "-m", "loom", "install-plans", "--cache-dir", str(work / "cache")], check=True)
    fitting = work / "cache-fitting"
    shutil.copytree(work / "cache", fitting)
    _fit_plans(fitting, _resident_blocks())
    return {"bin": binaries, "lib": work / "lib", "shim": shim, "cache": work / "cache", "fitting": fitting}


def _resident_blocks() -> int:
    """The thread blocks Loom lets run at once on GPU 0 (one per multiprocessor, one left free)."""
    torch = pytest.importorskip("torch", reason="reads the GPU's multiprocessor count")
    return torch.cuda.get_device_properties(0).multi_processor_count - 1


def _max_blocks(plan: dict) -> int:
    return max(len(gpu["threadblocks"]) for gpu in plan["gpus"])


def _fit_plans(cache: Path, resident: int) -> None:
    """Compile again, with fewer instances, every installed RANKS-rank plan whose blocks do not all fit on one
    GPU when RANKS ranks share it (what a user of this testing mode would do). The installed plans are
    NAME.json.gz; the folder's index then no longer matches their size, and the registry decodes them."""
    replaced = 0
    for path in cache.rglob(f"*_{RANKS}r_*.json.gz"):
        plan = json.loads(gzip.decompress(path.read_bytes()))
        if RANKS * _max_blocks(plan) <= resident:
            continue
        parameters = plan["metadata"]["parameters"]
        instances = parameters["instances"]
        per_instance = _max_blocks(plan) / instances
        while instances > 1 and RANKS * per_instance * instances > resident:
            instances //= 2
        text = compile_algorithm(
            parameters["algorithm"],
            plan["world_size"],
            plan["ranks_per_node"],
            instances=instances,
            inplace=plan["inplace"],
            plan_name=plan["name"],
            **parameters["options"],
        )
        assert RANKS * _max_blocks(json.loads(text)) <= resident, f"{path.name} at {instances} instances"
        path.write_bytes(gzip.compress(text.encode(), mtime=0))
        replaced += 1
    assert replaced > 0, f"expected 4-rank plans that do not fit {resident} resident blocks under {cache}"


def _run(
    nccl_tests: dict[str, Path],
    program: str,
    low: str,
    high: str,
    tmp_path: Path,
    cache: str = "fitting",
    ranks: int = RANKS,
    factor: str = "2",
    extra_environment: dict[str, str] | None = None,
) -> tuple[str, str]:
    binary = nccl_tests["bin"] / program
    environment = {
        **os.environ,
        "LD_PRELOAD": f"{LIBRARY}:{nccl_tests['shim']}",
        "LD_LIBRARY_PATH": f"{nccl_tests['lib']}:{os.environ.get('LD_LIBRARY_PATH', '')}",
        "LOOM_CACHE_DIR": str(nccl_tests.get(cache, tmp_path / cache)),
        "LOOM_VIRTUAL_GPUS": str(ranks),
        "LOOM_SHARE_GPU": "1",
        "CUDA_DEVICE_MAX_CONNECTIONS": "32",
        "CUDA_MODULE_LOADING": "EAGER",
        "NCCL_NVLS_ENABLE": "0",
        # Either may be raised for a run by hand (LOOM_NCCL_DEBUG=TRACE logs every call and launch).
        "LOOM_DEVICE_TIMEOUT_MS": os.environ.get("LOOM_DEVICE_TIMEOUT_MS", "20000"),
        "LOOM_NCCL_DEBUG": os.environ.get("LOOM_NCCL_DEBUG", "INFO"),
        "LOOM_NCCL_DEBUG_FILE": str(tmp_path / "loom.%p.log"),
        **(extra_environment or {}),
    }
    command = [str(binary), "-b", low, "-e", high, "-f", factor, "-t", str(ranks), "-g", "1", "-c", "1", "-n", "2"]
    command += ["-w", "1"]
    # LOOM_NCCL_TESTS_TIMEOUT_S: a shorter limit, to keep what a stalled run printed within one device call.
    timeout = int(os.environ.get("LOOM_NCCL_TESTS_TIMEOUT_S", "400"))
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=environment, check=False)
        output, status = done.stdout + done.stderr, str(done.returncode)
    except subprocess.TimeoutExpired as stalled:
        parts = (stalled.stdout, stalled.stderr)
        printed = [part.decode() if isinstance(part, bytes) else part or "" for part in parts]
        output, status = "".join(printed), f"none: still ran after {timeout} s"
    logs = "\n".join(path.read_text() for path in sorted(tmp_path.glob("loom.*.log")))
    return output + _crash_functions(output) + f"\nexit status {status}", logs


def _crash_functions(output: str) -> str:
    """The functions of the shim's crash stack (library+offset frames), by addr2line, if there was one."""
    frames = re.findall(r"frame \d+: (\S+)\+(0x[0-9a-f]+)", output)
    if not frames or shutil.which("addr2line") is None:
        return ""
    lines = ["", "crash stack, symbolized:"]
    for library, offset in frames:
        found = subprocess.run(["addr2line", "-f", "-C", "-e", library, offset], capture_output=True, text=True)
        lines.append(f"  {Path(library).name}+{offset}: {found.stdout.split(chr(10))[0] or '?'}")
    return "\n".join(lines)


@pytest.mark.parametrize("program", sorted(CASES))
def test_nccl_tests_with_4_ranks_on_one_gpu_report_nothing_wrong(nccl_tests, program, tmp_path):
    low, high = CASES[program]
    output, logs = _run(nccl_tests, program, low, high, tmp_path)
    report = failure_report(output, logs)
    print(output)  # nccl-tests' table: kernel costs of 4 ranks on one GPU, not NVLink
    assert output.endswith("exit status 0") and "Out of bounds values : 0 OK" in output, report
    rows = nccl_tests_rows(output)
    assert rows and int(rows[-1][0]) == size_bytes(high), report  # every size up to the last was run
    assert "share GPU" in logs and "NCCL refuses two ranks on one GPU" in logs, report
    assert "forwarded to NCCL" not in logs, report


def test_a_bundled_plan_whose_blocks_do_not_fit_is_passed_over_for_one_that_does(nccl_tests, tmp_path):
    # The installed cache as is: at 512 KiB the first-ranked bundled all-gather needs more blocks than 4 ranks
    # keep resident on one GPU. The selector passes it over, says why, and the call runs on a plan that fits.
    output, logs = _run(nccl_tests, "all_gather_perf", "512K", "512K", tmp_path, cache="cache")
    report = failure_report(output, logs)
    assert output.endswith("exit status 0") and "Out of bounds values : 0 OK" in output, report
    assert "passed over '" in logs and "4 ranks sharing the GPU may run at most" in logs, report
    assert "forwarded to NCCL" not in logs, report


# Up to the largest size whose compiled plan fits 3 ranks on one GPU: the JIT compiles the plan a rank of its
# own GPU would run, and above these sizes that is more blocks than 3 ranks can keep resident on one GPU (Loom
# refuses such a plan, as the test above checks for a bundled one).
JIT_CASES = {"all_reduce_perf": "2M", "all_gather_perf": "256K"}


@pytest.mark.parametrize("program", sorted(JIT_CASES))
def test_three_ranks_compile_their_plans_at_group_end_and_report_nothing_wrong(nccl_tests, program, tmp_path):
    # No plan is bundled for 3 ranks and the cache starts empty: nccl-tests groups every call, so each
    # plan is compiled by the JIT at ncclGroupEnd (every rank agreeing), then run. NCCL refuses two ranks
    # on one GPU, so a call forwarded would fail: every one must be Loom's.
    high = JIT_CASES[program]
    output, logs = _run(nccl_tests, program, "8", high, tmp_path, cache="jit-cache", ranks=3, factor="8")
    report = failure_report(output, logs)
    print(output)
    assert output.endswith("exit status 0") and "Out of bounds values : 0 OK" in output, report
    rows = nccl_tests_rows(output)
    assert rows and int(rows[-1][0]) > size_bytes(high) // 2, report  # rounded down to a multiple of 3 ranks
    assert "rank 0/3: compiled plan" in logs, report
    assert "forwarded to NCCL" not in logs, report


@pytest.mark.parametrize("ranks", [4, 8])
def test_send_recv_rounds_up_to_the_packet_capacity_take_the_packet_plan(nccl_tests, ranks, tmp_path):
    # sendrecv_perf: each rank sends to the next and receives from the previous, one group per call, so each
    # rank has two links (docs/nccl.md). With LOOM_P2P_PACKET_BYTES every round up to that size runs the eager
    # packet plan (alltoallv_packet, compiled on first use by each link's rank 0), in place (nccl-tests' -c
    # checks it) and out of place. LOOM_P2P_ONE_LAUNCH=1 in the environment runs each group's two rounds as one
    # launch. (8 ranks stalled at check calls until the shim stopped nccl-tests' cudaFreeHost from waiting for
    # the whole device: docs/testing.md.)
    one_launch = os.environ.get("LOOM_P2P_ONE_LAUNCH", "0") == "1"
    output, logs = _run(
        nccl_tests,
        "sendrecv_perf",
        "8",
        "64K",
        tmp_path,
        cache="packet-cache",
        ranks=ranks,
        extra_environment={
            "LOOM_P2P_PACKET_BYTES": "65536",
            "LOOM_NCCL_STATS": str(tmp_path / "coverage.json"),
            # Each rank's "setting up" and "launched" lines say which ranks launched the last call.
            "LOOM_NCCL_DEBUG": "TRACE",
        },
    )
    report = failure_report(output, logs)
    if not output.endswith("exit status 0"):
        launches = [line for line in logs.splitlines() if "one launch with" in line or "side by side with" in line]
        report += "\n--- the last launches ---\n" + "\n".join(launches[-32:])
    print(output)
    assert output.endswith("exit status 0") and "Out of bounds values : 0 OK" in output, report
    rows = nccl_tests_rows(output)
    assert rows and int(rows[-1][0]) == size_bytes("64K"), report
    assert "for send/recv of up to 65536" in logs, report
    assert "forwarded to NCCL" not in logs, report
    # A launch per round (a send or a receive), or per group of both.
    for communicator in json.loads((tmp_path / "coverage.json").read_text())["communicators"]:
        calls = sum(row["calls"] for row in communicator["rows"] if row["route"] == "loom")
        assert communicator["launches"] * (2 if one_launch else 1) == calls, communicator


def test_send_recv_of_two_ranks_runs_the_pair_plan(nccl_tests, tmp_path):
    # Two ranks: each group is one round of the bundled all-to-all-v plan of the pair, 8 B - 1 MiB.
    output, logs = _run(nccl_tests, "sendrecv_perf", "8", "1M", tmp_path, cache="cache", ranks=2, factor="8")
    report = failure_report(output, logs)
    print(output)
    assert output.endswith("exit status 0") and "Out of bounds values : 0 OK" in output, report
    assert "Loom plan 'alltoallv_fullmesh_2r_0_1073741824'" in logs, report
    assert "forwarded to NCCL" not in logs, report
