"""Emulated hosts for multi-host tests: network namespaces joined by veth links, on one machine.

    with NamespacedHosts(2) as hosts:           # two namespaces on one switch, 10.<x>.<y>.1 and .2
        processes = hosts.start_ranks(4, [sys.executable, "worker.py", "collectives"])
        hosts.cut(); hosts.cut(False)           # the network between them fails, and comes back
    with NamespacedHosts(2, links=2) as hosts:  # two separate networks between them, two subnets
        hosts.link_names[1], hosts.addresses_of_link[1], hosts.sent_bytes(host, link)

Every namespace shares the machine's boot id and host name (as containers of one node do): only the
network namespace tells the hosts apart. Rank r runs in host r * hosts // world (the first ranks on the first
host), with torchrun's variables; LOCAL_WORLD_SIZE is what a launcher on that host would say. Needs root and
`ip netns`; ``namespaces_refused()`` says why not where they are not allowed, for the tests' skip reason.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path

EXECUTOR_TESTS = Path(__file__).resolve().parents[1] / "executor"


def _ip(*arguments: str, namespace: str | None = None) -> None:
    command = ["ip", *arguments] if namespace is None else ["ip", "netns", "exec", namespace, "ip", *arguments]
    subprocess.run(command, check=True, capture_output=True, text=True, timeout=20)


def namespaces_refused() -> str | None:
    """None when network namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    probe = f"loomprobe{os.getpid()}"
    try:
        _ip("netns", "add", probe)
    except (OSError, subprocess.CalledProcessError) as error:
        return f"'ip netns add' is refused here: {getattr(error, 'stderr', '') or error}"
    _ip("netns", "del", probe)
    return None


class NamespacedHosts:
    """``count`` network namespaces, each joined to a switch (a bridge in a namespace of its own) by a veth
    link; with ``links`` > 1, that many separate switched networks, each its own subnet. Host ``h``'s end of
    link ``k`` is named ``link_names[k] + str(h)``. ``cut`` drops everything at the switch, so that the
    hosts' own interfaces and routes stay up, as when a cable or a switch between hosts fails."""

    def __init__(self, count: int, links: int = 1) -> None:
        self.count = count
        self.link_count = links
        tag = f"{os.getpid() % 10000}{secrets.token_hex(2)}"
        self.names = [f"loom{tag}h{index}" for index in range(count)]
        self.switch = f"loom{tag}sw"
        base = secrets.randbelow(200) + 1
        subnets = [f"10.{100 + os.getpid() % 100}.{base + k}" for k in range(links)]
        self.addresses_of_link = [[f"{subnet}.{index + 1}" for index in range(count)] for subnet in subnets]
        self.addresses = self.addresses_of_link[0]
        self.link_names = [f"l{k}{tag}" for k in range(links)]
        self.ports = [[f"s{k}{tag}{index}" for index in range(count)] for k in range(links)]

    def __enter__(self) -> NamespacedHosts:
        try:
            for name in [*self.names, self.switch]:
                _ip("netns", "add", name)
                _ip("link", "set", "lo", "up", namespace=name)
            for link in range(self.link_count):
                bridge = f"br{link}"
                _ip("link", "add", bridge, "type", "bridge", namespace=self.switch)
                _ip("link", "set", bridge, "up", namespace=self.switch)
                for host in range(self.count):
                    port, end = self.ports[link][host], f"{self.link_names[link]}{host}"
                    _ip("link", "add", port, "type", "veth", "peer", "name", end)
                    _ip("link", "set", port, "netns", self.switch)
                    _ip("link", "set", port, "master", bridge, namespace=self.switch)
                    _ip("link", "set", port, "up", namespace=self.switch)
                    _ip("link", "set", end, "netns", self.names[host])
                    address = self.addresses_of_link[link][host]
                    _ip("addr", "add", f"{address}/24", "dev", end, namespace=self.names[host])
                    _ip("link", "set", end, "up", namespace=self.names[host])
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *_: object) -> None:
        for name in [*self.names, self.switch]:  # deleting a namespace deletes the links in it
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=20)

    def cut(self, cut: bool = True, link: int = 0) -> None:
        """Cuts link ``link`` at the switch (``cut=False``: mends it): a token bucket of 8 bit/s holding one byte
        on every switch port drops what the switch would forward (this kernel has no netem and no tc drop
        action). The hosts' keepalive probes leave them and are lost on the way, as across a failed network."""
        for port in self.ports[link]:
            command = ["tc", "qdisc", "replace", "dev", port, "root", "tbf", "rate", "8bit", "burst", "1", "limit", "1"]
            if not cut:
                command = ["tc", "qdisc", "del", "dev", port, "root"]
            subprocess.run(["ip", "netns", "exec", self.switch, *command], check=True, capture_output=True, timeout=20)

    def sent_bytes(self, host: int, link: int) -> int:
        """Bytes host ``host`` has sent on link ``link`` so far."""
        device = f"{self.link_names[link]}{host}"
        counter = f"/sys/class/net/{device}/statistics/tx_bytes"
        result = subprocess.run(
            ["ip", "netns", "exec", self.names[host], "cat", counter], capture_output=True, text=True, timeout=20
        )
        return int(result.stdout.strip())

    def host_of(self, rank: int, world: int) -> int:
        return rank * self.count // world

    def start_ranks(
        self,
        world: int,
        command: list[str],
        env: dict | None = None,
        root_link: int = 0,
        launcher_local: int | None = None,
    ) -> list[subprocess.Popen]:
        """``command`` once per rank, each in its host's namespace, with torchrun's variables; the bootstrap
        root listens on host 0's address on link ``root_link``. ``launcher_local``: the LOCAL_WORLD_SIZE a
        launcher that got the hosts wrong would set, in place of each host's count."""
        port = 20000 + secrets.randbelow(20000)
        common = {
            **os.environ,
            "WORLD_SIZE": str(world),
            "LOOM_BOOTSTRAP_ADDR": f"{self.addresses_of_link[root_link][0]}:{port}",
            "LOOM_BOOTSTRAP_SECRET": secrets.token_hex(16),
            "PYTHONPATH": os.pathsep.join([str(EXECUTOR_TESTS), os.environ.get("PYTHONPATH", "")]),
            **(env or {}),
        }
        for name in ("LOOM_LAUNCHER", "LOOM_TEST_HOST_ID"):
            common.pop(name, None)
        processes = []
        for rank in range(world):
            host = self.host_of(rank, world)
            local = [r for r in range(world) if self.host_of(r, world) == host]
            variables = {
                "RANK": str(rank),
                "LOCAL_RANK": str(local.index(rank)),
                "LOCAL_WORLD_SIZE": str(launcher_local or len(local)),
            }
            processes.append(
                subprocess.Popen(
                    ["ip", "netns", "exec", self.names[host], *command],
                    env={**common, **variables},
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
            )
        return processes


__all__ = ["NamespacedHosts", "namespaces_refused"]
