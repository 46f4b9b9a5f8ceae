"""Hosts that are network namespaces of one machine (issue 56): they share the boot id and the host name, as
containers of one node do, and must still be told apart (descriptors and Unix sockets do not cross network
namespaces). Two emulated hosts, two ranks each, run every collective of the API on the CPU backend, right,
without LOOM_TEST_HOST_ID; each rank sees 2 nodes of 2 ranks."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "executor"))
from multiprocess_jobs import WORKER, finish, results  # noqa: E402
from netns_hosts import NamespacedHosts, namespaces_refused  # noqa: E402

pytest.importorskip("loom._native", reason="the native module is not built")
REFUSED = namespaces_refused()
pytestmark = pytest.mark.skipif(REFUSED is not None, reason=f"no network namespaces here: {REFUSED}")


@pytest.mark.timeout(180)
@pytest.mark.parametrize("launcher", ["right", "wrong"])
def test_every_collective_across_two_namespaced_hosts_with_one_hostname(launcher, tmp_path):
    # "wrong": the launcher says all 4 ranks are local; the host identity wins, and one warning says so.
    with NamespacedHosts(2) as hosts:
        processes = hosts.start_ranks(
            4,
            [sys.executable, WORKER, "collectives"],
            env={"LOOM_CACHE_DIR": str(tmp_path)},
            launcher_local=4 if launcher == "wrong" else None,
        )
        codes, output = finish(processes, 150)
    warned = "host identity: 2 of the job's 4 ranks share this host" in output
    assert warned == (launcher == "wrong"), output[-3000:]
    if warned:
        assert "network namespace net:[" in output and "torchrun says 4 ranks are local" in output, output[-3000:]
    assert codes == [0, 0, 0, 0], output[-6000:]
    found = results(output)
    assert sorted(found) == [0, 1, 2, 3], output[-4000:]
    for records in found.values():
        assert records[0]["checked"] == 48, records
        assert records[0]["nodes"] == 2 and records[0]["ranks_per_node"] == 2, records


@pytest.mark.timeout(180)
@pytest.mark.parametrize("variable", ["LOOM_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"])
def test_the_socket_interface_setting_carries_the_traffic(variable, tmp_path):
    # Two links between the hosts; the setting names the second one (a prefix, as NCCL takes it): the
    # bootstrap and the port channels' TCP connections use it, and the first link carries next to nothing.
    with NamespacedHosts(2, links=2) as hosts:
        before = [hosts.sent_bytes(host, link) for host in range(2) for link in range(2)]
        processes = hosts.start_ranks(
            4,
            [sys.executable, WORKER, "collectives"],
            env={"LOOM_CACHE_DIR": str(tmp_path), variable: hosts.link_names[1], "LOOM_DEBUG": "INFO"},
            root_link=1,
        )
        codes, output = finish(processes, 150)
        after = [hosts.sent_bytes(host, link) for host in range(2) for link in range(2)]
    assert codes == [0, 0, 0, 0], output[-6000:]
    sent = [b - a for a, b in zip(before, after, strict=True)]  # host 0 link 0, host 0 link 1, host 1 ...
    assert sent[1] > 1 << 20 and sent[3] > 1 << 20, sent  # megabytes of collectives on the chosen link
    assert sent[0] < 64 << 10 and sent[2] < 64 << 10, sent  # only neighbour discovery on the other
    assert f"chosen by {variable}={hosts.link_names[1]}" in output, output[-3000:]


LINK_TIMEOUT_MS = 2000  # LOOM_LINK_TIMEOUT_MS's default


def _cut_link_run(mode: str, outage_s: float | None, tmp_path) -> tuple[list[int], str, float]:
    """Four ranks on two hosts; 4 s in (set-up done, calls running), the link between them is cut, for
    ``outage_s`` (None: for good). Returns the exit codes, the output and when the link was cut."""
    with NamespacedHosts(2) as hosts:
        processes = hosts.start_ranks(
            4, [sys.executable, WORKER, "link_loss", mode], env={"LOOM_CACHE_DIR": str(tmp_path)}
        )
        time.sleep(4.0)
        cut_at = time.time()
        hosts.cut()
        if outage_s is not None:
            time.sleep(outage_s)
            hosts.cut(False)
        codes, output = finish(processes, 60)
    assert "READY" in output, output[-3000:]
    return codes, output, cut_at


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["calls", "idle"])
def test_a_cut_link_is_an_error_on_every_rank_within_seconds_naming_the_link(mode, tmp_path):
    codes, output, cut_at = _cut_link_run(mode, None, tmp_path)
    assert codes == [0, 0, 0, 0], output[-6000:]
    found = results(output)
    assert sorted(found) == [0, 1, 2, 3], output[-4000:]
    for rank, (record,) in sorted(found.items()):
        seen_at = record["failed_at"] if mode == "calls" else record["watched_at"]
        assert seen_at is not None, record
        delay = seen_at - cut_at
        print(f"rank {rank}: {mode}: seen {delay:.2f} s after the cut; abort {record['abort_s']:.2f} s")
        assert delay < LINK_TIMEOUT_MS / 1000 + 1.5, (delay, record)
        said = record["error"] + " | " + record["watched"]
        assert "the link to rank" in said and "was lost" in said, record
        assert record["abort_s"] < 1.5, record  # abort(1.0) returns within its wait plus 0.5 s


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "link_timeout_ms",
    [
        "0",
        pytest.param(
            "2000",
            marks=pytest.mark.xfail(
                strict=False,
                reason="open (issue 56): with TCP_USER_TIMEOUT set, a 0.2-0.5 s outage often (not always) ends a"
                " connection some seconds later; with the link timeout off the same flap passes",
            ),
        ),
    ],
)
def test_a_flap_shorter_than_the_link_timeout_does_not_fail_the_job(link_timeout_ms, tmp_path, monkeypatch):
    monkeypatch.setenv("LOOM_LINK_TIMEOUT_MS", link_timeout_ms)
    codes, output, _ = _cut_link_run("flap", 0.5, tmp_path)
    assert codes == [0, 0, 0, 0], output[-6000:]
    for rank, (record,) in sorted(results(output).items()):
        assert record["error"] == "" and record["calls"] > 10, (rank, record)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("loss", [0.0, 0.01])
def test_every_collective_across_three_hosts_through_a_delaying_switch(loss, tmp_path):
    # Three hosts of two ranks on link_forwarder.py: 200 us each way, and 1% of frames dropped (TCP resends them).
    # With loss the link timeout is off: a lost frame's resends back off (0.2, 0.4, 0.8 s ...) and can pass
    # LOOM_LINK_TIMEOUT_MS's 2 s, the short-flap problem that is still open (issue 56).
    environment = {"LOOM_CACHE_DIR": str(tmp_path), **({"LOOM_LINK_TIMEOUT_MS": "0"} if loss else {})}
    with NamespacedHosts(3, delay_us=200, loss=loss) as hosts:
        processes = hosts.start_ranks(6, [sys.executable, WORKER, "collectives"], env=environment)
        codes, output = finish(processes, 270)
    assert codes == [0] * 6, output[-6000:]
    found = results(output)
    assert sorted(found) == list(range(6)), output[-4000:]
    for records in found.values():
        assert records[0]["nodes"] == 3 and records[0]["ranks_per_node"] == 2, records


def _small_all_reduces(delay_us: float, sizes: list[int], tmp_path) -> tuple[float, list[dict]]:
    """The link's round trip with ``delay_us`` added each way, and rank 0's timings of all-reduces of ``sizes``
    (2 hosts of 2 ranks, bench/multihost_rank.py)."""
    rank_program = Path(__file__).resolve().parents[2] / "bench" / "multihost_rank.py"
    with NamespacedHosts(2, delay_us=delay_us) as hosts:
        round_trip = hosts.round_trip_s(0, 1)
        command = [sys.executable, str(rank_program), ",".join(map(str, sizes)), "60"]
        processes = hosts.start_ranks(4, command, env={"LOOM_CACHE_DIR": str(tmp_path)})
        codes, output = finish(processes, 240)
    assert codes == [0] * 4, output[-6000:]
    records = results(output)[0]
    assert [record["bytes"] for record in records] == sizes, records
    return round_trip, records


@pytest.mark.timeout(300)
def test_a_small_all_reduce_across_two_hosts_takes_at_most_one_and_a_half_round_trips(tmp_path):
    # What a millisecond more each way costs a call, in round trips: the link's share, without the hosts' own
    # work (about 0.5 to 1.4 ms a call on the CPU backend, which bench/multihost_bench.py shows). Up to 64 KiB it
    # is at most 1.5 (allreduce_hierarchical_packet crosses the link once: half of one).
    sizes = [1 << 10, 16 << 10, 64 << 10]
    near, without = _small_all_reduces(0, sizes, tmp_path)
    far, delayed = _small_all_reduces(1000, sizes, tmp_path)
    for fast, slow in zip(without, delayed, strict=True):
        assert slow["plan"].startswith("allreduce_hierarchical_packet"), slow
        trips = (slow["median_s"] - fast["median_s"]) / (far - near)
        print(
            f"{slow['bytes']} B: {fast['median_s'] * 1e3:.2f} ms, {slow['median_s'] * 1e3:.2f} ms with 1 ms each way:"
        )
        print(f"  {trips:.2f} round trips of the link ({slow['median_s'] / far:.2f} of {far * 1e3:.2f} ms all told)")
        assert trips <= 1.5, (fast, slow, near, far)
