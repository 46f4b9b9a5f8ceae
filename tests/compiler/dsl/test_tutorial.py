"""The tutorial program of docs/dsl.md compiles and verifies, and the rule it teaches holds: waiting on
one channel from two thread blocks is refused at the line of the second wait."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from loom.compiler.driver import compile_file
from loom.errors import DSLError

DOCS = Path(__file__).resolve().parents[3] / "docs" / "dsl.md"


def _tutorial() -> str:
    return re.search(r"```python\n(from loom\.language import \*\n.*?)```", DOCS.read_text(), re.S).group(1)


@pytest.mark.parametrize("world", [2, 3, 4])
def test_the_tutorial_compiles_and_verifies(world, tmp_path):
    path = tmp_path / "tutorial.py"
    path.write_text(_tutorial())
    assert '"name": "allreduce_demo"' in compile_file(path, world_size=world)  # verify=True: the verifier ran


def test_waiting_on_one_channel_from_two_thread_blocks_is_refused(tmp_path):
    # The tutorial with one set of channels for both steps.
    text = _tutorial().replace("gather[", "scatter[")
    path = tmp_path / "one_channel_set.py"
    path.write_text(text)
    second_wait = next(n for n, line in enumerate(text.splitlines(), 1) if "scatter[(r, p)].wait(tb=1)" in line)
    with pytest.raises(DSLError) as caught:
        compile_file(path, world_size=2)
    assert str(caught.value) == (
        f"one_channel_set.py:{second_wait}: rank 0 waits on one memory channel to rank 1 in thread blocks 0 and 1:"
        " a channel's waits must all be in one thread block, so give the second thread block a channel of its"
        " own (declare another MemoryChannel(1, 0), and its peer one back)"
    )
