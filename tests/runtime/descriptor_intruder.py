"""A local process that is no rank of the job, trying to get into its descriptor passing (issue 53): it
watches /proc/net/unix for the job's sockets and, until its standard input closes, posts to each forged
notes carrying its own memfds (filled with a marker), and junk: short and long notes, several descriptors,
connections that post nothing, and datagrams of the old protocol. At the end it prints one JSON line: what
it saw and posted, and whether any of its memfds was changed (job data written into the intruder's memory).

    python tests/runtime/descriptor_intruder.py </dev/null     # as the job's user, or under runuser -u nobody

Standard library only, so that another user can run it with the system's Python.
"""

from __future__ import annotations

import json
import os
import random
import socket
import struct
import sys
import threading
import time

MARKER = 0x5A
SEGMENT_BYTES = 1 << 20


def job_sockets() -> set[str]:
    with open("/proc/net/unix", encoding="ascii", errors="replace") as table:
        names = {line.split()[-1] for line in table if "@loom-fd-" in line}
    return {name for name in names if name.startswith("@loom-fd-")}


def main() -> None:
    # Standard input closes when the test is done (a signal would not pass runuser).
    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    rng = random.Random(53)
    segments = []
    for index in range(4):
        fd = os.memfd_create(f"intruder-{index}")
        os.write(fd, bytes([MARKER]) * SEGMENT_BYTES)
        segments.append(fd)
    seen: set[str] = set()
    counts = {"connected": 0, "refused": 0, "posted": 0, "datagrams_refused": 0}
    while not done.is_set():
        names = job_sockets()
        seen |= names
        for name in names:
            address = "\0" + name[1:]
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as connection:
                    connection.settimeout(0.2)
                    connection.connect(address)
                    counts["connected"] += 1
                    rank, tag = rng.randrange(8), rng.randrange(1 << 20)
                    note = struct.pack("<iIQ", rank, 0, tag) + rng.randbytes(16)
                    kind = rng.randrange(5)
                    if kind == 0:
                        payload, fds = note, [rng.choice(segments)]
                    elif kind == 1:
                        payload, fds = note[:12], [rng.choice(segments)]
                    elif kind == 2:
                        payload, fds = note + b"x", segments[:2]
                    elif kind == 3:
                        payload, fds = note, segments
                    else:
                        continue  # connect and post nothing
                    socket.send_fds(connection, [payload], fds)
                    counts["posted"] += 1
            except OSError:
                counts["refused"] += 1
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as datagram:
                    socket.send_fds(datagram, [b"\0" * 16], [segments[0]], address=address)
            except OSError:
                counts["datagrams_refused"] += 1
        time.sleep(0.002)
    altered = any(os.pread(fd, SEGMENT_BYTES, 0) != bytes([MARKER]) * SEGMENT_BYTES for fd in segments)
    print(json.dumps({**counts, "sockets_seen": len(seen), "altered": altered, "uid": os.geteuid()}), flush=True)


if __name__ == "__main__":
    main()
