"""A switch that delays and drops, in user space: the emulated hosts' links without ``sch_netem`` (this kernel has
none). Run in the switch's network namespace over its ports:

    python link_forwarder.py --ports s0,s1 --delay-us 1000 --loss 0.01 --seed 7

Every Ethernet frame that arrives on one port leaves on every other port (a hub: a host drops frames that are not
for it) ``--delay-us`` later, or not at all with probability ``--loss``; frames keep their order per port. It prints
``ready`` once it listens and runs until it is killed. The hosts' ends must not send frames larger than the MTU
(``gso_max_size``), since a raw socket sends what it got as one frame. Rate limits are ``tbf``'s, on the ports.
"""

from __future__ import annotations

import argparse
import ctypes
import heapq
import random
import select
import socket
import sys
import time

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4  # a frame this host sent on the port: the forwarder's own, not to forward again
MAX_FRAME = 65535


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ports", required=True, help="the switch ports, comma-separated")
    parser.add_argument("--delay-us", type=float, default=0.0, help="one-way delay added to every frame")
    parser.add_argument("--loss", type=float, default=0.0, help="the chance a frame is dropped, 0 to 1")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.delay_us < 0 or not 0 <= args.loss <= 1:
        parser.error("--delay-us must be at least 0 and --loss from 0 to 1")
    ports = {}
    for name in args.ports.split(","):
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        sock.bind((name, 0))
        sock.setblocking(False)
        ports[sock.fileno()] = sock
    chance = random.Random(args.seed)
    delay = args.delay_us / 1e6
    due: list[tuple[float, int, socket.socket, bytes]] = []  # (when, order, out port, frame)
    order = 0
    _precise_timers()
    print("ready", flush=True)
    while True:
        # select, not poll: its timeout has microseconds (poll rounds a 25 us wait up to 1 ms).
        timeout = None if not due else max(0.0, due[0][0] - time.monotonic())
        readable, _, _ = select.select(list(ports), [], [], timeout)
        for fd in readable:
            while True:
                try:
                    frame, address = ports[fd].recvfrom(MAX_FRAME)
                except BlockingIOError:
                    break
                if address[2] == PACKET_OUTGOING or (args.loss and chance.random() < args.loss):
                    continue
                when = time.monotonic() + delay
                for out_fd, out in ports.items():
                    if out_fd != fd:
                        heapq.heappush(due, (when, order, out, frame))
                        order += 1
        now = time.monotonic()
        while due and due[0][0] <= now:
            _, _, out, frame = heapq.heappop(due)
            try:
                out.send(frame)
            except OSError:
                pass  # a port that is down or full (a cut link's tbf) drops it, as a switch would


def _precise_timers() -> None:
    """Waits end when due, not up to 50 us later (the kernel's default timer slack): prctl(PR_SET_TIMERSLACK, 1)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(29, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # the delays are then up to 50 us longer


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
