"""bench/nvlink_ceiling.py's logic on a CuPy stand-in (tests/bench/fake_cupy.py): every pattern copies what
it should to where it should, and the bench's own check catches a copy that did not happen. The timings
themselves need GPUs (scripts/multi_gpu_run.sh nvlink)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from fake_cupy import make_fake_cupy

ROOT = Path(__file__).resolve().parents[2]


def load_bench(monkeypatch, gpus: int):
    fake = make_fake_cupy(gpus)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    spec = importlib.util.spec_from_file_location("nvlink_ceiling", ROOT / "bench" / "nvlink_ceiling.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "nvlink_ceiling", module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module, fake


@pytest.mark.parametrize("gpus", [2, 4])
def test_every_pattern_runs_and_fills_its_slots(monkeypatch, tmp_path, gpus):
    bench, _ = load_bench(monkeypatch, gpus)
    out = tmp_path / "nvlink.json"
    argv = ["nvlink_ceiling.py", "--mib", "1", "--repeats", "1", "--blocks-per-peer", "8", "--out", str(out)]
    monkeypatch.setattr(sys, "argv", argv)
    bench.main()
    rows = json.loads(out.read_text())["rows"]
    patterns = {row["pattern"] for row in rows}
    assert patterns == {
        "mesh-ce", "ring-ce", "shift-ce", "mesh-put", "mesh-fanout", "mesh-get", "ring-put", "ring-get", "ring-ce+put"
    }  # fmt: skip
    sent = {row["pattern"]: row["gbs_per_gpu"] * row["seconds"] * 1e9 for row in rows}
    assert sent["ring-ce"] == pytest.approx(1 << 20)
    assert sent["shift-ce"] == pytest.approx((gpus - 1) << 20)
    assert {row["ce_fraction"] for row in rows if row["pattern"] == "ring-ce+put"} == set(bench.CE_FRACTIONS)


def test_the_check_catches_a_copy_engine_part_left_out(monkeypatch):
    bench, fake = load_bench(monkeypatch, 4)
    host = bench.Host(1 << 20)
    copy = fake.cuda.runtime.memcpyPeerAsync

    def only_whole_pieces(dst, dst_device, src, src_device, size, stream):
        if size == host.piece:
            copy(dst, dst_device, src, src_device, size, stream)

    monkeypatch.setattr(fake.cuda.runtime, "memcpyPeerAsync", only_whole_pieces)
    host.time(bench.Case("ring-ce"), 1)  # whole pieces: fine
    with pytest.raises(SystemExit, match="ring-ce\\+put: GPU 1's slot from GPU 0 is wrong"):
        host.time(bench.Case("ring-ce+put", 8, False, 4, 0.5), 1)


def test_shift_ce_sends_to_each_peer_in_turn(monkeypatch):
    bench, _ = load_bench(monkeypatch, 4)
    host = bench.Host(1 << 20)
    assert host.peers(1, ring=False) == [2, 3, 0]
    assert host.peers(1, ring=True) == [2]
