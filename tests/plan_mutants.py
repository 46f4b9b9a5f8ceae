"""Ways to break a plan (a plan JSON document, changed in place) that more than one test uses: the verifier's
mutation tests, its mutation corpus and the chaos scheduler's planted bug."""

from __future__ import annotations


def drop_flush(ops: list[dict], index: int) -> None:
    """Drops the flush at ``ops[index]``: a ``flush`` goes, a ``put_with_signal_and_flush`` keeps its put and
    signal."""
    if ops[index]["op"] == "flush":
        ops.pop(index)
    else:
        ops[index]["op"] = "put_with_signal"


def drop_every_flush(plan: dict) -> dict:
    """``plan`` with no flush left in any thread block (returned for convenience)."""
    for gpu in plan["gpus"]:
        for block in gpu["threadblocks"]:
            ops = block["ops"]
            for index in range(len(ops) - 1, -1, -1):
                if ops[index]["op"] in ("flush", "put_with_signal_and_flush"):
                    drop_flush(ops, index)
    return plan
