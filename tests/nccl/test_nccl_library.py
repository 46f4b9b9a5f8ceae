"""libloom_nccl.so without a GPU: its exports against nccl.h, and the library driven through the
NCCL API by tests/nccl/nccl_driver.cc on the CPU backend (LOOM_NCCL_CPU_BACKEND=1), with a stand-in
NCCL (tests/nccl/fake_nccl.cc) that records what is forwarded to it. Ranks are threads of one
process, or processes for the unique-id and init flow. Skipped, with the reason, where the library
was not built (it needs the CUDA toolkit and nccl.h at build time)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("LOOM_BUILD_DIR", ROOT / "build"))
LIBRARY = BUILD / "executor" / "nccl" / "libloom_nccl.so"
DRIVER = BUILD / "tests" / "loom_nccl_driver"
FAKE = BUILD / "tests" / "libfake_nccl.so.2"
HEADER_FOLDERS = [Path("/usr/local/cuda/include"), Path("/usr/include"), Path("/usr/local/include")]
TIMEOUT_S = 120


def _built(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"{path} was not built (libloom_nccl.so needs the CUDA toolkit and nccl.h at build time)")
    return path


def _header() -> Path:
    for folder in HEADER_FOLDERS:
        if (folder / "nccl.h").exists():
            return folder / "nccl.h"
    pytest.skip("nccl.h not found")


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("LOOM_NCCL", "NCCL_", "FAKE_NCCL"))}
    env.update(
        LOOM_NCCL_CPU_BACKEND="1",
        LOOM_NCCL_LIBRARY=str(_built(FAKE)),
        FAKE_NCCL_LOG=str(tmp_path / "fake.log"),
        LOOM_NCCL_DEBUG="INFO",
        LOOM_BOOTSTRAP_TIMEOUT_MS="20000",
    )
    env.update(extra)
    return env


def _drive(tmp_path: Path, *args: str, **env: str) -> str:
    done = subprocess.run(
        [str(_built(DRIVER)), *args], capture_output=True, text=True, timeout=TIMEOUT_S, env=_env(tmp_path, **env)
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"loom_nccl_driver {' '.join(args)} failed ({done.returncode}):\n{output}"
    return output


def _fake_log(tmp_path: Path) -> list[str]:
    path = tmp_path / "fake.log"
    return path.read_text().splitlines() if path.exists() else []


def _results(output: str) -> dict[str, str]:
    """'rank R STEP -> RESULT...' lines, by 'R STEP'."""
    found = {}
    for line in output.splitlines():
        match = re.match(r"rank (\d+) (\S+) -> (.*)$", line)
        if match:
            found[f"{match[1]} {match[2]}"] = match[3]
    return found


def _drive_processes(
    tmp_path: Path, world: int, steps: str, hosts: list[str] | None = None, killed: tuple[int, ...] = ()
) -> str:
    """``steps`` on ``world`` processes, rank r acting as host ``hosts[r]`` when given (LOOM_TEST_HOST_ID:
    processes of one machine that reach each other over the network transports only, as across hosts);
    the ranks in ``killed`` end by SIGKILL (the driver's "die" step), the others with status 0."""
    env = _env(tmp_path)
    hosts = hosts or [""] * world  # "": the machine's own identity
    root = subprocess.Popen(
        [str(_built(DRIVER)), "root", str(world), steps],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**env, "LOOM_TEST_HOST_ID": hosts[0]},
    )
    hexid = root.stdout.readline().split()[1]
    others = [
        subprocess.Popen(
            [str(DRIVER), "rank", hexid, str(rank), str(world), steps],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**env, "LOOM_TEST_HOST_ID": hosts[rank]},
        )
        for rank in range(1, world)
    ]
    output = root.communicate(timeout=TIMEOUT_S)[0] + "".join(p.communicate(timeout=TIMEOUT_S)[0] for p in others)
    codes = [root.returncode] + [p.returncode for p in others]
    assert codes == [-signal.SIGKILL if rank in killed else 0 for rank in range(world)], output
    return output


def test_exports_are_the_api_of_nccl_h() -> None:
    declared = set(
        re.findall(r"^\s*(?:ncclResult_t|const char\s*\*|void)\s+(p?nccl\w+)\s*\(", _header().read_text(), re.M)
    )
    assert "ncclAllReduce" in declared and "pncclGroupEnd" in declared, sorted(declared)
    listing = subprocess.run(
        ["nm", "-D", "--defined-only", str(_built(LIBRARY))], capture_output=True, text=True, check=True
    ).stdout
    exported = {line.split()[-1] for line in listing.splitlines() if line.split()[1:2] in (["T"], ["W"], ["i"])}
    others = {line.split()[-1] for line in listing.splitlines()} - exported
    # Every function of nccl.h, nothing else: a preloaded library must not stand in for the host
    # program's C++ library or CUDA runtime.
    assert declared - exported == set(), "not exported"
    assert exported - declared == set(), "exported beyond nccl.h"
    assert others == set(), "other symbols exported"
    needed = subprocess.run(["readelf", "-d", str(LIBRARY)], capture_output=True, text=True, check=True).stdout
    libraries = re.findall(r"NEEDED.*\[(.*)\]", needed)
    assert not [name for name in libraries if re.match(r"lib(stdc\+\+|cudart|python|loom)", name)], libraries


def test_nccl_path_command(capsys: pytest.CaptureFixture[str]) -> None:
    _built(LIBRARY)
    from loom.tools.cli import main

    assert main(["nccl-path"]) == 0
    path = Path(capsys.readouterr().out.strip())
    assert path.name == "libloom_nccl.so" and path.is_file()


STEPS_TWO_RANKS = ";".join(
    [
        "allreduce:1024:float32:sum:check",
        "allreduce:1000:int32:sum:ip:check",
        "allreduce:64:float32:prod",
        "allreduce:64:float64:sum",
        "allgather:256:float32:check",
        "allgather:100:int32:ip:check",
        "reducescatter:512:float32:sum:check",
        "allreduce:2048:float32:avg:check",
        "reducescatter:512:float32:avg:ip:check",
        "allreduce:100:int32:avg",
        "broadcast:300:float32:0:check",
        "bcast:300:int32:0:check",
        "broadcast:300:float32:1",
        "alltoall:64:float32:check",
        "reduce:16:float32:sum:1:check",
        "reduce:300:float32:sum:0:ip:check",
        "reduce:300:int32:sum:1:null:check",
        "reduce:64:float32:avg:1:null:check",
        "reduce:16:float32:prod:1",
        "r0@send:100:float32:1",
        "r1@recv:100:float32:0:check",
        "r1@send:77:int32:0",
        "r0@recv:77:int32:1:check",
    ]
)


def test_two_ranks_run_on_loom_or_forward(tmp_path: Path) -> None:
    output = _drive(tmp_path, "threads", "2", STEPS_TWO_RANKS)
    results = _results(output)
    for rank in (0, 1):
        assert results[f"{rank} init"] == "ncclSuccess", output
        for step in STEPS_TWO_RANKS.split(";"):
            if "@" in step:
                if not step.startswith(f"r{rank}@"):
                    continue
                step = step.split("@", 1)[1]
            result = results[f"{rank} {step}"]
            assert result.startswith("ncclSuccess"), f"rank {rank} {step}: {result}\n{output}"
            if step.endswith("check"):
                assert result == "ncclSuccess check ok", f"rank {rank} {step}: {result}\n{output}"
    assert "Loom plan 'allreduce_allpairs_packet_2r" in output
    assert re.search(r"Loom plan 'allreduce_allpairs_packet_2r\w*' \(the bundled table\)", output), output[-3000:]
    assert (
        "AllReduce 64 x float32 prod out of place: forwarded to NCCL: Loom reduces with sum, min, max and (floating "
        "types) avg, not prod" in output
    )
    assert "forwarded to NCCL: Loom does not reduce float64" in output
    assert "AllReduce 2048 x float32 avg out of place: Loom plan 'allreduce_" in output
    assert (
        "AllReduce 100 x int32 avg out of place: forwarded to NCCL: Loom reduces with sum, min, max and (floating"
        in output
    )
    # The bundled broadcasts are from root 0: the JIT compiles one from root 1 on first use.
    assert "compiled plan 'broadcast_2r_0_1073741824_inplace_root1' for broadcast in place root 1" in output
    # Reduce too: root 0's is bundled, root 1's compiled on first use, and Reduce runs on Loom.
    assert "compiled plan 'reduce_read_2r_0_65536_inplace_root1' for reduce in place root 1" in output
    assert "compiled plan 'reduce_read_2r_0_65536_inplace_root0'" not in output
    assert "Reduce 300 x int32 sum out of place: Loom plan 'reduce_read_2r_0_65536_inplace_root1'" in output
    assert "Loom has no Reduce collective" not in output
    assert "Reduce 16 x float32 prod out of place: forwarded to NCCL: Loom reduces with sum, min, max" in output
    forwarded = [" ".join(line.split()[1:3]) for line in _fake_log(tmp_path)]
    for rank in (0, 1):
        for call in ("ncclAllReduce", "ncclReduce"):
            assert f"{call} rank={rank}" in forwarded, forwarded
    # What Loom ran never reached NCCL.
    assert not [line for line in _fake_log(tmp_path) if "ncclAllGather" in line or "ncclSend" in line], _fake_log(
        tmp_path
    )
    assert len([line for line in _fake_log(tmp_path) if "ncclAllReduce" in line]) == 6


def test_four_ranks(tmp_path: Path) -> None:
    steps = "allreduce:4096:float32:sum:check;reducescatter:1024:int32:sum:ip:check;allgather:1000:float32:check"
    results = _results(_drive(tmp_path, "threads", "4", steps))
    for rank in range(4):
        for step in steps.split(";"):
            assert results[f"{rank} {step}"] == "ncclSuccess check ok", results


def test_log_once_per_collective_and_size_bucket(tmp_path: Path) -> None:
    steps = (
        "allreduce:1024:float32:sum;allreduce:1000:float32:sum;allreduce:1024:float32:sum;allreduce:4096:float32:sum"
    )
    output = _drive(tmp_path, "threads", "2", steps)
    lines = [line for line in output.splitlines() if "LOOM INFO rank 0/2 AllReduce" in line]
    # 1024 and 1000 floats share a power-of-two bucket; 4096 is another.
    assert len(lines) == 2, "\n".join(lines)
    traced = _drive(tmp_path, "threads", "2", steps, LOOM_NCCL_DEBUG="TRACE")
    assert len([line for line in traced.splitlines() if "rank 0/2 AllReduce" in line]) == 4
    quiet = _drive(tmp_path, "threads", "2", steps, LOOM_NCCL_DEBUG="WARN")
    assert "LOOM INFO" not in quiet


def test_one_rank_copies_on_the_stream(tmp_path: Path) -> None:
    steps = ";".join(
        [
            "allreduce:100:float32:sum:check",
            "allreduce:100:float32:sum:ip:check",
            "allreduce:8:float64:prod",
            "allgather:64:int32:check",
            "premulsum",
        ]
    )
    output = _drive(tmp_path, "threads", "1", steps)
    results = _results(output)
    assert results["0 allreduce:100:float32:sum:check"] == "ncclSuccess check ok"
    assert results["0 allgather:64:int32:check"] == "ncclSuccess check ok"
    assert "AllReduce 8 x float64 prod out of place: a local copy (one rank)" in output
    assert "AllReduce 100 x float32 sum in place: nothing to do (one rank, in place)" in output
    log = _fake_log(tmp_path)
    # Only the custom operator reaches NCCL: it scales, even on one rank.
    assert [line.split()[1] for line in log if "AllReduce" in line or "RedOp" in line] == [
        "ncclRedOpCreatePreMulSum",
        "ncclAllReduce",
        "ncclRedOpDestroy",
    ], log
    assert "op=5" in [line for line in log if "ncclAllReduce" in line][0]


def test_unique_id_and_init_across_processes(tmp_path: Path) -> None:
    steps = "allreduce:64:float32:prod;query;split:0;register;finalize"
    env = _env(tmp_path)
    root = subprocess.Popen(
        [str(_built(DRIVER)), "root", "2", steps], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    first = root.stdout.readline()
    assert first.startswith("id "), first
    hexid = first.split()[1]
    assert bytes.fromhex(hexid)[:8] == b"LOOMNCCL"
    other = subprocess.run(
        [str(DRIVER), "rank", hexid, "1", "2", steps], capture_output=True, text=True, timeout=TIMEOUT_S, env=env
    )
    root_output = first + root.communicate(timeout=TIMEOUT_S)[0]
    output = root_output + other.stdout + other.stderr
    assert root.returncode == 0 and other.returncode == 0, output
    results = _results(output)
    for rank in (0, 1):
        for step in ["init", *steps.split(";"), "destroy"]:
            assert results[f"{rank} {step}"] == "ncclSuccess", output
    assert "rank 1 query count=2 rank=1 device=-1 async=ncclSuccess" in output
    assert "rank 0 split child 0/2" in output and "rank 0 split child allreduce -> ncclSuccess" in output
    log = _fake_log(tmp_path)
    # Rank 0 made the real NCCL's id once; both processes created their communicator from it.
    made = [line for line in log if "ncclGetUniqueId" in line]
    inits = [line for line in log if "ncclCommInitRankConfig" in line]
    assert len(made) == 1 and len(inits) == 2, log
    real_id = made[0].split("id=")[1]
    assert all(f"id={real_id}" in line and "blocking=1" in line for line in inits), log
    assert len({line.split()[0] for line in inits}) == 2, "one init per process"
    assert sorted(re.search(r"rank=(\d)", line)[1] for line in inits) == ["0", "1"]
    for call in ("ncclAllReduce", "ncclCommSplit", "ncclCommRegister", "ncclCommDeregister", "ncclCommFinalize"):
        assert len([line for line in log if call in line]) == 2, (call, log)
    # The split's communicator runs Loom plans over its own bootstrap; the real NCCL split alike, for what
    # is forwarded.
    assert re.search(r"ncclCommSplit of comm \d+ \(color 0, key 0\) rank 0/2 \(comm \d+\): Loom plans on", output)


def test_force_nccl_and_collective_list(tmp_path: Path) -> None:
    steps = "allreduce:1024:float32:sum:check;allgather:64:float32:check"
    forced = _drive(tmp_path, "threads", "2", steps, LOOM_NCCL_FORCE_NCCL="yes")
    assert "Loom off (LOOM_NCCL_FORCE_NCCL is set)" in forced
    assert "forwarded to NCCL: LOOM_NCCL_FORCE_NCCL is set" in forced
    assert len([line for line in _fake_log(tmp_path) if "ncclAllReduce" in line]) == 2
    listed = _drive(tmp_path, "threads", "2", steps, LOOM_NCCL_COLLECTIVES="allgather")
    assert "forwarded to NCCL: allreduce is not in LOOM_NCCL_COLLECTIVES" in listed
    assert _results(listed)["0 allgather:64:float32:check"] == "ncclSuccess check ok"


def test_errors_name_what_went_wrong(tmp_path: Path) -> None:
    bad = _drive(tmp_path, "threads", "1", "query", LOOM_NCCL_FORCE_NCCL="maybe")
    assert (
        "rank 0 init -> ncclInvalidArgument | ncclCommInitRank: LOOM_NCCL_FORCE_NCCL='maybe': "
        "expected 1/0, true/false, yes/no or on/off" in bad
    )
    steps = "allreduce:1024:float32:sum:check;allreduce:64:float32:prod;allreduce:8:bad:sum;split:0"
    alone = _drive(tmp_path, "threads", "2", steps, LOOM_NCCL_LIBRARY="none")
    results = _results(alone)
    assert results["0 allreduce:1024:float32:sum:check"] == "ncclSuccess check ok"
    assert results["0 allreduce:64:float32:prod"] == (
        "ncclInvalidUsage | ncclAllReduce: AllReduce 64 x float32 prod out of place: needs the real NCCL (Loom reduces "
        "with sum, min, max and (floating types) avg, not prod), which is not available: LOOM_NCCL_LIBRARY=none"
    )
    assert (
        results["1 allreduce:8:bad:sum"] == "ncclInvalidArgument | ncclAllReduce: datatype: 99 is not an ncclDataType_t"
    )
    # Without the real NCCL a split still runs Loom plans.
    assert results["1 split:0"] == "ncclSuccess", alone
    assert "rank 1 split child allreduce -> ncclSuccess" in alone
    missing = _drive(
        tmp_path, "threads", "1", "query", LOOM_NCCL_LIBRARY=str(tmp_path / "nope.so"), LOOM_NCCL_DEBUG="WARN"
    )
    assert (
        "LOOM WARN rank 0/1: calls Loom cannot run will fail: the real NCCL is not available: LOOM_NCCL_LIBRARY="
        in missing
    )
    forced = _drive(tmp_path, "threads", "1", "query", LOOM_NCCL_LIBRARY="none", LOOM_NCCL_FORCE_NCCL="1")
    assert (
        "rank 0 init -> ncclInvalidUsage | ncclCommInitRank: LOOM_NCCL_FORCE_NCCL is set but the real NCCL is not "
        "available" in forced
    )
    foreign = _drive(tmp_path, "rank", "00" * 128, "0", "1", "query")
    assert (
        "rank 0 init -> ncclInvalidArgument | ncclCommInitRank: commId: not an id from Loom's ncclGetUniqueId"
        in foreign
    )


def test_a_rank_without_the_real_nccl_turns_forwarding_off_everywhere(tmp_path: Path) -> None:
    steps = "allreduce:256:float32:sum:check;allreduce:64:float32:prod"
    output = _drive(tmp_path, "threads", "2", steps, FAKE_NCCL_FAIL_INIT_RANK="1")
    results = _results(output)
    for rank in (0, 1):
        assert results[f"{rank} allreduce:256:float32:sum:check"] == "ncclSuccess check ok"
        assert results[f"{rank} allreduce:64:float32:prod"].startswith("ncclInvalidUsage"), output
    assert "the real NCCL's communicator failed to initialise on rank 1" in results["0 allreduce:64:float32:prod"]
    assert "ncclCommInitRankConfig failed" in results["1 allreduce:64:float32:prod"]
    assert "ncclCommAbort rank=0" in "\n".join(_fake_log(tmp_path))


def test_real_nccl_found_on_the_search_path_but_never_itself(tmp_path: Path) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    ours.mkdir()
    theirs.mkdir()
    (ours / "libnccl.so.2").symlink_to(_built(LIBRARY))
    (theirs / "libnccl.so.2").symlink_to(_built(FAKE))
    env = {"LD_LIBRARY_PATH": f"{ours}:{theirs}"}
    output = _drive(tmp_path, "threads", "1", "query", LOOM_NCCL_LIBRARY="", **env)
    assert f"forwarding to {FAKE.resolve()}" in output, output


def test_grouped_calls(tmp_path: Path) -> None:
    steps = (
        "group;allreduce:1024:float32:sum:check;r0@send:16:float32:1;r1@recv:16:float32:0;allreduce:8:float32:avg;end"
    )
    output = _drive(tmp_path, "threads", "2", steps)
    results = _results(output)
    for rank in (0, 1):
        assert results[f"{rank} allreduce:1024:float32:sum:check"] == "ncclSuccess check ok", output
        assert results[f"{rank} end"] == "ncclSuccess"
    # The send/recv pair runs on Loom: an all-to-all-v plan of the pair, compiled at ncclGroupEnd.
    assert "Send 16 x float32 out of place: Loom plan 'alltoallv_fullmesh_2r" in output, output
    log = [line.split()[1] for line in _fake_log(tmp_path) if "Init" not in line and "Destroy" not in line]
    # The real NCCL's group is opened and closed with this one, and nothing reaches it.
    assert log.count("ncclGroupStart") == 2 and log.count("ncclGroupEnd") == 2, log
    assert "ncclSend" not in log and "ncclRecv" not in log, log


def test_send_and_recv_pair_as_nccl_pairs_them(tmp_path: Path) -> None:
    """Per peer in call order, several messages to one peer in a group, mixed data types, sends to itself
    inside a group, a lone send met by a grouped receive, zero counts: all on Loom, data checked."""
    steps = ";".join(
        [
            # One group, every kind at once: 2 messages 0->1 (float32, then int32), 1 message 1->0 (int32),
            # and each rank's send to itself.
            "group",
            "r0@send:16:float32:1",
            "r0@send:40:int32:1",
            "r0@recv:24:int32:1:check",
            "r0@send:8:float32:0",
            "r0@recv:8:float32:0:check",
            "r1@recv:16:float32:0:check",
            "r1@send:24:int32:0",
            "r1@recv:40:int32:0:check",
            "r1@send:9:float32:1",
            "r1@recv:9:float32:1:check",
            "end",
            # A lone send, received inside a group.
            "r0@send:33:float32:1",
            "r1@group",
            "r1@recv:33:float32:0:check",
            "r1@end",
            # Zero counts: nothing to move, nothing to wait for.
            "r0@send:0:float32:1",
            "r1@recv:0:float32:0",
        ]
    )
    output = _drive(tmp_path, "threads", "2", steps)
    checks = [line for line in output.splitlines() if " check " in line]
    assert len(checks) == 6 and all(line.endswith("check ok") for line in checks), output
    assert "FAILED" not in output and "ncclSuccess | " not in output, output
    log = [line.split()[1] for line in _fake_log(tmp_path)]
    assert "ncclSend" not in log and "ncclRecv" not in log, log
    assert "Loom plans ran" in output and "(100.0%)" in output, output


def test_init_all_runs_every_rank_of_one_thread(tmp_path: Path) -> None:
    steps = "allreduce:2048:float32:sum:check;allgather:128:int32:check;allreduce:8:float32:prod"
    output = _drive(tmp_path, "initall", "2", steps)
    assert "initall -> ncclSuccess" in output, output
    results = _results(output)
    for rank in (0, 1):
        assert results[f"{rank} allreduce:2048:float32:sum:check"] == "ncclSuccess check ok", output
        assert results[f"{rank} allgather:128:int32:check"] == "ncclSuccess check ok", output
    assert output.count("group end -> ncclSuccess") == 3
    inits = [line for line in _fake_log(tmp_path) if "ncclCommInitRankConfig" in line]
    assert len(inits) == 2, _fake_log(tmp_path)


def test_coverage_report_of_communicators_made_by_init_all(tmp_path: Path) -> None:
    # Grouped calls count when they are decided (Loom's run at ncclGroupEnd), on their own communicator.
    steps = "allreduce:2048:float32:sum;allgather:128:int32;allreduce:8:float32:prod"
    _drive(tmp_path, "initall", "2", steps, LOOM_NCCL_STATS=str(tmp_path / "coverage.json"))
    document = json.loads((tmp_path / "coverage.json").read_text())
    assert [(c["serial"], c["origin"], c["rank"], c["closed"]) for c in document["communicators"]] == [
        (1, "ncclCommInitAll", 0, True),
        (2, "ncclCommInitAll", 1, True),
    ]
    for communicator in document["communicators"]:
        assert communicator["rows"] == [
            {"call": "AllReduce", "route": "loom", "reason": "plan", "calls": 1, "bytes": 8192},
            {"call": "AllReduce", "route": "nccl", "reason": "op_missing", "calls": 1, "bytes": 32},
            {"call": "AllGather", "route": "loom", "reason": "plan", "calls": 1, "bytes": 512},
        ]


def test_coverage_report_of_each_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from loom.runtime.nccl_coverage import check_report, read_coverage
    from loom.tools.cli import main

    steps = ";".join(
        [
            "allreduce:1024:float32:sum",
            "allreduce:32:float64:sum",
            "alltoall:64:float32",
            "reduce:300:float32:prod:1",
            "r0@send:100:float32:1",
            "r1@recv:100:float32:0",
            "group",
            "allreduce:8:float32:sum",
            "allreduce:8:float32:prod",
            "end",
            "enter:0,0",
            "allgather:10:int32",
            "abort",  # the split ends with ncclCommAbort, the parent with ncclCommDestroy
        ]
    )
    env = _env(tmp_path, LOOM_NCCL_STATS=str(tmp_path / "coverage.%h.%p.json"))
    root = subprocess.Popen(
        [str(_built(DRIVER)), "root", "2", steps], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    first = root.stdout.readline()
    other = subprocess.run(
        [str(DRIVER), "rank", first.split()[1], "1", "2", steps],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env=env,
    )
    output = first + root.communicate(timeout=TIMEOUT_S)[0] + other.stdout + other.stderr
    assert root.returncode == 0 and other.returncode == 0, output
    # One file per process, named by %h (the host name to its first dot) and %p (the pid of its log lines).
    host = socket.gethostname().split(".")[0]
    pids = re.findall(rf"^{re.escape(host)}:(\d+):\d+ \[-1\] LOOM INFO ncclCommInitRank rank \d/2", output, re.M)
    files = sorted(tmp_path.glob("coverage.*.json"))
    assert sorted(path.name for path in files) == sorted(f"coverage.{host}.{pid}.json" for pid in pids), (files, pids)
    assert len(files) == 2 and not list(tmp_path.glob("*.tmp*"))
    documents = {}
    for path in files:
        document = json.loads(path.read_text())
        check_report(document, str(path))  # schemas/nccl_coverage.schema.json
        assert (document["host"], f"coverage.{host}.{document['pid']}.json") == (host, path.name)
        documents[document["communicators"][0]["rank"]] = document["communicators"]
    for rank, (point_to_point, key) in enumerate([("Send", 0), ("Recv", 1)]):
        parent, child = documents[rank]
        assert (parent["serial"], parent["origin"], parent["world_size"], parent["closed"]) == (
            1,
            "ncclCommInitRank",
            2,
            True,
        )
        assert {(r["call"], r["route"], r["reason"]): (r["calls"], r["bytes"]) for r in parent["rows"]} == {
            ("AllReduce", "loom", "plan"): (2, 1024 * 4 + 8 * 4),
            ("AllReduce", "nccl", "op_missing"): (1, 8 * 4),
            ("AllReduce", "nccl", "type_missing"): (1, 32 * 8),
            ("AlltoAll", "loom", "plan"): (1, 64 * 4 * 2),  # the whole send buffer
            ("Reduce", "nccl", "op_missing"): (1, 300 * 4),
            (point_to_point, "loom", "plan"): (1, 100 * 4),
        }
        assert (child["serial"], child["origin"], child["rank"], child["closed"]) == (
            2,
            f"ncclCommSplit of comm 1 (color 0, key {key})",
            rank,
            True,
        )
        assert child["rows"] == [{"call": "AllGather", "route": "loom", "reason": "plan", "calls": 1, "bytes": 40}]
        # A kernel per Loom call: two all-reduces, the all-to-all and the send or receive; the split's all-gather.
        assert (parent["launches"], child["launches"]) == (4, 1)
    # The aborted split's table, then the parent's at ncclCommDestroy, in each process's log.
    assert output.count("LOOM INFO coverage of comm 2 (ncclCommSplit of comm 1 (color 0, key") == 2, output
    assert (
        output.count(
            "coverage of comm 1 (ncclCommInitRank) rank 0/2: Loom plans ran 4 of 7 calls between ranks (57.1%)"
            " and 5040 of 6528 bytes (77.2%)"
        )
        == 1
    ), output
    assert re.search(r"LOOM INFO   AllReduce +nccl +type_missing +1 calls +256 bytes", output), output
    summary = read_coverage(files)
    assert (summary.processes, summary.communicators) == (2, 4)
    assert summary.total(["loom"]) == (10, 2 * (5040 + 40))
    assert summary.rows[("Send", "loom", "plan")] == summary.rows[("Recv", "loom", "plan")] == [1, 400]
    assert summary.rows[("AllReduce", "nccl", "type_missing")] == [2, 512]
    assert main(["nccl-coverage", *map(str, files)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == (
        "2 processes, 4 communicators: Loom plans ran 10 of 16 calls between ranks (62.5%)"
        " and 10160 of 13136 bytes (77.3%), in 10 launches"
    )
    assert [line.split() for line in printed[2:]] == [
        ["AllGather", "loom", "plan", "2", "80"],
        ["AllReduce", "loom", "plan", "4", "8256"],
        ["AllReduce", "nccl", "op_missing", "2", "64"],
        ["AllReduce", "nccl", "type_missing", "2", "512"],
        ["AlltoAll", "loom", "plan", "2", "1024"],
        ["Recv", "loom", "plan", "1", "400"],
        ["Reduce", "nccl", "op_missing", "2", "2400"],
        ["Send", "loom", "plan", "1", "400"],
    ], printed


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))


def _nccl_bench():
    spec = importlib.util.spec_from_file_location("nccl_bench", ROOT / "bench" / "nccl_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_refuses_a_run_the_library_did_not_run_on_loom(tmp_path: Path) -> None:
    """bench/nccl_bench.py reads the library's INFO log after each preloaded run: numbers of a run that
    forwarded its all-reduces (no plans, Loom off) or never loaded the library would compare NCCL with
    itself."""
    side = _nccl_bench().Side(str(LIBRARY), True, tmp_path / "bench")
    log_file = side.env["LOOM_NCCL_DEBUG_FILE"]
    steps = "allreduce:1024:float32:sum"
    _drive(tmp_path, "threads", "2", steps, LOOM_NCCL_DEBUG_FILE=log_file)
    side.check_routes("driver")
    _drive(tmp_path, "threads", "2", steps, LOOM_NCCL_DEBUG_FILE=log_file, LOOM_NCCL_FORCE_NCCL="1")
    with pytest.raises(SystemExit, match="did not run Loom:\n.*Loom off \\(LOOM_NCCL_FORCE_NCCL is set\\)"):
        side.check_routes("driver")
    with pytest.raises(SystemExit, match="logged nothing"):
        side.check_routes("driver")


def _children(output: str) -> dict[int, list[str]]:
    """The 'rank R child r/n' (or 'child none') lines of each rank, in order."""
    found: dict[int, list[str]] = {}
    for match in re.finditer(r"^rank (\d+) child (\S+)$", output, re.M):
        found.setdefault(int(match[1]), []).append(match[2])
    return found


# Colors that leave the ranks of a group not contiguous, keys that reverse their order, a split of a
# split, and a rank in no group (NOCOLOR).
SPLIT_STEPS = ";".join(
    [
        "enter:0,1,0,1:3,2,1,0",
        "allreduce:4096:float32:sum:check",
        "allgather:100:float32:check",
        "reducescatter:256:int32:sum:check",
        "enter:5,5",
        "allreduce:64:float32:sum:ip:check",
        "leave",
        "leave",
        "enter:0,n,0,0",
        "allreduce:300:float32:sum:check",
        "leave",
        "enter:0,0,0,0",
        "allreduce:1024:float32:sum:check",
        "leave",
        "allreduce:512:float32:sum:check",
    ]
)


def _check_splits(output: str, tmp_path: Path, grouped: bool = False) -> None:
    """`grouped`: every step ran inside a group, where nothing is compiled on first use (the 3-rank split's
    all-reduce, with no bundled plan, then goes to the stand-in NCCL, which moves no data)."""
    results = _results(output)
    for rank in range(4):
        for step in SPLIT_STEPS.split(";"):
            if rank == 1 and step == "allreduce:300:float32:sum:check":
                continue  # rank 1 is in no communicator of that split
            assert results[f"{rank} {step}"].startswith("ncclSuccess"), (rank, step, output)
            if step.endswith("check") and not (grouped and step.startswith("allreduce:300")):
                assert results[f"{rank} {step}"].endswith("check ok"), (rank, step, output)
    # Colors 0 and 1 take ranks {0, 2} and {1, 3}; the keys put the higher parent rank first.
    children = _children(output)
    assert [children[rank][:2] for rank in range(4)] == [["1/2", "1/2"], ["1/2", "1/2"], ["0/2", "0/2"], ["0/2", "0/2"]]
    assert [children[rank][2:] for rank in range(4)] == [
        ["0/3", "0/4"],
        ["none", "1/4"],
        ["1/3", "2/4"],
        ["2/3", "3/4"],
    ]
    # Each split's collectives ran on plans of its own size, the 3-rank one (no bundled plan) on one the JIT
    # compiled on first use; nothing reached NCCL.
    assert "rank 0/2 AllReduce 4096 x float32 sum out of place: Loom plan 'allreduce_allpairs_packet_2r" in output
    assert "rank 1/2 ReduceScatter 256 x int32 sum out of place: Loom plan 'reducescatter" in output
    assert "rank 0/4 AllReduce 1024 x float32 sum out of place: Loom plan 'allreduce_allpairs_packet_4r" in output
    forwarded = [line for line in _fake_log(tmp_path) if line.split()[1] in ("ncclAllReduce", "ncclAllGather")]
    if grouped:
        assert [line for line in forwarded if "count=300" not in line] == [], forwarded
        return
    assert forwarded == [], forwarded
    assert re.search(
        r"rank 0/3: compiled plan 'allreduce_allpairs_packet_3r_\d+_\d+' for allreduce on first use", output
    )


def test_split_communicators_run_on_loom(tmp_path: Path) -> None:
    output = _drive(tmp_path, "threads", "4", SPLIT_STEPS)
    _check_splits(output, tmp_path)
    splits = [line for line in _fake_log(tmp_path) if "ncclCommSplit" in line]
    # The real NCCL splits alike (every parent rank, NOCOLOR included), for what Loom forwards.
    assert len(splits) == 4 * 3 + 4 and len([line for line in splits if "color=-1" in line]) == 1, splits


def test_split_communicators_of_ranks_driven_by_one_thread(tmp_path: Path) -> None:
    # ncclCommInitAll, then every split inside one group per step: the children connect at ncclGroupEnd.
    output = _drive(tmp_path, "initall", "4", SPLIT_STEPS)
    assert "initall -> ncclSuccess" in output and "group end -> ncclSuccess" in output
    _check_splits(output, tmp_path, grouped=True)


def test_shrink_leaves_ranks_out(tmp_path: Path) -> None:
    steps = "shrink:3,1;allgather:64:float32:check;allreduce:128:float32:sum:check;leave;allreduce:64:float32:sum:check"
    output = _drive(tmp_path, "threads", "4", steps)
    results = _results(output)
    assert {rank: _children(output)[rank] for rank in range(4)} == {0: ["0/2"], 1: ["none"], 2: ["1/2"], 3: ["none"]}
    for rank in (0, 2):
        assert results[f"{rank} allgather:64:float32:check"] == "ncclSuccess check ok", output
        assert results[f"{rank} allreduce:128:float32:sum:check"] == "ncclSuccess check ok", output
    for rank in range(4):
        assert results[f"{rank} allreduce:64:float32:sum:check"] == "ncclSuccess check ok", output
    assert "rank 1/2 AllGather 64 x float32 out of place: Loom plan" in output
    assert re.search(r"ncclCommShrink of comm \d+ \(ranks 3, 1 left out\) rank 0/2", output)
    shrinks = [line for line in _fake_log(tmp_path) if "ncclCommShrink" in line]
    assert len(shrinks) == 2 and all("excluded=3,1" in line for line in shrinks), shrinks


def test_split_arguments_are_checked(tmp_path: Path) -> None:
    results = _results(_drive(tmp_path, "threads", "2", "enter:-5,0;leave", LOOM_NCCL_DEBUG="WARN"))
    assert results["0 enter:-5,0"].startswith("ncclInvalidArgument | ncclCommSplit: color: -5"), results


def test_a_fresh_cache_gets_the_bundled_plans_from_the_library_itself(tmp_path: Path, monkeypatch) -> None:
    # An application that only preloads the library has no Python package to install the plans: the
    # first communicator installs them (one rank of the host; the other waits), and the call runs on one.
    from loom.runtime.install_plans import bundled_plans, ensure_default_plans_installed, installed_name

    steps = "allreduce:1024:float32:sum:check"
    output = _drive(tmp_path, "threads", "2", steps, LOOM_CACHE_DIR=str(tmp_path / "fresh"))
    results = _results(output)
    assert results[f"0 {steps}"] == results[f"1 {steps}"] == "ncclSuccess check ok", output
    assert output.count("installed the bundled Loom plans of ") == 1, output
    assert f"into {tmp_path / 'fresh' / 'default'}" in output
    assert "Loom plan 'allreduce_allpairs_packet_2r" in output
    assert "no Loom plans are registered" not in output
    folder = tmp_path / "fresh" / "default"
    assert sorted(path.name for path in folder.glob("*.json.gz")) == [installed_name(path) for path in bundled_plans()]
    assert not list(folder.glob("*.json"))
    # The Python installer takes the library's install for its own, and the library the Python one's.
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path / "fresh"))
    assert not ensure_default_plans_installed()
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path / "python"))
    assert ensure_default_plans_installed()
    again = _drive(tmp_path, "threads", "2", steps, LOOM_CACHE_DIR=str(tmp_path / "python"))
    assert "installed the bundled Loom plans" not in again and "Loom plan 'allreduce_allpairs_packet_2r" in again
    # LOOM_DEFAULT_PLANS=0: nothing installed, every call forwarded.
    off = _drive(tmp_path, "threads", "2", steps, LOOM_CACHE_DIR=str(tmp_path / "off"), LOOM_DEFAULT_PLANS="0")
    assert not (tmp_path / "off").exists() and "no Loom plans are registered" in off


def test_coverage_report_counts_every_call(tmp_path: Path) -> None:
    from loom.errors import LoomError
    from loom.runtime.nccl_coverage import format_coverage, read_coverage

    steps = ";".join(
        [
            "allreduce:1024:float32:sum",
            "allreduce:1024:float32:sum",
            "allreduce:64:float32:prod",
            "allgather:100:float32",
            "reducescatter:64:float32:sum",
            "reduce:16:float32:prod:1",
            "allreduce:0:float32:sum",
            "enter:0,0",  # the driver destroys the split at the end; its parent is never destroyed
            "allreduce:256:float32:sum",
        ]
    )
    output = _drive(tmp_path, "threads", "2", steps, LOOM_NCCL_STATS=str(tmp_path / "coverage.%p.json"))
    files = list(tmp_path.glob("coverage.*.json"))
    assert len(files) == 1, files
    document = json.loads(files[0].read_text())
    # %p is the process id, the one of the log's "host:pid:tid" lines.
    pid = re.search(r"^[^:\s]+:(\d+):\d+ \[-1\] LOOM INFO ncclCommInitRank rank 0/2", output, re.M)[1]
    assert files[0].name == f"coverage.{pid}.json" and document["pid"] == int(pid), (files, document["pid"])
    communicators = sorted(document["communicators"], key=lambda c: (c["origin"].split(" of ")[0], c["rank"]))
    assert [(c["origin"].split(" of ")[0], c["rank"], c["world_size"], c["closed"]) for c in communicators] == [
        ("ncclCommInitRank", 0, 2, False),
        ("ncclCommInitRank", 1, 2, False),
        ("ncclCommSplit", 0, 2, True),
        ("ncclCommSplit", 1, 2, True),
    ]
    rows = {(r["call"], r["route"], r["reason"]): (r["calls"], r["bytes"]) for r in communicators[0]["rows"]}
    assert rows == {
        ("AllReduce", "loom", "plan"): (2, 8192),
        ("AllReduce", "nccl", "op_missing"): (1, 256),
        ("AllReduce", "nothing", "empty"): (1, 0),
        ("AllGather", "loom", "plan"): (1, 400),
        ("ReduceScatter", "loom", "plan"): (1, 512),  # the whole send buffer: 64 x 4 bytes x 2 ranks
        ("Reduce", "nccl", "op_missing"): (1, 64),
    }
    assert [(r["call"], r["route"], r["calls"], r["bytes"]) for r in communicators[2]["rows"]] == [
        ("AllReduce", "loom", 1, 1024)
    ]
    # The log's table at exit for the parent (never destroyed) and at ncclCommDestroy for the split.
    assert re.search(
        r"coverage of comm \d+ \(ncclCommInitRank\) rank 0/2: Loom plans ran 4 of 6 calls between ranks \(66\.7%\)"
        r" and 9104 of 9424 bytes \(96\.6%\)",
        output,
    ), output
    assert re.search(r"LOOM INFO   Reduce +nccl +op_missing +1 calls +64 bytes", output), output
    assert re.search(r"coverage of comm \d+ \(ncclCommSplit of comm \d+ \(color 0, key 0\)\) rank 0/2", output), output
    summary = read_coverage(files)
    assert summary.communicators == 4
    assert summary.total(["loom"]) == (10, 2 * 9104 + 2 * 1024)
    assert format_coverage(summary).startswith(
        "1 process, 4 communicators: Loom plans ran 10 of 14 calls between ranks (71.4%)"
    )
    (tmp_path / "other.json").write_text('{"format": "something else"}')
    with pytest.raises(LoomError, match="other.json: not a coverage report of libloom_nccl.so"):
        read_coverage([tmp_path / "other.json"])


def test_a_shape_without_bundled_plans_compiles_its_plans_on_first_use(tmp_path: Path) -> None:
    steps = "allreduce:1000:float32:sum:check;allreduce:900:float32:sum:check;allgather:100:float32:check"
    cache = {"LOOM_CACHE_DIR": str(tmp_path / "cache")}
    output = _drive(tmp_path, "threads", "3", steps, **cache)
    results = _results(output)
    for rank in range(3):
        for step in steps.split(";"):
            assert results[f"{rank} {step}"] == "ncclSuccess check ok", output
    # One compile per plan (the second all-reduce's size is in the first one's range), by rank 0.
    assert output.count("rank 0/3: compiled plan 'allreduce_allpairs_packet_3r_") == 1, output
    assert "rank 2/3 AllGather 100 x float32 out of place: Loom plan 'allgather_fullmesh_packet_3r_" in output
    assert len(list((tmp_path / "cache" / "jit").glob("*.json"))) == 2
    assert not [line for line in _fake_log(tmp_path) if "ncclAllReduce" in line or "ncclAllGather" in line]

    # Inside a group (nccl-tests groups every call) the plan is compiled at ncclGroupEnd, where each
    # communicator runs on a thread of its own; the stand-in NCCL computes nothing, so a right result is Loom's.
    fresh = {"LOOM_CACHE_DIR": str(tmp_path / "fresh")}
    grouped = "group;allreduce:950:float32:sum:check;allgather:100:float32:check;allreduce:900:float32:sum:check;end"
    output = _drive(tmp_path, "threads", "3", grouped, **fresh)
    results = _results(output)
    for step in grouped.split(";")[1:-1]:
        assert all(results[f"{rank} {step}"] == "ncclSuccess check ok" for rank in range(3)), output
    assert output.count("rank 0/3: compiled plan") == 2, output
    # One thread driving every rank (ncclCommInitAll, a group per step across the communicators).
    steps_all = "allreduce:1000:float32:sum:check;allgather:100:float32:check"
    output = _drive(tmp_path, "initall", "3", steps_all, **fresh)
    results = _results(output)
    assert all(
        results[f"{rank} {step}"] == "ncclSuccess check ok" for rank in range(3) for step in steps_all.split(";")
    )

    # No compiler (a missing interpreter): said once, and the calls go to NCCL with that reason.
    broken = _drive(tmp_path, "threads", "3", steps, LOOM_PYTHON=str(tmp_path / "no-python"), **cache)
    assert broken.count("no plan for allreduce over this shape could be compiled; such calls go to NCCL") == 3
    assert "cannot start" in broken and "forwarded to NCCL: no Loom plan fits, and none could be compiled" in broken
    off = _drive(tmp_path, "threads", "3", "allreduce:1000:float32:sum", LOOM_NCCL_JIT="0", **cache)
    assert "forwarded to NCCL: no Loom plan fits (allreduce, 3 ranks" in off and "compiled plan" not in off


def test_a_shape_no_library_algorithm_runs_forwards_with_no_plan_asking_once(tmp_path: Path) -> None:
    # 12 ranks on one host: the library's algorithms run 2 to 8 on one node. Rank 0 asks the compiler once
    # per collective; every size of it then goes to NCCL as having no plan (nothing failed), untried.
    steps = "allreduce:1000:float32:sum;allreduce:2000:float32:sum;allgather:100:float32"
    output = _drive(tmp_path, "threads", "12", steps, LOOM_CACHE_DIR=str(tmp_path / "cache"))
    results = _results(output)
    assert all(results[f"{rank} {step}"] == "ncclSuccess" for rank in range(12) for step in steps.split(";")), output
    said = "rank 0/12: such calls go to NCCL: loom jit-plan: no library algorithm serves"
    assert output.count(said + " allreduce of 4000 bytes over 12 ranks") == 1, output
    assert output.count(said + " allgather") == 1, output
    assert "AllReduce 2000 x float32 sum out of place: forwarded to NCCL: no Loom plan fits (allreduce, 12" in output
    assert "none could be compiled" not in output
    assert len([line for line in _fake_log(tmp_path) if "ncclAllReduce" in line]) == 24
    # Grouped, the JIT answers at ncclGroupEnd, and the calls go to NCCL in a group of their own.
    output = _drive(
        tmp_path, "threads", "12", "group;allreduce:1000:float32:sum;end", LOOM_CACHE_DIR=str(tmp_path / "c2")
    )
    assert all(_results(output)[f"{rank} allreduce:1000:float32:sum"] == "ncclSuccess" for rank in range(12)), output
    assert len([line for line in _fake_log(tmp_path) if "ncclAllReduce" in line]) == 24 + 12


def test_a_group_of_sends_to_itself_is_a_local_copy_on_one_rank(tmp_path: Path) -> None:
    # torch's all-to-all on a job of one rank: a grouped send to itself and receive from itself.
    output = _drive(tmp_path, "threads", "1", "group;send:12:float32:0;recv:12:float32:0:check;end")
    assert "rank 0 recv:12:float32:0:check -> ncclSuccess check ok" in output, output
    assert "ncclSend" not in [line.split()[1] for line in _fake_log(tmp_path)], output


@pytest.mark.parametrize("world", [2, 3, 4])
def test_gather_and_scatter_run_over_send_and_recv(world: int, tmp_path: Path) -> None:
    """The root's sends or receives with each rank (over each pair's link on more than two ranks), its own
    piece a local copy; alone and in a group; nothing reaches NCCL."""
    last = world - 1
    steps = f"gather:50:float32:0:check;gather:7:int32:{last}:check;scatter:64:float32:{last}:check"
    steps += ";group;scatter:9:int32:0:check;end"
    output = _drive(tmp_path, "threads", str(world), steps)
    checks = [line for line in output.splitlines() if " check " in line]
    assert len(checks) == 4 * world and all(line.endswith("check ok") for line in checks), output
    log = [line.split()[1] for line in _fake_log(tmp_path)]
    assert not {"ncclGather", "ncclScatter", "ncclSend", "ncclRecv"} & set(log), log


@pytest.mark.parametrize("one_launch", [False, True])
@pytest.mark.parametrize("world", [3, 4])
def test_send_and_recv_on_more_ranks_run_over_links_of_two(world: int, one_launch: bool, tmp_path: Path) -> None:
    """A ring exchange in one group (each rank sends to the next and receives from the previous), a pipeline
    of lone sends down the ranks, a group in which some ranks take no part and one pair moves two messages:
    each pair gets a link of two ranks at its first message, and every call runs on Loom. With
    LOOM_P2P_ONE_LAUNCH=1 a group's rounds with several peers are one launch (Executor::executeCountedGroup)."""
    ring = ["group"]
    for rank in range(world):
        ring += [f"r{rank}@send:{100 + rank}:float32:{(rank + 1) % world}"]
        ring += [f"r{rank}@recv:{100 + (rank - 1) % world}:float32:{(rank - 1) % world}:check"]
    ring += ["end"]
    pipeline = []
    for stage in range(world - 1):
        pipeline += [f"r{stage}@send:64:int32:{stage + 1}", f"r{stage + 1}@recv:64:int32:{stage}:check"]
    partial = ["group", "r0@send:5:float32:2", "r0@send:6:int32:2", "r2@recv:5:float32:0:check"]
    partial += ["r2@recv:6:int32:0:check", "end"]
    stats = tmp_path / "coverage.json"
    output = _drive(
        tmp_path,
        "threads",
        str(world),
        ";".join(ring + pipeline + partial),
        LOOM_NCCL_STATS=str(stats),
        LOOM_P2P_ONE_LAUNCH="1" if one_launch else "0",
    )
    checks = [line for line in output.splitlines() if " check " in line]
    assert len(checks) == world + (world - 1) + 2, output
    # The ring's send and receive go over two links: one launch together, else one each. Each lone send or
    # receive of the pipeline is one, and the two messages of ranks 0 and 2 (two rounds of one link) one each.
    launches = {c["rank"]: c["launches"] for c in json.loads(stats.read_text())["communicators"]}
    ring_launches = 1 if one_launch else 2
    expected = {rank: ring_launches + (rank < world - 1) + (rank > 0) + 2 * (rank in (0, 2)) for rank in range(world)}
    assert launches == expected, (launches, output)
    assert all(line.endswith("check ok") for line in checks), output
    assert "point_to_point_link" not in output or "forwarded" not in output, output
    log = [line.split()[1] for line in _fake_log(tmp_path)]
    assert "ncclSend" not in log and "ncclRecv" not in log, log
    assert "Loom plan 'alltoallv_fullmesh_2r_0_1073741824'" in output, "the bundled plan of the pair"
    assert "compiled plan" not in output, output


@pytest.mark.parametrize("world", [2, 3])
def test_small_rounds_take_the_packet_plan_under_loom_p2p_packet_bytes(world: int, tmp_path: Path) -> None:
    """LOOM_P2P_PACKET_BYTES=4096: a round whose larger message is at most 4 KiB runs the eager packet plan of the
    pair (compiled once on first use, over the communicator of two or over a link), a larger one the pair's plan;
    an exchange of a small and a large message goes by the large one. Data checked, nothing forwarded."""
    steps = [
        "r0@send:1000:float32:1",
        "r1@recv:1000:float32:0:check",  # 4000 bytes: packets
        "r0@send:2000:float32:1",
        "r1@recv:2000:float32:0:check",  # 8000 bytes: the pair's plan
        "group",
        "r0@send:10:int32:1",
        "r0@recv:3000:float32:1:check",
        "r1@recv:10:int32:0:check",
        "r1@send:3000:float32:0",
        "end",  # 40 and 12000 bytes: by the larger, the pair's plan
        "r1@send:7:float32:0",
        "r0@recv:7:float32:1:check",  # packets again, the plan kept
    ]
    output = _drive(tmp_path, "threads", str(world), ";".join(steps), LOOM_P2P_PACKET_BYTES="4096")
    checks = [line for line in output.splitlines() if " check " in line]
    assert len(checks) == 5 and all(line.endswith("check ok") for line in checks), output
    assert output.count("compiled plan 'alltoallv_packet_2r_0_4096'") == 2, "once per end of the pair"
    log = [line.split()[1] for line in _fake_log(tmp_path)]
    assert "ncclSend" not in log and "ncclRecv" not in log, log


@pytest.mark.parametrize(
    ("variable", "value", "refusal"),
    [
        ("LOOM_P2P_PACKET_BYTES", "2MiB", "expected a byte count from 0 (off) to 1048576"),
        ("LOOM_P2P_ONE_LAUNCH", "maybe", "expected 1/0, true/false, yes/no or on/off"),
    ],
)
def test_a_malformed_point_to_point_setting_is_refused_naming_it(
    variable: str, value: str, refusal: str, tmp_path: Path
) -> None:
    done = subprocess.run(
        [str(_built(DRIVER)), "threads", "2", "r0@send:4:float32:1;r1@recv:4:float32:0"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env=_env(tmp_path, **{variable: value}),
    )
    assert f"{variable}='{value}': {refusal}" in done.stdout + done.stderr


@pytest.mark.parametrize("world", [2, 3])
def test_a_send_and_recv_in_place_stage_the_bytes_to_send(world: int, tmp_path: Path) -> None:
    """nccl-tests' sendrecv in place: one buffer sent to the next rank and received into from the previous,
    in one group. The all-to-all-v plan runs out of place, so the bytes to send go through the communicator's
    scratch first; on Loom, every rank's buffer then holds its sender's values (twice: the scratch is reused,
    then grown)."""
    steps = []
    for count in (1000, 1000, 300000):
        steps += [f"r{r}@inplace:{count}:float32:{(r + 1) % world}:{(r - 1) % world}:check" for r in range(world)]
    # A send to itself in place in the same group: its staged bytes share the scratch with the exchange's.
    steps += [f"r{r}@inplaceself:700:float32:{1 - r}:check" for r in range(2)]
    output = _drive(tmp_path, "threads", str(world), ";".join(steps))
    checks = [line for line in output.splitlines() if " check " in line]
    assert len(checks) == 3 * world + 2 and all(line.endswith("check ok") for line in checks), output
    log = [line.split()[1] for line in _fake_log(tmp_path)]
    assert "ncclSend" not in log and "ncclRecv" not in log, log


def test_a_killed_peer_is_an_asynchronous_error_within_a_second(tmp_path: Path) -> None:
    """Issue 41: rank 1 is killed 300 ms after an all-reduce; rank 0, asking ncclCommGetAsyncError every 10 ms
    as torch's watchdog does, gets ncclRemoteError naming rank 1 within a second of the kill (the bootstrap connection
    closes when the process dies), and its later calls fail at once, as NCCL's do after an asynchronous error,
    rather than wait for the dead rank (this 1 KiB all-reduce's packet reads would wait for their timeout)."""
    steps = "allreduce:1024:float32:sum:check;r1@die:300;r0@watch:5000;r0@allreduce:1024:float32:sum"
    started = time.monotonic()
    output = _drive_processes(tmp_path, 2, steps, killed=(1,))
    assert time.monotonic() - started < 15, output
    watched = re.search(r"rank 0 watch async=(\w+) after (\d+) ms \| (.*)", output)
    assert watched, output
    assert watched[1] == "ncclRemoteError" and int(watched[2]) < 1300, output
    assert "rank 1 closed the bootstrap connection to this rank without a goodbye" in watched[3], output
    assert "LOOM WARN" in output and "asynchronous error ncclRemoteError" in output, output
    refused = "rank 0 allreduce:1024:float32:sum -> ncclRemoteError | ncclAllReduce: the communicator has an async"
    assert refused in output, output


def test_survivors_of_a_killed_peer_shrink_it_out_and_go_on(tmp_path: Path) -> None:
    """Issue 41's recovery through the NCCL API: rank 2 of 3 is killed; the survivors see ncclRemoteError,
    their next call on the parent is refused at once, and ncclCommShrink leaving rank 2 out gives a 2-rank
    communicator whose all-reduces (an LL plan and one that writes into the peer's buffer) are correct."""
    steps = [
        "allreduce:1024:float32:sum:check",
        "r2@die:300",
        "r0@watch:5000",
        "r1@watch:5000",
        "allreduce:1024:float32:sum",
        "shrink:2",
        "allreduce:1024:float32:sum:check",
        "allreduce:300000:float32:sum:check",
        "leave",
    ]
    output = _drive_processes(tmp_path, 3, ";".join(steps), killed=(2,))
    results = _results(output)
    for rank in (0, 1):
        assert results[f"{rank} allreduce:1024:float32:sum"].startswith("ncclRemoteError"), output
        assert results[f"{rank} shrink:2"] == "ncclSuccess", output
        assert results[f"{rank} allreduce:1024:float32:sum:check"] == "ncclSuccess check ok", output
        assert results[f"{rank} allreduce:300000:float32:sum:check"] == "ncclSuccess check ok", output
    assert re.search(r"ncclCommShrink of comm \d+ \(rank 2 left out\) rank 1/2", output), output


def test_a_peer_that_destroys_its_communicator_and_exits_is_no_asynchronous_error(tmp_path: Path) -> None:
    """A rank that leaves on purpose (its communicator destroyed, its bootstrap saying goodbye as it closes) is
    no fault: a survivor whose watchdog still asks (torch asks while a finished call is not yet reaped) gets
    ncclSuccess. The destroy itself does not wait for the survivor."""
    steps = "allreduce:1024:float32:sum:check;r0@watch:1500"
    output = _drive_processes(tmp_path, 2, steps)
    watched = re.search(r"rank 0 watch async=(\w+) after (\d+) ms", output)
    assert watched and watched[1] == "ncclSuccess" and int(watched[2]) >= 1500, output
    assert "LOOM WARN" not in output, output


def test_a_peer_that_exits_with_its_communicator_open_is_no_asynchronous_error(tmp_path: Path) -> None:
    """A torch job often never destroys its communicators: the library says goodbye for them at exit, so the
    survivor that still asks sees no error for a process that merely ended."""
    steps = "allreduce:1024:float32:sum:check;r1@exit;r0@watch:1500"
    output = _drive_processes(tmp_path, 2, steps)
    watched = re.search(r"rank 0 watch async=(\w+) after (\d+) ms", output)
    assert watched and watched[1] == "ncclSuccess" and int(watched[2]) >= 1500, output


def test_links_between_processes_carry_send_and_recv(tmp_path: Path) -> None:
    # Three processes: each pair's link is a communicator of two processes, whose host buffers are staged in
    # shared memory (the multi-process CPU backend), made by the pair's first message.
    world = 3
    steps = ["group"]
    for rank in range(world):
        steps += [f"r{rank}@send:{50 + rank}:float32:{(rank + 1) % world}"]
        steps += [f"r{rank}@recv:{50 + (rank - 1) % world}:float32:{(rank - 1) % world}:check"]
    steps = ";".join([*steps, "end", "r2@send:8:int32:0", "r0@recv:8:int32:2:check"])
    output = _drive_processes(tmp_path, world, steps)
    checks = [line for line in output.splitlines() if " check " in line]
    assert len(checks) == world + 1 and all(line.endswith("check ok") for line in checks), output
    assert "ncclSend" not in [line.split()[1] for line in _fake_log(tmp_path)], output


@pytest.mark.parametrize("world", [2, 3])
def test_calls_in_a_symmetric_window_exchange_no_addresses(world: int, tmp_path: Path) -> None:
    """ncclCommWindowRegister with NCCL_WIN_COLL_SYMMETRIC: all-gathers of 1.2 MB (plans that write into the
    peers' outputs) at five places of the window run on Loom, checked; one call sets up and meets the other
    ranks, the other four find every rank's buffers from the window. Without the flag every call exchanges."""
    output = _drive(tmp_path, "threads", str(world), "window:300000:5:check;window:300000:5:0:check")
    results = _results(output)
    for rank in range(world):
        assert results[f"{rank} window:300000:5:check"] == "ncclSuccess check ok", output
        assert results[f"{rank} window:300000:5:0:check"] == "ncclSuccess check ok", output
    assert output.count("Loom's symmetric window 1 (so far on this communicator: 5 calls found") == world, output
    assert output.count("5 calls found their buffers in windows, 1 exchanged addresses") == world, output
    assert output.count("the real NCCL's only (not NCCL_WIN_COLL_SYMMETRIC") == world, output
    assert output.count("AllGather     loom       plan                             10 calls") == world, output


@pytest.mark.parametrize(("hosts", "plan"), [("ab", "alltoallv_fullmesh_2x1"), ("aabb", "alltoallv_fullmesh_2r_0")])
def test_send_and_recv_across_nodes_run_over_port_channels(hosts: str, plan: str, tmp_path: Path) -> None:
    """Ranks on two hosts: a ring exchange in one group and a lone send. A pair across the hosts runs the
    bundled two-node plan of two ranks (port channels: the proxy carries the entries and the data over TCP),
    a pair on one host the one-node plan; nothing goes to NCCL and nothing is compiled."""
    world = len(hosts)
    steps = ["group"]
    for rank in range(world):
        steps += [f"r{rank}@send:{300 + rank}:float32:{(rank + 1) % world}"]
        steps += [f"r{rank}@recv:{300 + (rank - 1) % world}:float32:{(rank - 1) % world}:check"]
    steps += ["end", f"r0@send:8:int32:{world - 1}", f"r{world - 1}@recv:8:int32:0:check"]
    output = _drive_processes(tmp_path, world, ";".join(steps), list(hosts))
    checks = [line for line in output.splitlines() if " check " in line]
    assert len(checks) == world + 1 and all(line.endswith("check ok") for line in checks), output
    assert "ncclSend" not in [line.split()[1] for line in _fake_log(tmp_path)], output
    assert "Loom plan 'alltoallv_fullmesh_2x1_0_1073741824'" in output, output
    assert f"Loom plan '{plan}" in output and "compiled plan" not in output, output
