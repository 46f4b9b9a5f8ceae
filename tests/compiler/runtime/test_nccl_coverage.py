"""loom.runtime.nccl_coverage and `loom nccl-coverage`: the LOOM_NCCL_STATS files of libloom_nccl.so (one per
process, schemas/nccl_coverage.schema.json) summed over every communicator of every rank. The library's side
is tested in tests/nccl/test_nccl_library.py; here the files are written by hand, so no native build is needed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from loom.errors import LoomError
from loom.runtime.nccl_coverage import check_report, format_coverage, read_coverage, schema_path
from loom.tools.cli import main


def _row(call: str, route: str, reason: str, calls: int, nbytes: int) -> dict:
    return {"call": call, "route": route, "reason": reason, "calls": calls, "bytes": nbytes}


def _communicator(
    serial: int, rank: int, rows: list[dict], origin: str = "ncclCommInitRank", launches: int | None = None
) -> dict:
    communicator = {
        "serial": serial,
        "origin": origin,
        "rank": rank,
        "world_size": 2,
        "cuda_device": rank,
        "closed": serial == 1,
        "rows": rows,
    }
    if launches is not None:  # files written before the field was added lack it
        communicator["launches"] = launches
    return communicator


def _report(pid: int, communicators: list[dict]) -> dict:
    return {"format": "loom-nccl-coverage", "version": 1, "host": "node1", "pid": pid, "communicators": communicators}


def _write(folder: Path, name: str, document: object) -> Path:
    path = folder / name
    path.write_text(json.dumps(document))
    return path


@pytest.fixture
def job(tmp_path: Path) -> list[Path]:
    """Two ranks, each a process with the default communicator and a split of it."""
    files = []
    for rank in (0, 1):
        default = [
            _row("AllReduce", "loom", "plan", 90 + rank, 9_000_000),
            _row("AllReduce", "nccl", "type_missing", 2, 1_000),
            _row("Broadcast", "nothing", "empty", 5, 0),
        ]
        split = [_row("AllGather", "loom", "plan", 7, 70_000), _row("Reduce", "nccl", "no_loom_collective", 1, 64)]
        communicators = [
            _communicator(1, rank, default, launches=90 + rank),
            _communicator(2, rank, split, origin=f"ncclCommSplit of comm 1 (color 0, key {rank})"),
        ]
        files.append(_write(tmp_path, f"coverage.node1.{100 + rank}.json", _report(100 + rank, communicators)))
    return files


def test_sums_every_communicator_of_every_process(job: list[Path]) -> None:
    coverage = read_coverage(job)
    assert (coverage.processes, coverage.communicators) == (2, 4)
    assert coverage.rows == {
        ("AllReduce", "loom", "plan"): [181, 18_000_000],
        ("AllReduce", "nccl", "type_missing"): [4, 2_000],
        ("Broadcast", "nothing", "empty"): [10, 0],
        ("AllGather", "loom", "plan"): [14, 140_000],
        ("Reduce", "nccl", "no_loom_collective"): [2, 128],
    }
    # Empty calls move nothing between ranks: out of both sides of the share.
    assert coverage.total(["loom"]) == (195, 18_140_000)
    calls_share, bytes_share = coverage.loom_share()
    assert calls_share == pytest.approx(195 / 201) and bytes_share == pytest.approx(18_140_000 / 18_142_128)
    lines = format_coverage(coverage).splitlines()
    assert lines[0] == (
        "2 processes, 4 communicators: Loom plans ran 195 of 201 calls between ranks (97.0%)"
        " and 18140000 of 18142128 bytes (100.0%), in 181 launches"
    )
    assert lines[1].split() == ["call", "route", "reason", "calls", "bytes"]
    assert [line.split() for line in lines[2:]] == [
        ["AllGather", "loom", "plan", "14", "140000"],
        ["AllReduce", "loom", "plan", "181", "18000000"],
        ["AllReduce", "nccl", "type_missing", "4", "2000"],
        ["Broadcast", "nothing", "empty", "10", "0"],
        ["Reduce", "nccl", "no_loom_collective", "2", "128"],
    ]


def test_a_job_with_nothing_between_ranks_is_all_loom(tmp_path: Path) -> None:
    only_local = _report(7, [_communicator(1, 0, [_row("AllReduce", "local_copy", "single_rank_copy", 3, 12)])])
    coverage = read_coverage([_write(tmp_path, "one.json", only_local)])
    assert coverage.loom_share() == (1.0, 1.0)
    assert format_coverage(coverage).startswith("1 process, 1 communicator: Loom plans ran 0 of 0 calls")


def test_the_schema_accepts_what_the_library_writes_and_names_what_it_rejects(tmp_path: Path, job) -> None:
    assert schema_path().name == "nccl_coverage.schema.json"
    document = json.loads(job[0].read_text())
    check_report(document, "ok.json")
    document["communicators"][1]["rows"][0]["calls"] = -1
    with pytest.raises(LoomError, match=r"bad\.json: \$\.communicators\[1\]\.rows\[0\]\.calls: -1 is less than"):
        read_coverage([_write(tmp_path, "bad.json", document)])
    document = _report(3, [_communicator(1, 0, [_row("AllReduce", "somewhere", "plan", 1, 4)])])
    with pytest.raises(LoomError, match=r"route\.json: \$\.communicators\[0\]\.rows\[0\]\.route: 'somewhere'"):
        read_coverage([_write(tmp_path, "route.json", document)])
    del document["pid"]
    with pytest.raises(LoomError, match=r"nopid\.json: \$: 'pid' is a required property"):
        read_coverage([_write(tmp_path, "nopid.json", document)])
    with pytest.raises(LoomError, match=r"plan\.json: not a coverage report of libloom_nccl\.so"):
        read_coverage([_write(tmp_path, "plan.json", {"format_version": 1, "name": "allreduce"})])
    (tmp_path / "cut.json").write_text('{"format": "loom-nccl-coverage", "comm')
    with pytest.raises(LoomError, match=r"cut\.json: not a readable coverage report"):
        read_coverage([tmp_path / "cut.json"])


def test_command_prints_the_sum_or_says_which_file_is_wrong(
    tmp_path: Path, job: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["nccl-coverage", *map(str, job)]) == 0
    assert capsys.readouterr().out.startswith("2 processes, 4 communicators: Loom plans ran 195 of 201 calls")
    assert main(["nccl-coverage", str(tmp_path / "missing.json")]) == 1
    assert "loom nccl-coverage: " in capsys.readouterr().err
