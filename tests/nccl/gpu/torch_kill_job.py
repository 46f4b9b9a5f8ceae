"""One rank of a two-rank torch job under libloom_nccl.so whose rank 1 SIGKILLs itself while rank 0's
all-reduces wait on it (issue 41), for test_nccl_faults_gpu.py. Started as plain processes (a launcher would
stop the survivor itself). Rank 1 writes the time of its death into ``<scratch>/killed_at`` first. Rank 0
calls until torch reports the fault: an exception here (printed as ``RESULT {...}``), or the watchdog
ending the process (TORCH_NCCL_ASYNC_ERROR_HANDLING's default); the test times either from the kill."""

from __future__ import annotations

import datetime
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "executor"))
from fault_timing import die_soon, write_stamp  # noqa: E402


def main() -> None:
    scratch = Path(sys.argv[1])
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device, timeout=datetime.timedelta(seconds=60))
    data = torch.ones(1 << 20, device=device)
    dist.all_reduce(data)
    torch.cuda.synchronize()
    dist.barrier()
    if rank == 1:
        die_soon(0.3, write_stamp(scratch / "killed_at"))
    calls = 0
    try:
        while True:
            dist.all_reduce(data)
            calls += 1
            if calls % 8 == 0:
                torch.cuda.synchronize()
    except Exception as error:  # torch raises DistBackendError or RuntimeError, depending on where it saw it
        print("RESULT " + json.dumps({"rank": rank, "failed_at": time.time(), "calls": calls, "error": str(error)}))
        sys.stdout.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
