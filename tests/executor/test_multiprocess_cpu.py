"""The CPU backend with ranks as processes (``loom.Communicator(host_only=True)`` under ``loom.launch`` or
torchrun's variables): every collective of the API, small and large, in and out of place, against numpy,
with host memory shared between the processes (docs/testing.md)."""

from __future__ import annotations

import pytest
from multiprocess_jobs import finish, launch, results, start_ranks

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("nproc", [2, 4])
def test_every_collective_across_processes_under_loom_launch(nproc):
    run = launch(nproc, "collectives", limit_s=90)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    found = results(run.stdout)
    assert sorted(found) == list(range(nproc)), run.stdout[-4000:]
    for records in found.values():
        assert records[0]["checked"] == 48


def test_every_collective_with_torchrun_variables():
    codes, text = finish(start_ranks(2, "collectives"), limit_s=90)
    assert codes == [0, 0], text[-4000:]
    assert sorted(results(text)) == [0, 1]


@pytest.mark.parametrize("nproc", [3, 5])
def test_world_sizes_without_bundled_plans_compile_theirs_on_first_use(nproc, tmp_path):
    # No bundled plan is for 3 or 5 ranks: rank 0 compiles each call's library plan through the JIT, the
    # others take its text over the bootstrap; the second size range and later calls find them registered.
    run = launch(nproc, "collectives", env={"LOOM_CACHE_DIR": str(tmp_path)}, limit_s=100)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    found = results(run.stdout)
    assert sorted(found) == list(range(nproc)), run.stdout[-4000:]
    assert all(records[0]["checked"] == 48 for records in found.values())
    assert list((tmp_path / "jit").glob("*.json")), "rank 0 cached what it compiled"


def test_a_jit_plan_one_group_compiled_is_agreed_again_in_another_that_shares_ranks(tmp_path):
    # Ranks 1 and 2 are in both 3-rank groups: the plan the first compiled is in their registry, not in rank
    # 3's; the second group exchanges it all the same, so all three run one plan.
    run = launch(4, "jit_overlapping_groups", env={"LOOM_CACHE_DIR": str(tmp_path)}, limit_s=60)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert sorted(results(run.stdout)) == [0, 1, 2, 3], run.stdout[-4000:]


@pytest.mark.parametrize("nproc", [2, 4])
def test_all_to_all_v_and_send_recv_across_two_hosts(nproc, tmp_path):
    # Processes acting as two hosts: the peers across them are reached over port channels (TCP), the bundled
    # two-node plans (2 x 1, 2 x 2), not the JIT's.
    processes = start_ranks(nproc, "two_hosts", env={"LOOM_CACHE_DIR": str(tmp_path)})
    codes, output = finish(processes, 90)
    assert codes == [0] * nproc, output[-4000:]
    found = results(output)
    assert sorted(found) == list(range(nproc)), output[-4000:]
    assert all(records[0]["checked"] == 4 for records in found.values())


@pytest.mark.parametrize("nproc", [3, 4])
def test_all_to_all_v_across_processes(nproc, tmp_path):
    # Random splits per call: each rank's entries differ, and its output is written by every peer.
    run = launch(nproc, "alltoallv", env={"LOOM_CACHE_DIR": str(tmp_path)}, limit_s=90)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    found = results(run.stdout)
    assert sorted(found) == list(range(nproc)), run.stdout[-4000:]
    assert all(records[0]["checked"] == 3 for records in found.values())


@pytest.mark.parametrize("nproc", [2, 3])
def test_all_to_all_v_in_packets_across_processes(nproc, tmp_path):
    # The eager packet plan: no handshake, the packets' flags alone tell the receivers their data is there.
    run = launch(nproc, "alltoallv_packet", env={"LOOM_CACHE_DIR": str(tmp_path)}, limit_s=90)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    found = results(run.stdout)
    assert sorted(found) == list(range(nproc)), run.stdout[-4000:]
    assert all(records[0]["checked"] == 5 for records in found.values())
