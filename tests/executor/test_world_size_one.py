"""A job of one rank, as NCCL runs it: every collective works, in place (nothing to move) and out of place
(a copy), send/recv to the rank itself, and calls of 0 elements are no-ops. Issue 22: a one-rank
all-reduce killed the process (SIGSEGV) in the GPU build; the GPU half of this test is
tests/executor/gpu/world_size_one_check.py, run by the wrapper below on a GPU host.

Also here: Loom's shared libraries export none of the C++ library's own symbols. The crash came from
libstdc++ linked statically into each of them (the lent GPU machines' /opt/gcc) and exported from all
three, so that each bound to another's copy.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

_native = pytest.importorskip("loom._native", reason="the native module is not built")
import loom  # noqa: E402
from loom.errors import InvalidArgumentError  # noqa: E402
from loom.runtime.host_ranks import run_ranks  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "runtime"))
from test_runtime_gpu import GPUS  # noqa: E402

DTYPES = [np.float32, np.float16, np.int32, np.uint32]


def _one_rank(body):
    result = run_ranks(1, None, lambda bootstrap: body(loom.Communicator(bootstrap, host_only=True)))[0]
    if isinstance(result, BaseException):
        raise result
    return result


def _random(count: int, dtype, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(count) * 100).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_collective_in_and_out_of_place_is_the_input(dtype):
    def body(comm):
        assert comm.world_size == 1
        source = _random(1037, dtype, 1)  # odd: no collective needs whole vectors at one rank
        for name, call in [
            ("all_reduce", lambda out: comm.all_reduce(source, output=out)),
            ("all_reduce max", lambda out: comm.all_reduce(source, "max", output=out)),
            ("all_gather", lambda out: comm.all_gather(out, source)),
            ("reduce_scatter", lambda out: comm.reduce_scatter(out, source)),
            ("all_to_all", lambda out: comm.all_to_all(out, source)),
        ]:
            out = np.full_like(source, 7)
            call(out)
            np.testing.assert_array_equal(out, source, err_msg=f"{name} out of place")
        for name, call in [
            ("all_reduce", lambda t: comm.all_reduce(t, "min")),
            ("broadcast", lambda t: comm.broadcast(t, root=0)),
            ("all_gather", lambda t: comm.all_gather(t, t)),
            ("reduce_scatter", lambda t: comm.reduce_scatter(t, t)),
            ("all_to_all", lambda t: comm.all_to_all(t, t)),
        ]:
            t = source.copy()
            call(t)
            np.testing.assert_array_equal(t, source, err_msg=f"{name} in place")
        return True

    assert _one_rank(body)


def test_send_and_recv_to_itself_pair_up_in_order():
    def body(comm):
        first, second = _random(100, np.float32, 2), _random(100, np.float32, 3)
        comm.send(first, peer=0)
        comm.send(second, peer=0)
        got = [np.zeros(100, np.float32), np.zeros(100, np.float32)]
        comm.recv(got[0], peer=0)
        comm.recv(got[1], peer=0)
        np.testing.assert_array_equal(got[0], first)
        np.testing.assert_array_equal(got[1], second)
        with pytest.raises(InvalidArgumentError, match="needs a send to itself first"):
            comm.recv(got[0], peer=0)
        comm.send(first, peer=0)
        with pytest.raises(InvalidArgumentError, match="holds 200 bytes"):
            comm.recv(np.zeros(50, np.float32), peer=0)
        with pytest.raises(InvalidArgumentError, match="peer: expected a rank from 0 to 0, got 1"):
            comm.send(first, peer=1)
        return True

    assert _one_rank(body)


def test_calls_of_zero_elements_are_no_ops_and_bad_ones_still_raise():
    def body(comm):
        empty = np.zeros(0, np.float32)
        comm.all_reduce(empty)
        comm.all_gather(np.zeros(0, np.float32), empty)
        comm.reduce_scatter(np.zeros(0, np.float32), empty)
        comm.broadcast(empty, root=0)
        with pytest.raises(InvalidArgumentError, match="op: expected one of sum, min, max"):
            comm.all_reduce(empty, "prod")
        with pytest.raises(InvalidArgumentError, match="root"):
            comm.broadcast(empty, root=1)
        with pytest.raises(InvalidArgumentError, match="output: holds 4 bytes, but a local copy of 8 bytes"):
            comm.all_reduce(np.ones(2, np.float32), output=np.ones(1, np.float32))
        with pytest.raises(InvalidArgumentError, match="dtype"):
            comm.all_gather(np.ones(2, np.int32), np.ones(2, np.float32))
        return True

    assert _one_rank(body)


def _exported_cxx_runtime_symbols(library: Path) -> list[str]:
    """Symbols that only the C++ runtime library itself defines, exported by ``library``."""
    listing = subprocess.run(
        ["nm", "-DC", "--defined-only", str(library)], capture_output=True, text=True, check=True
    ).stdout
    owned = ("std::locale::classic()", "std::ios_base::Init::Init()", "__cxa_throw", "std::bad_alloc::what() const")
    return [line for line in listing.splitlines() if line.endswith(owned)]


def test_libraries_export_no_copy_of_the_cxx_runtime():
    if shutil.which("nm") is None:
        pytest.skip("nm (binutils) is not installed")
    folder = Path(_native.__file__).parent
    libraries = [Path(_native.__file__), *sorted(folder.glob("libloom_*.so"))]
    assert len(libraries) >= 3, libraries
    for library in libraries:
        assert _exported_cxx_runtime_symbols(library) == [], library


@pytest.mark.gpu
def test_world_size_one_on_a_gpu_eagerly_and_in_cuda_graphs():
    if GPUS < 1:
        pytest.skip("needs a GPU, this host has none")
    pytest.importorskip("torch", reason="the GPU check uses torch tensors")
    check = ROOT / "tests" / "executor" / "gpu" / "world_size_one_check.py"
    command = [sys.executable, "-X", "faulthandler", "-m", "loom.launch", "-n", "1", "--timeout", "240", str(check)]
    env = {**os.environ, "NCCL_NVLS_ENABLE": "0"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0 and "FAIL" not in output, output[-4000:]
