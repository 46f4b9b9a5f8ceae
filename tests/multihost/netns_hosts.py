"""Emulated hosts for multi-host tests: network namespaces joined by veth links, on one machine.

    with NamespacedHosts(2) as hosts:           # two namespaces on one switch, 10.<x>.<y>.1 and .2
        processes = hosts.start_ranks(4, [sys.executable, "worker.py", "collectives"])
        hosts.cut(); hosts.cut(False)           # the network between them fails, and comes back
    with NamespacedHosts(2, links=2) as hosts:  # two separate networks between them, two subnets
        hosts.link_names[1], hosts.addresses_of_link[1], hosts.sent_bytes(host, link)
    with NamespacedHosts(3, delay_us=1000, loss=0.01) as hosts:  # link 0 through link_forwarder.py
        hosts.round_trip_s(0, 1)                # the link's round trip, measured by a TCP ping-pong
    with NamespacedHosts(2, rate_mbit=100) as hosts:  # tbf on every switch port of link 0

Every namespace shares the machine's boot id and host name (as containers of one node do): only the
network namespace tells the hosts apart. Rank r runs in host r * hosts // world (the first ranks on the first
host), with torchrun's variables; LOCAL_WORLD_SIZE is what a launcher on that host would say. Needs root and
`ip netns`; ``namespaces_refused()`` says why not where they are not allowed, for the tests' skip reason.
"""

from __future__ import annotations

import os
import secrets
import select
import subprocess
import sys
from pathlib import Path

EXECUTOR_TESTS = Path(__file__).resolve().parents[1] / "executor"
FORWARDER = Path(__file__).with_name("link_forwarder.py")
FORWARDED_MTU = 65000  # a veth takes up to 65535

# The host computes its frames' checksums (ethtool -K tx off, through the ioctl: this machine has no ethtool);
# left to the "hardware", a veth's frames carry none, and the forwarder passes them on as they are.
_CHECKSUMS_ON_THE_HOST = """
import ctypes, fcntl, socket, struct, sys
value = ctypes.create_string_buffer(struct.pack("II", 0x17, 0))  # ETHTOOL_STXCSUM, off
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
    fcntl.ioctl(probe, 0x8946, struct.pack("16sP", sys.argv[1].encode(), ctypes.addressof(value)))  # SIOCETHTOOL
"""

# A TCP echo of one byte at a time (host b), and the ping that times it (host a): the median round trip, in seconds.
_ECHO = """
import socket, sys
server = socket.create_server((sys.argv[1], int(sys.argv[2])))
print("listening", flush=True)
connection, _ = server.accept()
connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while (byte := connection.recv(1)):
    connection.sendall(byte)
"""
_PING = """
import socket, statistics, sys, time
connection = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
times = []
for _ in range(int(sys.argv[3])):
    started = time.perf_counter()
    connection.sendall(b"x")
    connection.recv(1)
    times.append(time.perf_counter() - started)
print(statistics.median(times[len(times) // 10:]))
"""


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

    def __init__(
        self,
        count: int,
        links: int = 1,
        delay_us: float | None = None,
        loss: float = 0.0,
        rate_mbit: float | None = None,
    ) -> None:
        """``delay_us`` (0 included) or ``loss``: link 0's switch is link_forwarder.py, which adds that one-way
        delay and drops that share of frames (with neither, a kernel bridge); ``rate_mbit``: link 0's switch
        ports are shaped to that rate."""
        self.count = count
        self.link_count = links
        self.delay_us, self.loss, self.rate_mbit = delay_us, loss, rate_mbit
        self.forwarder: subprocess.Popen | None = None
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
                forwarded = link == 0 and self._forwarded()
                bridge = f"br{link}"
                if not forwarded:
                    _ip("link", "add", bridge, "type", "bridge", namespace=self.switch)
                    _ip("link", "set", bridge, "up", namespace=self.switch)
                for host in range(self.count):
                    port, end = self.ports[link][host], f"{self.link_names[link]}{host}"
                    _ip("link", "add", port, "type", "veth", "peer", "name", end)
                    _ip("link", "set", port, "netns", self.switch)
                    if not forwarded:
                        _ip("link", "set", port, "master", bridge, namespace=self.switch)
                    _ip("link", "set", port, "up", namespace=self.switch)
                    _ip("link", "set", end, "netns", self.names[host])
                    if forwarded:
                        # Jumbo frames, each sent whole (no segmentation offload: the forwarder sends a frame as it
                        # came, and a raw socket takes no more than the MTU), so that a 64 KiB message is a few
                        # frames, not 45 that the forwarder, in Python, would each add its own time to.
                        for device, where in ((port, self.switch), (end, self.names[host])):
                            _ip("link", "set", device, "mtu", str(FORWARDED_MTU), namespace=where)
                        segments = ("gso_max_size", str(FORWARDED_MTU), "gso_max_segs", "1")
                        _ip("link", "set", end, *segments, namespace=self.names[host])
                        command = [sys.executable, "-c", _CHECKSUMS_ON_THE_HOST, end]
                        subprocess.run(["ip", "netns", "exec", self.names[host], *command], check=True, timeout=20)
                    address = self.addresses_of_link[link][host]
                    _ip("addr", "add", f"{address}/24", "dev", end, namespace=self.names[host])
                    _ip("link", "set", end, "up", namespace=self.names[host])
            if self._forwarded():
                self._start_forwarder()
            if self.rate_mbit is not None:
                self._shape()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _forwarded(self) -> bool:
        return self.delay_us is not None or self.loss > 0

    def _start_forwarder(self) -> None:
        command = [sys.executable, str(FORWARDER), "--ports", ",".join(self.ports[0])]
        command += ["--delay-us", str(self.delay_us or 0), "--loss", str(self.loss)]
        self.forwarder = subprocess.Popen(
            ["ip", "netns", "exec", self.switch, *command], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        ready, _, _ = select.select([self.forwarder.stdout], [], [], 20)
        line = self.forwarder.stdout.readline() if ready else ""
        if line.strip() != "ready":
            raise RuntimeError(f"link_forwarder.py did not start: {line}{self.forwarder.stdout.read() if line else ''}")

    def _shape(self) -> None:
        """tbf at ``rate_mbit`` on link 0's switch ports: what reaches a host comes at most that fast."""
        for port in self.ports[0]:
            command = ["tc", "qdisc", "replace", "dev", port, "root", "tbf", "rate", f"{self.rate_mbit}mbit"]
            command += ["burst", "64kb", "latency", "100ms"]
            subprocess.run(["ip", "netns", "exec", self.switch, *command], check=True, capture_output=True, timeout=20)

    def round_trip_s(self, a: int, b: int, rounds: int = 200) -> float:
        """The median round trip of a 1-byte TCP ping-pong from host ``a`` to host ``b`` over link 0."""
        port = 20000 + secrets.randbelow(20000)
        server = subprocess.Popen(
            ["ip", "netns", "exec", self.names[b], sys.executable, "-c", _ECHO, self.addresses[b], str(port)],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            server.stdout.readline()  # listening
            out = subprocess.run(
                ["ip", "netns", "exec", self.names[a], sys.executable, "-c", _PING, self.addresses[b], str(port)]
                + [str(rounds)],
                capture_output=True,
                text=True,
                timeout=120,
                check=True,
            )
            return float(out.stdout.strip())
        finally:
            server.kill()
            server.wait()

    def __exit__(self, *_: object) -> None:
        if self.forwarder is not None:
            self.forwarder.kill()
            self.forwarder.wait()
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
        if not cut and link == 0 and self.rate_mbit is not None:
            self._shape()

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
