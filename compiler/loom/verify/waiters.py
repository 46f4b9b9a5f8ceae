"""One waiter per channel and one acquirer per semaphore: what makes deadlock freedom hold for every
schedule, not only the one explored.

A channel's waits raise one expected count that one thread keeps (the executor's ``claimWaiter``), so two
thread blocks of a rank waiting on one channel would each count the other's signals, and which wait takes
which signal would depend on timing. The executor refuses such a plan; the verifier reports it, at the first
wait of the second block. The same for a semaphore acquired in two blocks (which acquire takes which
release would depend on timing; compiled plans pair one releaser with one acquirer). With every channel's
waits and every semaphore's acquires in one block, each wait takes the signals in program
order whatever the schedule, so a plan that has no race and does not deadlock in the execution explored
does not deadlock in any other (docs/verify.md).
"""

from __future__ import annotations

from loom.verify.program import Program
from loom.verify.report import FindingLog, finding_at


def check(program: Program, log: FindingLog) -> None:
    first: dict[tuple[int, str, int], int] = {}
    for (rank, tb), steps in sorted(program.blocks.items()):
        for step in steps:
            for what, ids in (("ch", step.waits), ("sem", step.acquires)):
                for id_ in ids:
                    owner = first.setdefault((rank, what, id_), tb)
                    if owner == tb:
                        continue
                    verb, taken = ("waits on", "signal") if what == "ch" else ("acquires", "release")
                    message = (
                        f"{verb} {what}{id_}, which tb {owner} of rank {rank} {verb.split()[0]} too: which"
                        f" {verb.split()[0].rstrip('s')} takes which {taken} would depend on timing"
                        + ("; the executor needs every channel's waits in one thread block" if what == "ch" else "")
                    )
                    log.add(finding_at(step, "deadlock", message), kind="two waiters", key=("waiters", rank, what, id_))
