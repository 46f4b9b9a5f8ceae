"""The executor's GPU check, one rank per process (started by ``python -m loom.launch -n N``) or N ranks
sharing GPU 0 (``--share-gpu N``): every plan file given runs on fresh random data for every data type and
message size asked for, and its output must match a float64 reference. Prints one line per plan and
dtype; exits 1 on any mismatch. Sharing a GPU, a plan whose blocks cannot all be resident at once is
refused by the executor, and reported here as skipped.

    python -m loom.launch -n 2 tests/executor/gpu/plan_check.py --plans DIR --sizes 1024,1000000 --calls 3
    python tests/executor/gpu/plan_check.py --share-gpu 4 --plans DIR
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import zlib
from pathlib import Path

import loom
import torch
from loom import _native

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import ranks  # noqa: E402
from alltoallv_cases import COLUMNS, random_counts, rank_input  # noqa: E402
from alltoallv_cases import expected_output as expected_rows  # noqa: E402
from reference import DTYPES, check_output, expected_output, make_input, mismatch_summary  # noqa: E402


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1024,4100,65536,1048576", help="message bytes, comma-separated")
    parser.add_argument("--dtypes", default=",".join(DTYPES))
    parser.add_argument("--calls", type=int, default=3, help="calls per case, each on fresh data")
    parser.add_argument("--filter", default="", help="only plan files whose name contains this")
    parser.add_argument(
        "--digests",
        default="",
        help="write a digest of every output (plan, dtype, size, call, rank) to this file (rank r adds .r):"
        " two runs, one with LOOM_FAST_PATH=1, must write the same digests",
    )
    ranks.add_plan_arguments(parser)
    return parser.parse_args()


def buffers(plan, rank: int, world: int, data: torch.Tensor, stores: dict):
    """(input, output) for one call, as views at the start of buffers kept across calls: plans that write into
    peers' buffers set up per buffer address, and every rank must then present the same sequence of them
    (docs/executor.md). In place, the input is a view into the output (or the output into the input)."""
    m = data.numel()
    out_elems = {"allgather": m * world, "reducescatter": m // world}.get(plan.collective, m)
    if not plan.inplace:
        source = stores["input"][:m]
        source.copy_(data)
        target = stores["output"][:out_elems]
        target.view(torch.uint8).zero_()
        return source, target
    if plan.collective == "allgather":
        output = stores["output"][:out_elems]
        output.view(torch.uint8).zero_()
        output[rank * m : (rank + 1) * m] = data
        return output[rank * m : (rank + 1) * m], output
    source = stores["input"][:m]
    source.copy_(data)
    if plan.collective == "reducescatter":
        return source, source[rank * out_elems : (rank + 1) * out_elems]
    return source, source


class DoesNotFit(Exception):
    """The executor refused the plan: the blocks of the ranks sharing the GPU cannot all be resident."""


def execute(executor, plan, source, target, **counts) -> None:
    """One call (a counted one with `sends` and `receives`); a refusal for the blocks' room is DoesNotFit."""
    try:
        if counts:
            executor.execute_counted(plan, source, target, **counts)
        else:
            executor.execute(plan, source, target)
    except loom.InvalidArgumentError as error:
        if "the GPU holds at most" in str(error):
            raise DoesNotFit(str(error)) from error
        raise


def check_rank(bootstrap, args: argparse.Namespace) -> int:
    rank, world = bootstrap.rank, bootstrap.world_size
    communicator = _native.Communicator(bootstrap)
    executor = loom.Executor(communicator, verified=False)  # plans proven where built: this checks the GPU executor
    failures = 0
    digests: dict[str, str] = {}  # "plan dtype size call" -> the output's sha256 (with --digests)
    plans = sorted(p for p in Path(args.plans).glob("*.json") if args.filter in p.name)
    for path in plans:
        plan = _native.Plan.load(str(path))
        if plan.world_size != world:
            continue
        try:
            if plan.collective == "alltoallv":
                failures += check_counted_plan(plan, path, executor, rank, world, args)
            else:
                failures += check_plan(plan, path, executor, communicator, rank, world, args, digests)
        except DoesNotFit as refusal:
            if rank == 0:
                print(f"{path.name}: SKIPPED, its blocks do not fit: {refusal}", flush=True)
    bootstrap.barrier()
    if rank == 0:
        print("stats", executor.stats())
    if args.digests:
        Path(f"{args.digests}.{rank}").write_text("".join(f"{key} {value}\n" for key, value in digests.items()))
    return failures


def check_plan(
    plan, path: Path, executor, communicator, rank: int, world: int, args: argparse.Namespace, digests: dict
) -> int:
    failures = 0
    for dtype_name in args.dtypes.split(","):
        worst, cases = 0.0, 0
        largest = max(int(x) for x in args.sizes.split(",")) // DTYPES[dtype_name].itemsize + 1
        stores = {
            "input": torch.empty(largest, dtype=DTYPES[dtype_name], device="cuda"),
            "output": torch.empty(largest * world, dtype=DTYPES[dtype_name], device="cuda"),
        }
        for size in (int(s) for s in args.sizes.split(",")):
            unit = DTYPES[dtype_name].itemsize * (world if plan.collective in ("reducescatter", "alltoall") else 1)
            size = size // unit * unit
            if not plan.min_message_bytes <= size <= plan.max_message_bytes or size == 0:
                continue
            for call in range(args.calls):
                seed = zlib.crc32(f"{path.name} {dtype_name} {size} {call}".encode())
                inputs = [make_input(seed, r, size, dtype_name, "cuda") for r in range(world)]
                source, target = buffers(plan, rank, world, inputs[rank], stores)
                try:
                    execute(executor, plan, source, target)
                    ranks.synchronize()
                except DoesNotFit:
                    raise
                except Exception:
                    print(
                        f"rank {rank} ERROR in {path.name} {dtype_name} {size} B call {call}; stats"
                        f" {executor.stats()}; device report: {communicator.device_timeout_report()}",
                        flush=True,
                    )
                    raise
                expected = expected_output(plan, rank, inputs)
                try:
                    ok, error = check_output(target, expected, dtype_name, world)
                except Exception:
                    # Ranks share one CUDA context: another rank's failed kernel surfaces here.
                    print(
                        f"rank {rank} ERROR after {path.name} {dtype_name} {size} B call {call}; device report:"
                        f" {communicator.device_timeout_report()}",
                        flush=True,
                    )
                    raise
                worst, cases = max(worst, error), cases + 1
                if args.digests:
                    data = target.contiguous().view(torch.uint8).cpu().numpy().tobytes()
                    digests[f"{path.name} {dtype_name} {size} {call}"] = hashlib.sha256(data).hexdigest()
                if not ok:
                    failures += 1
                    print(
                        f"rank {rank} FAIL {path.name} {dtype_name} {size} B call {call}: error {error:.3g};"
                        f" {mismatch_summary(target, expected)}",
                        flush=True,
                    )
        if rank == 0 and cases:
            print(f"{path.name} {dtype_name}: {cases} calls, worst relative error {worst:.2g}", flush=True)
    return failures


def check_counted_plan(plan, path: Path, executor, rank: int, world: int, args: argparse.Namespace) -> int:
    """An all-to-all-v plan, whose sizes come with each call: `--calls` calls of random per-peer row counts
    (zeros included, rows of 12 bytes), every rank's output exactly the senders' rows."""
    rows, row = 40 * world, COLUMNS * 4
    source = torch.zeros((rows, COLUMNS), dtype=torch.float32, device="cuda")
    output = torch.zeros((rows, COLUMNS), dtype=torch.float32, device="cuda")
    failures = 0
    for call in range(args.calls):
        seed = zlib.crc32(f"{path.name} {call}".encode())
        counts = random_counts(seed, world)
        mine = torch.from_numpy(rank_input(seed, rank, counts))
        source[: len(mine)] = mine.cuda()
        entries = []
        for sizes in (counts[rank], counts[:, rank]):
            starts = sizes.cumsum() - sizes
            entries.append([(int(at) * row, int(n) * row) for at, n in zip(starts, sizes, strict=True)])
        execute(executor, plan, source, output, sends=entries[0], receives=entries[1])
        ranks.synchronize()
        expected = torch.from_numpy(expected_rows(seed, rank, counts))
        if not torch.equal(output[: len(expected)].cpu(), expected):
            failures += 1
            print(f"rank {rank} FAIL {path.name} call {call}: rows differ from the senders'", flush=True)
    if rank == 0:
        print(f"{path.name}: {args.calls} counted calls", flush=True)
    return failures


if __name__ == "__main__":
    arguments_given = arguments()
    sys.exit(ranks.run(arguments_given, lambda bootstrap: check_rank(bootstrap, arguments_given)))
