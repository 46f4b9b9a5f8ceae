"""The GPU half of tests/executor/test_call_properties.py (issue 22): the same random calls with CUDA
tensors, for world sizes 1 to 9 as ranks sharing GPU 0 (threads of this process, a stream each). Each
call returns the float64 reference or raises a LoomError; none crashes or hangs. Beside the CPU half's
outcomes, a rank sharing the GPU may refuse a plan whose blocks do not all fit on it, which is a clear
error too.

    python tests/executor/gpu/call_properties_check.py
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import loom  # noqa: E402
import ranks  # noqa: E402
from loom.runtime.host_ranks import run_ranks  # noqa: E402
from test_call_properties import Memory, check_outcomes, draw_cases, outcome_of  # noqa: E402

DEVICE = Memory(
    place=lambda array: torch.from_numpy(array.copy()).cuda(),
    zeros=lambda count, dtype: torch.zeros(count, dtype=getattr(torch, dtype), device="cuda"),
    fetch=lambda tensor: (ranks.synchronize(), tensor.cpu().numpy().copy())[1],
)


def main() -> int:
    os.environ["LOOM_SHARE_GPU"] = "1"
    os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "32"  # before CUDA starts, which is still to come here
    os.environ["CUDA_MODULE_LOADING"] = "EAGER"
    failures = 0
    for world in range(1, 10):
        cases = draw_cases(world, seed=world)

        def body(bootstrap, cases=cases):
            torch.cuda.set_device(0)
            with torch.cuda.stream(torch.cuda.Stream()):
                comm = loom.Communicator(bootstrap)
                return [outcome_of(comm, case, DEVICE) for case in cases]

        results = run_ranks(world, None, body, timeout_ms=60_000, join_timeout_s=600)
        try:
            for rank, outcomes in results.items():
                if isinstance(outcomes, BaseException):
                    raise AssertionError(f"rank {rank}: {type(outcomes).__name__}: {outcomes}") from outcomes
                assert outcomes == results[0], f"rank {rank} disagrees with rank 0"
            check_outcomes(world, cases, results[0])
            print(f"world {world}: {results[0].count('ok')} ok, {len(cases) - results[0].count('ok')} clear errors")
        except AssertionError as error:
            failures += 1
            print(f"FAIL world {world}: {error}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
