"""The inductive step (loom.verify.induction): a plan is proven for every number of calls, not only for the
calls run. A right plan's state repeats at the start of call 2 (3 for an ll plan's two scratch halves); a
plan that would break at a later call is refused even though the calls run pass."""

from __future__ import annotations

import glob
import json
import os

import pytest
from loom.assembly import assemble
from loom.verify import verify
from loom.verify.induction import DEFAULT_LIMIT, prove_every_call
from loom.verify.program import Program
from loom.verify.report import FindingLog

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _countdown(tokens: int) -> dict:
    """A one-rank all-reduce that copies its input and takes one of ``tokens`` tokens of a semaphore nobody
    releases: the call after the last token hangs."""
    ranks = "".join(
        f"""
rank {r}  chunks input 1 output 1 scratch 0
  semaphore 0 = {tokens}
  tb 0
    sem_acquire sem0
    copy input[0] -> output[0]
"""
        for r in range(1)
    )
    header = """
plan countdown
collective allreduce  protocol simple  inplace false
world_size 1  ranks_per_node 1  threads_per_block 256
message_bytes 0..65536  alignment_bytes 16
"""
    plan = assemble(header + ranks, "countdown.txt", check=True)
    return plan


def _repeat_call(plan: dict) -> int | None:
    log = FindingLog()
    return prove_every_call(Program(plan, log), log)


def test_a_plan_that_hangs_at_its_fifth_call_is_found_with_three_calls_run():
    found = verify(_countdown(4), calls=3)
    assert [f.category for f in found] == ["deadlock"], found
    assert found[0].call == 4


def test_a_plan_whose_state_never_settles_is_refused_naming_what_changes():
    found = verify(_countdown(DEFAULT_LIMIT + 4))
    assert [f.category for f in found] == ["calls"], found
    message = found[0].message
    assert f"still changes after {DEFAULT_LIMIT} calls" in message
    assert "tokens of rank 0 sem0: 5 at one call's start, 4 at the next" in message


@pytest.mark.parametrize("ll", [False, True])
def test_bundled_plans_repeat_at_the_second_call_or_the_third_for_ll(ll):
    paths = sorted(glob.glob(os.path.join(ROOT, "plans", "default", "*.json")))
    chosen = []
    for path in paths:
        with open(path, encoding="utf-8") as file:
            plan = json.load(file)
        if (plan["protocol"] == "ll") == ll and plan["world_size"] <= 4:
            chosen.append(plan)
        if len(chosen) == 6:
            break
    assert chosen
    for plan in chosen:
        assert _repeat_call(plan) == (3 if ll else 2), plan["name"]


def test_the_executors_lockstep_keeps_every_rank_in_one_call():
    plan = _countdown(DEFAULT_LIMIT + 4)
    log = FindingLog()
    from loom.verify.schedule import Executor

    executor = Executor(Program(plan, log), 4, log, lockstep=True)
    seen = []
    executor.at_call_start = lambda call: seen.append((call, sorted(set(executor.call.values())))) and False
    executor.run()
    assert seen == [(call, [call]) for call in range(1, 5)]
