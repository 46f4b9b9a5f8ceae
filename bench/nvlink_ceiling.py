"""What the GPUs of one host move over NVLink without Loom or NCCL in the way: the ceiling a plan's
data movement can reach, by pattern. One process drives every GPU (peer access on), each pattern runs
on all GPUs at once:

    python bench/nvlink_ceiling.py [--mib 256] [--out nvlink.json]

Patterns (each GPU g, n GPUs; "piece" = --mib MiB):
  mesh-put   g's SM threads store its piece into every peer's buffer (the full-mesh all-gather's puts)
  mesh-fanout  the same stores, each unit loaded once for all peers (allgather_fanout's fused put)
  mesh-get   g's SM threads load every peer's piece into its own buffer (allgather_read's gets)
  ring-put   g stores its piece into g + 1's buffer only (one ring step)
  ring-get   g loads g - 1's piece only
  mesh-ce    g's copy engines copy its piece to every peer (cudaMemcpyPeerAsync, one stream per peer)
  ring-ce    the same to g + 1 only
  shift-ce   the copies to every peer one after another on one stream, g + 1 first, then g + 2, ...: at
             each moment the GPUs send along a permutation (alltoall_port's order)
  ring-ce+put  to g + 1, the first quarter or half of the piece by the copy engine and the rest by SM
             stores at once: whether the two together move more than either
The SM patterns run with several blocks per peer, laid out "contiguous" (each block one slice of the
piece) or "interleaved" (the blocks of a peer take neighbouring tiles in turn, as NCCL's channels do),
each thread with 4 (as Loom's copy) or 8 loads in flight before its stores.
Result: bytes each GPU sends per second (GB/s), the median of --repeats runs after a warm-up; for the
all-gather of n pieces that is its bus bandwidth. A run's time is the slowest GPU's, from CUDA events
around its work (the host starts the GPUs one after another, so a wall clock would count that skew;
it is kept as wall_gbs_per_gpu). Loom's 4-rank ring plans reached 359-367 GB/s where this bench's
wall-clock ring stores had shown 332 (docs/perf/executor.md, seventh run).

Why (docs/perf/executor.md, sixth run): on 4 x H100 every Loom collective's bus bandwidth stayed at
305-336 GB/s from 64 MiB while NCCL's ring rose to 341-354; the writing plans were the slowest. This
says whether stores to three peers at once, loads, one peer at a time or the copy engines move more.
Needs CuPy (no Loom build). Never uses NVLink multicast.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass

import cupy

CE_FRACTIONS = (0.25, 0.5)  # ring-ce+put: the part of the piece the copy engine moves


@dataclass(frozen=True)
class Case:
    """One measurement: a pattern and, for the SM patterns, how the kernel is laid out."""

    pattern: str
    blocks_per_peer: int = 0
    interleaved: bool = False
    unroll: int = 0  # 16-byte loads in flight per thread (4 or 8)
    ce_fraction: float = 0.0  # ring-ce+put only
    threads: int = 1024


KERNEL = r"""
// UNROLL 16-byte loads in flight per thread before its stores (Loom's copy keeps 4).
template <int UNROLL>
__device__ void copy_pairs(const unsigned long long* sources, const unsigned long long* destinations,
                           unsigned long long units, int blocks_per_pair, int interleaved) {
  const int pair = blockIdx.x / blocks_per_pair;
  const int part = blockIdx.x % blocks_per_pair;
  const uint4* src = reinterpret_cast<const uint4*>(sources[pair]);
  uint4* dst = reinterpret_cast<uint4*>(destinations[pair]);
  const unsigned long long stride = blockDim.x;
  const unsigned long long tile = UNROLL * stride;
  unsigned long long begin, end, step;
  if (interleaved) {
    begin = part * tile;
    end = units;
    step = tile * blocks_per_pair;
  } else {
    const unsigned long long share = (units + blocks_per_pair - 1) / blocks_per_pair;
    begin = part * share;
    end = begin + share < units ? begin + share : units;
    step = tile;
  }
  for (unsigned long long base = begin; base < end; base += step) {
    unsigned long long i = base + threadIdx.x;
    if (base + tile <= end) {
      uint4 staged[UNROLL];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) staged[u] = src[i + u * stride];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) dst[i + u * stride] = staged[u];
    } else {
      for (; i < end && i < base + tile; i += stride) dst[i] = src[i];
    }
  }
}

// One source stored to `count` destinations: each unit loaded once, stored count times (a fused
// fan-out put, as the all-reduce's all-gather phase and allgather_fanout run it). Contiguous slices.
template <int UNROLL>
__device__ void fan_out(const unsigned long long* sources, const unsigned long long* destinations, int count,
                        unsigned long long units) {
  const uint4* src = reinterpret_cast<const uint4*>(sources[0]);
  const unsigned long long stride = blockDim.x;
  const unsigned long long tile = UNROLL * stride;
  const unsigned long long share = (units + gridDim.x - 1) / gridDim.x;
  const unsigned long long begin = blockIdx.x * share;
  const unsigned long long end = begin + share < units ? begin + share : units;
  for (unsigned long long base = begin; base < end; base += tile) {
    unsigned long long i = base + threadIdx.x;
    if (base + tile <= end) {
      uint4 staged[UNROLL];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) staged[u] = src[i + u * stride];
      for (int k = 0; k < count; ++k) {
        uint4* dst = reinterpret_cast<uint4*>(destinations[k]);
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) dst[i + u * stride] = staged[u];
      }
    } else {
      for (; i < end && i < base + tile; i += stride) {
        const uint4 v = src[i];
        for (int k = 0; k < count; ++k) reinterpret_cast<uint4*>(destinations[k])[i] = v;
      }
    }
  }
}

extern "C" __global__ void fan_out_4(const unsigned long long* s, const unsigned long long* d, int count,
                                     unsigned long long units) {
  fan_out<4>(s, d, count, units);
}

extern "C" __global__ void fan_out_8(const unsigned long long* s, const unsigned long long* d, int count,
                                     unsigned long long units) {
  fan_out<8>(s, d, count, units);
}

extern "C" __global__ void copy_pairs_4(const unsigned long long* s, const unsigned long long* d,
                                        unsigned long long units, int blocks, int interleaved) {
  copy_pairs<4>(s, d, units, blocks, interleaved);
}

extern "C" __global__ void copy_pairs_8(const unsigned long long* s, const unsigned long long* d,
                                        unsigned long long units, int blocks, int interleaved) {
  copy_pairs<8>(s, d, units, blocks, interleaved);
}
"""


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=256, help="piece size in MiB")
    parser.add_argument("--blocks-per-peer", default="8,16,32,64", help="SM patterns: blocks per peer, comma-separated")
    parser.add_argument("--threads", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", default="")
    return parser.parse_args()


class Host:
    """Every GPU's buffers, streams and kernel: one source piece and n destination slots per GPU."""

    def __init__(self, piece: int) -> None:
        self.n = cupy.cuda.runtime.getDeviceCount()
        self.piece = piece
        self.sources, self.destinations, self.streams, self.kernels, self.fan_out_kernels = [], [], [], [], []
        self.address_arrays: dict[tuple[int, str, int], tuple[cupy.ndarray, cupy.ndarray]] = {}
        for g in range(self.n):
            with cupy.cuda.Device(g):
                for p in range(self.n):
                    if p != g:
                        if not cupy.cuda.runtime.deviceCanAccessPeer(g, p):
                            raise SystemExit(f"GPU {g} cannot access GPU {p}: no peer access")
                        try:
                            cupy.cuda.runtime.deviceEnablePeerAccess(p)
                        except cupy.cuda.runtime.CUDARuntimeError as error:
                            if "PeerAccessAlreadyEnabled" not in str(error):
                                raise
                self.sources.append(cupy.full(piece, g + 1, dtype=cupy.uint8))
                self.destinations.append(cupy.zeros(self.n * piece, dtype=cupy.uint8))
                self.streams.append([cupy.cuda.Stream(non_blocking=True) for _ in range(self.n)])
                module = cupy.RawModule(code=KERNEL, options=("-std=c++17",))
                self.kernels.append({unroll: module.get_function(f"copy_pairs_{unroll}") for unroll in (4, 8)})
                self.fan_out_kernels.append({unroll: module.get_function(f"fan_out_{unroll}") for unroll in (4, 8)})

    def peers(self, g: int, ring: bool) -> list[int]:
        """g + 1 for a ring, else every peer from g + 1 on, wrapping (so GPUs start on different peers)."""
        return [(g + 1) % self.n] if ring else [(g + k) % self.n for k in range(1, self.n)]

    def pairs(self, g: int, pattern: str) -> list[tuple[int, int]]:
        """(source address, destination address) of every copy GPU g's kernel or engines make."""
        ring = pattern.startswith("ring")
        if pattern.endswith("get"):
            senders = [(g - 1) % self.n] if ring else self.peers(g, False)
            return [(self.sources[p].data.ptr, self.destinations[g].data.ptr + p * self.piece) for p in senders]
        return [(self.sources[g].data.ptr, self.destinations[p].data.ptr + g * self.piece) for p in self.peers(g, ring)]

    def addresses(self, g: int, pattern: str, skip: int = 0) -> tuple[cupy.ndarray, cupy.ndarray]:
        """The pattern's source and destination addresses on GPU g, ``skip`` bytes into each piece, copied
        there once (a copy made at each launch would race with the kernel, which runs on a stream of its own)."""
        key = (g, pattern, skip)
        if key not in self.address_arrays:
            pairs = self.pairs(g, pattern)
            with cupy.cuda.Device(g):
                arrays = (
                    cupy.asarray([src + skip for src, _ in pairs], dtype=cupy.uint64),
                    cupy.asarray([dst + skip for _, dst in pairs], dtype=cupy.uint64),
                )
                cupy.cuda.Device(g).synchronize()
            self.address_arrays[key] = arrays
        return self.address_arrays[key]

    def launch(self, case: Case) -> list[tuple[cupy.cuda.Event, cupy.cuda.Event]]:
        """Start the pattern on every GPU; each GPU's (start, stop) events bracket all of its streams' work."""
        events = []
        for g in range(self.n):
            with cupy.cuda.Device(g):
                streams = self.streams[g]
                start, stop = cupy.cuda.Event(), cupy.cuda.Event()
                start.record(streams[0])
                for stream in streams[1:]:
                    stream.wait_event(start)
                self.enqueue(g, case)
                for stream in streams[1:]:
                    done = cupy.cuda.Event(disable_timing=True)
                    done.record(stream)
                    streams[0].wait_event(done)
                stop.record(streams[0])
                events.append((start, stop))
        return events

    def enqueue(self, g: int, case: Case) -> None:
        """GPU g's part of the pattern, on its streams (the current device is g)."""
        pattern = case.pattern
        pairs = self.pairs(g, pattern)
        receivers = self.peers(g, pattern.startswith("ring"))
        streams = self.streams[g]
        if pattern == "shift-ce":  # one stream: the copies follow each other
            for (src, dst), p in zip(pairs, receivers, strict=True):
                cupy.cuda.runtime.memcpyPeerAsync(dst, p, src, g, self.piece, streams[0].ptr)
            return
        if pattern.endswith("ce"):
            for (src, dst), p, stream in zip(pairs, receivers, streams, strict=False):
                cupy.cuda.runtime.memcpyPeerAsync(dst, p, src, g, self.piece, stream.ptr)
            return
        skip = 0
        if pattern == "ring-ce+put":  # the first part by the copy engine, the rest by the kernel below
            skip = int(self.piece * case.ce_fraction) // 16 * 16
            (src, dst), p = pairs[0], receivers[0]
            cupy.cuda.runtime.memcpyPeerAsync(dst, p, src, g, skip, streams[1].ptr)
        sources, destinations = self.addresses(g, pattern, skip)
        units = cupy.uint64((self.piece - skip) // 16)
        with streams[0]:
            if pattern == "mesh-fanout":  # as many blocks as mesh-put, all on the one source
                self.fan_out_kernels[g][case.unroll](
                    (case.blocks_per_peer * len(pairs),),
                    (case.threads,),
                    (sources, destinations, cupy.int32(len(pairs)), units),
                )
            else:
                self.kernels[g][case.unroll](
                    (case.blocks_per_peer * len(pairs),),
                    (case.threads,),
                    (sources, destinations, units, cupy.int32(case.blocks_per_peer), cupy.int32(case.interleaved)),
                )

    def synchronize(self) -> None:
        for g in range(self.n):
            with cupy.cuda.Device(g):
                cupy.cuda.Device(g).synchronize()

    def check(self, pattern: str) -> None:
        """Every slot the pattern wrote holds its sender's piece (GPU g's piece is bytes of g + 1)."""
        for g in range(self.n):
            ring = pattern.startswith("ring")
            if pattern.endswith("get"):
                writes = [(g, p) for p in ([(g - 1) % self.n] if ring else self.peers(g, False))]
            else:
                writes = [(p, g) for p in self.peers(g, ring)]
            for receiver, sender in writes:
                with cupy.cuda.Device(receiver):
                    slot = self.destinations[receiver][sender * self.piece : (sender + 1) * self.piece]
                    if int((slot != sender + 1).sum()) != 0:
                        raise SystemExit(f"{pattern}: GPU {receiver}'s slot from GPU {sender} is wrong")

    def clear(self) -> None:
        for g in range(self.n):
            with cupy.cuda.Device(g):
                self.destinations[g].fill(0)
        self.synchronize()

    def time(self, case: Case, repeats: int) -> tuple[float, float]:
        """Median seconds of one run of the pattern on every GPU at once, after two warm-up runs: by the
        slowest GPU's events, and by the host's wall clock."""
        self.clear()
        self.launch(case)
        self.synchronize()
        self.check(case.pattern)
        self.launch(case)
        self.synchronize()
        by_events, by_wall = [], []
        for _ in range(repeats):
            begin = time.perf_counter()
            events = self.launch(case)
            self.synchronize()
            by_wall.append(time.perf_counter() - begin)
            by_events.append(max(cupy.cuda.get_elapsed_time(start, stop) for start, stop in events) / 1e3)
        return statistics.median(by_events), statistics.median(by_wall)


def main() -> None:
    args = arguments()
    host = Host(args.mib << 20)
    rows = []
    cases = [Case("mesh-ce"), Case("ring-ce"), Case("shift-ce")]
    blocks_list = [int(b) for b in args.blocks_per_peer.split(",")]
    for pattern in ("mesh-put", "mesh-fanout", "mesh-get", "ring-put", "ring-get"):
        for blocks in blocks_list:
            for interleaved in (False, True) if pattern != "mesh-fanout" else (False,):
                for unroll in (4, 8):
                    cases.append(Case(pattern, blocks, interleaved, unroll, threads=args.threads))
    for fraction in CE_FRACTIONS:
        for blocks in blocks_list:
            cases.append(Case("ring-ce+put", blocks, False, 4, fraction, threads=args.threads))
    for case in cases:
        seconds, wall = host.time(case, args.repeats)
        pattern, blocks, unroll, fraction = case.pattern, case.blocks_per_peer, case.unroll, case.ce_fraction
        sent = len(host.pairs(0, pattern)) * host.piece
        row = {
            "pattern": pattern,
            "blocks_per_peer": blocks,
            "layout": "interleaved" if case.interleaved else "contiguous",
            "unroll": unroll,
            "ce_fraction": fraction,
            "threads": case.threads,
            "piece_bytes": host.piece,
            "seconds": seconds,
            "gbs_per_gpu": sent / seconds / 1e9,
            "wall_gbs_per_gpu": sent / wall / 1e9,
        }
        rows.append(row)
        print(
            f"{pattern:11s} blocks/peer {blocks:3d} {row['layout']:11s} unroll {unroll} ce {fraction:4.2f}"
            f" {row['gbs_per_gpu']:7.1f} GB/s (wall clock {row['wall_gbs_per_gpu']:6.1f})",
            flush=True,
        )
    name = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    meta = {"gpus": host.n, "device": name, "date": time.strftime("%Y-%m-%d")}
    if args.out:
        with open(args.out, "w") as out:
            json.dump({"meta": meta, "rows": rows}, out, indent=1)


if __name__ == "__main__":
    main()
