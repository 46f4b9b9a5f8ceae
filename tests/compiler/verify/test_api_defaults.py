"""The Python API runs as many calls as `loom verify` and `loom compile` by default, so a plan the
command line rejects is never accepted from Python; and it takes plan files as well as dicts."""

from __future__ import annotations

import json

import loom
import pytest
from loom.assembly import assemble
from loom.tools.cli import build_parser
from loom.verify import DEFAULT_CALLS, verify

# Each rank sends its packets into the next rank's one scratch slot and unpacks the previous
# rank's: a rank two calls ahead overwrites packets its peer has not read. Only the third call
# shows it when ranks run ahead; the inductive step (induction.py) finds it whatever number of calls
# is run.
RING = """
plan ll_ring_one_slot
collective sendrecv  protocol ll  inplace false
world_size 3  ranks_per_node 3  threads_per_block 256
message_bytes 0..65536  alignment_bytes 16
""" + "".join(
    f"""
rank {r}  chunks input 1 output 1 scratch 1
  channel 0 memory peer {(r + 1) % 3}
  channel 1 memory peer {(r + 2) % 3}
  tb 0
    put_packet input[0] -> ch0:scratch[0]
    unpack_packet scratch[0] -> output[0]
"""
    for r in range(3)
)


def test_the_api_default_is_the_command_line_default():
    parser = build_parser()
    assert parser.parse_args(["verify", "plan.json"]).calls == DEFAULT_CALLS == 3


def test_scratch_reuse_that_needs_three_calls_is_found_by_default(tmp_path):
    plan = assemble(RING, "ring.txt", check=True)
    for calls in (1, 2):
        found = verify(plan, calls=calls)
        assert found and {f.category for f in found} == {"packet"}, found
    findings = verify(plan)
    assert findings and {f.category for f in findings} == {"packet"}
    assert any("reused before its packets were read" in f.message for f in findings)
    path = tmp_path / "ring.json"
    path.write_text(json.dumps(plan))
    assert [f.message for f in loom.verify(path)] == [f.message for f in findings]
    assert [f.message for f in loom.verify(str(path))] == [f.message for f in findings]


def test_a_plan_of_the_wrong_type_is_an_argument_error():
    with pytest.raises(loom.InvalidArgumentError, match="plan must be a plan dict or the path of a plan file"):
        verify(42)
