"""One rank of ``loom tune`` when ranks are processes (``python -m loom.launch -n N -m loom.tools.tune_worker
PLAN.json OUT.json``): it times the candidates of PLAN.json (loom.tools.tune.measure_plan) on its GPU, or
on the CPU backend when the plan says so, and rank 0 writes what every rank measured to OUT.json."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    from loom.runtime.communicator import Communicator
    from loom.tools.tune import measure_plan

    plan_file, out_file = argv
    plan = json.loads(Path(plan_file).read_text())
    if plan["host_only"]:
        comm = Communicator(host_only=True)
    else:
        import torch

        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        comm = Communicator()
    measured = measure_plan(comm, plan)
    if comm.rank == 0:
        Path(out_file).write_text(json.dumps(measured))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
