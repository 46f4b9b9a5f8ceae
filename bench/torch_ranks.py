"""What a benchmark run under torchrun does around its measurements: one process per GPU with
torch.distributed started, rank 0's NCCL unique id handed to every rank, and the JSON report rank 0 writes
(results with the date, device, torch and NCCL versions beside them)."""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path

import torch
import torch.distributed as dist


def start() -> tuple[int, int]:
    """This process's GPU set from LOCAL_RANK and the default process group started; (world size, rank)."""
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    return dist.get_world_size(), dist.get_rank()


def share_id(mine: bytes) -> bytes:
    """Rank 0's bytes on every rank (a unique id for bench/nccl_api.py's communicators)."""
    box = [mine]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def write_report(path: str, results: list[dict], **extra: object) -> None:
    """On rank 0, when `path` is given: `results` as JSON with what they were measured on."""
    if dist.get_rank() != 0 or not path:
        return
    report = {
        "date": datetime.date.today().isoformat(),
        "device": torch.cuda.get_device_name(),
        "world_size": dist.get_world_size(),
        **extra,
        "torch": torch.__version__,
        "nccl": ".".join(str(part) for part in torch.cuda.nccl.version()),
        "results": results,
    }
    Path(path).write_text(json.dumps(report, indent=1))
