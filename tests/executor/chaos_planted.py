"""The planted bug of the chaos scheduler (LOOM_CPU_CHAOS): allreduce_hierarchical for 2 nodes x 2 with its
flushes dropped, so that a port put's source is overwritten before the proxy has read it. Run on the CPU
backend (ranks on threads, port channels over TCP) beside the plan as compiled, ``calls`` calls each on fresh
data, straight through the executor (which takes a plan as given: the verifier is not asked). Prints one
JSON line: how many calls of each plan gave a wrong sum on some rank.

    LOOM_CPU_CHAOS=7 python tests/executor/chaos_planted.py 30
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import loom
import numpy as np
from loom import _native
from loom.compiler.driver import compile_algorithm
from loom.runtime.host_ranks import run_ranks

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from plan_mutants import drop_every_flush  # noqa: E402

WORLD, PER_NODE, ELEMENTS = 4, 2, 3 * 4096 + 4


def plans() -> dict[str, dict]:
    """The hierarchical all-reduce as compiled, and with every flush dropped."""
    text = compile_algorithm("allreduce_hierarchical", WORLD, PER_NODE, verify=False, min_message_size=0)
    return {"compiled": json.loads(text), "flush_dropped": drop_every_flush(json.loads(text))}


def wrong_calls(plan: dict, calls: int) -> int:
    """Calls of ``plan`` after which some rank's output differs from the float64 sum."""
    parsed = _native.Plan.parse(json.dumps(plan))
    rng = np.random.default_rng(11)
    data = [[rng.integers(-8, 8, ELEMENTS).astype(np.float32) for _ in range(WORLD)] for _ in range(calls)]

    def body(bootstrap):
        executor = loom.Executor(_native.Communicator(bootstrap, host_only=True), verified=False)
        wrong = []
        for call in range(calls):
            output = np.zeros(ELEMENTS, np.float32)
            executor.execute(parsed, data[call][bootstrap.rank].copy(), output)
            expected = np.sum(data[call], axis=0, dtype=np.float64)
            wrong.append(not np.array_equal(output.astype(np.float64), expected))
        return wrong

    results = run_ranks(WORLD, _native.UniqueId.create("127.0.0.1"), body, timeout_ms=30000)
    for rank in range(WORLD):
        if isinstance(results[rank], BaseException):
            raise results[rank]
    return sum(any(results[rank][call] for rank in range(WORLD)) for call in range(calls))


def main() -> None:
    calls = int(sys.argv[1])
    print(json.dumps({name: wrong_calls(plan, calls) for name, plan in plans().items()} | {"calls": calls}))


if __name__ == "__main__":
    main()
