"""Faults on GPUs (issue 41): gpu/fault_check.py's cases, skipped with the reason without a GPU or torch.

- abort while a kernel spins (ranks sharing GPU 0 as threads, and one rank per GPU): abort returns within
  1 s, the kernel returns rather than traps, the CUDA context stays usable, a new communicator is correct;
- a rank killed with SIGKILL while the others' kernels wait on it (one process per GPU): each survivor
  knows within 1 s, through its next call and through comm.error(); abort takes under 1 s; the survivors
  build a communicator among themselves and get a correct all-reduce;
- a rank that never makes an LL call (ranks sharing GPU 0): the error names it as the writer of the packet
  that did not come.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECK = str(ROOT / "tests" / "executor" / "gpu" / "fault_check.py")
sys.path.insert(0, str(ROOT / "tests" / "runtime"))
sys.path.insert(0, str(ROOT / "tests" / "executor"))
from multiprocess_jobs import finish, results, start_ranks  # noqa: E402
from test_runtime_gpu import GPUS  # noqa: E402
from test_shared_gpu import _run  # noqa: E402

pytestmark = pytest.mark.gpu
ENVIRONMENT = {"NCCL_NVLS_ENABLE": "0", "LOOM_DEVICE_TIMEOUT_MS": "20000", "LOOM_BOOTSTRAP_TIMEOUT_MS": "20000"}


def _need(gpus: int) -> None:
    if GPUS < gpus:
        pytest.skip(f"needs {gpus} GPU(s), this host has {GPUS}")
    pytest.importorskip("torch", reason="the GPU fault checks use torch tensors")


@pytest.mark.timeout(200)
@pytest.mark.parametrize("ranks", [2, 3])
def test_abort_while_a_kernel_spins_on_ranks_sharing_a_gpu(ranks):
    _need(1)
    output = _run([CHECK, "abort", "--share-gpu", str(ranks)], timeout=150, **ENVIRONMENT)
    found = results(output)
    print(f"{ranks} ranks sharing a GPU: abort returned in {found[0][0]['abort_s']:.3f} s; {found[0][0]['stopped']}")
    assert found[0][0]["abort_s"] < 1.0, found


@pytest.mark.timeout(200)
def test_abort_while_a_kernel_spins_one_rank_per_gpu():
    _need(2)
    codes, text = finish(start_ranks(2, "abort", env=ENVIRONMENT, program=CHECK), limit_s=150)
    assert codes == [0, 0] and "FAIL" not in text, text[-4000:]
    assert results(text)[0][0]["abort_s"] < 1.0


@pytest.mark.timeout(200)
def test_a_killed_rank_is_known_within_a_second_and_the_survivor_recovers(tmp_path):
    _need(2)
    env = {**ENVIRONMENT, "LOOM_TEST_SCRATCH": str(tmp_path)}
    codes, text = finish(start_ranks(2, "kill", env=env, program=CHECK), limit_s=150)
    assert codes[1] == -9, text[-4000:]
    assert codes[0] == 0 and "FAIL" not in text, text[-4000:]
    (record,) = results(text)[0]
    print(f"survivor: call failed {record['detect_s']:.3f} s and comm.error() {record['watch_s']:.3f} s after the kill")
    assert record["recovered_world"] == 1 and record["recovered_correct"], record


@pytest.mark.timeout(200)
def test_a_stalled_rank_on_a_packet_plan_is_named_on_a_gpu():
    _need(1)
    environment = {**ENVIRONMENT, "LOOM_DEVICE_TIMEOUT_MS": "3000"}
    output = _run([CHECK, "stalled", "--share-gpu", "4"], timeout=150, **environment)
    found = {rank: records[0] for rank, records in results(output).items() if rank != 2}
    assert len(found) == 3 and all(record["error"] for record in found.values()), output[-4000:]
    print({rank: (record["watched"][:300], record["next_call"][:600]) for rank, record in found.items()})
    # The first rank whose own read timed out traps the shared context (torch's synchronize raises); its
    # comm.error() says so, and its next call names the writer of the packet from its record.
    assert any("trapped on the device" in record["watched"] for record in found.values()), found
    errors = {rank: record["error"] + " | " + record["next_call"] for rank, record in found.items()}
    named = [text for text in errors.values() if "the packet it waited for is rank 2's to write" in text]
    assert named, errors
    assert not any(re.search(r"is rank [013]'s to write", text) for text in errors.values()), errors
