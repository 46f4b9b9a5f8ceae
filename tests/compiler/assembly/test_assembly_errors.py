"""Plan assembly mistakes: an AssemblyError (a PlanError) naming the line, the column where known,
and what was expected."""

from __future__ import annotations

import pytest
from loom.assembly import AssemblyError, assemble
from loom.errors import PlanError

HEADER = """\
plan p
collective allreduce  protocol simple  inplace false
world_size 2  ranks_per_node 2  threads_per_block 512
message_bytes 0..1024  alignment_bytes 16
rank 0  chunks input 2 output 2 scratch 1
  channel 0 memory peer 1
  tb 0
"""


def _error(body: str, check: bool = False) -> AssemblyError:
    with pytest.raises(AssemblyError) as caught:
        assemble(HEADER + body, "plan.txt", check=check)
    return caught.value


@pytest.mark.parametrize(
    ("body", "line", "column", "detail"),
    [
        (
            "    frobnicate input[0] -> output[0]\n",
            8,
            5,
            "unknown op 'frobnicate'; expected an op, 'channel', 'rank', 'semaphore' or 'tb'",
        ),
        (
            "    signal ch0\n    reduse sum input[0] -> output[0]\n",
            9,
            5,
            "unknown op 'reduse' (did you mean 'reduce'?)",
        ),
        ("    copy input[0] output[0]\n", 8, 19, "expected '->', ',', '@' or the end of the line, got 'output'"),
        ("    copy input[0]\n", 8, 18, "expected '->', got the end of the line"),
        (
            "    copy inptu[0] -> output[0]\n",
            8,
            10,
            "expected a buffer name (input, output, scratch) or a channel like ch0, got 'inptu'",
        ),
        ("    put input[0] -> ch0:outptu[0]\n", 8, 25, "expected a buffer name (input, output, scratch), got 'outptu'"),
        ("    copy input[x] -> output[0]\n", 8, 16, "expected a number, got 'x'"),
        ("    copy input[-1] -> output[0]\n", 8, 16, "expected a number, got '-1'"),
        ("    copy input[1.5] -> output[0]\n", 8, 17, "expected ':' or ']', got '.5'"),
        ("    barrier 0x1 tb0\n", 8, 13, "expected a number, got '0x1'"),
        ("    reduce input[0], scratch[0] -> output[0]\n", 8, 12, "expected a reduce operator (sum, min, max)"),
        ("    signal ch0 data_sync=sometimes\n", 8, 26, "expected a data_sync value (none, before, after, both)"),
        ("    nop @ prog.py\n", 8, 18, "expected ':', got the end of the line"),
        ("    }\n", 8, 5, "expected an op, 'channel', 'rank', 'semaphore' or 'tb', got '}'"),
        ("    pipeline 2 {\n      nop\n  tb 1\n", 10, 3, "got 'tb' (the pipeline opened at line 8 is still open)"),
    ],
)
def test_syntax_errors_name_line_column_and_what_was_expected(body: str, line: int, column: int, detail: str) -> None:
    error = _error(body)
    assert (error.line, error.column) == (line, column)
    assert error.path == f"line {line} column {column}"
    assert error.origin == "plan.txt"
    assert detail in error.detail, error.detail
    assert str(error).startswith(f"plan.txt: line {line} column {column}: ")
    assert isinstance(error, PlanError)


def test_unterminated_pipeline_names_where_it_opened() -> None:
    error = _error("    signal ch0\n    pipeline 2 {\n      copy input[0] -> output[0]\n      nop\n")
    assert error.detail == "the pipeline opened at line 9 has no closing '}'"
    assert (error.line, error.column) == (11, None)
    assert str(error) == "plan.txt: line 11: the pipeline opened at line 9 has no closing '}'"


@pytest.mark.parametrize(
    ("body", "line", "detail"),
    [
        ("    copy input[0], input[1] -> output[0]\n", 8, "'copy' takes 1 chunk reference here (src), got 2"),
        (
            "    copy input[0] -> output[0] -> output[1]\n",
            8,
            "'copy' takes 1 '->', got 2; it is written copy SRC -> DST",
        ),
        (
            "    reduce_packet sum input[0] -> output[0]\n",
            8,
            "'reduce_packet' takes at least 2 chunk references here (src, srcs), got 1",
        ),
        (
            "    reduce_send sum input[0], scratch[0] -> output[0] -> ch0:output[0] -> output[1]\n",
            8,
            "takes 1 or 2 '->'",
        ),
        ("    flush ch0 relaxed\n", 8, "'flush' takes no 'relaxed' (it takes: data_sync)"),
        ("    wait ch0 relaxed relaxed\n", 8, "'relaxed' is given twice"),
        ("    copy input[1:1] -> output[0]\n", 8, "the range 1:1 is empty"),
        ("    pipeline 2 {\n      pipeline 2 {\n        nop\n      }\n    }\n", 9, "cannot nest"),
        ("    pipeline 2 {\n    }\n", 8, "needs at least one op"),
    ],
)
def test_shape_errors_name_the_line(body: str, line: int, detail: str) -> None:
    error = _error(body)
    assert error.line == line
    assert detail in error.detail, error.detail


def test_header_settings_missing_twice_or_wrong() -> None:
    with pytest.raises(AssemblyError) as caught:
        assemble(HEADER.replace("protocol simple", "").replace("world_size 2", ""))
    assert caught.value.detail == "the plan header has no 'protocol', 'world_size' setting"
    assert caught.value.line == 1
    with pytest.raises(AssemblyError) as caught:
        assemble(HEADER.replace("inplace false", "inplace false inplace true"))
    assert (caught.value.line, caught.value.detail) == (2, "'inplace' is set twice (first at line 2)")
    with pytest.raises(AssemblyError) as caught:
        assemble(HEADER.replace("allreduce", "allreduse"))
    assert caught.value.detail.startswith("expected a collective (allreduce, allgather,")
    with pytest.raises(AssemblyError) as caught:
        assemble(HEADER.replace("plan p", 'plan p\nmetadata {"a": 1, "a": 2}'))
    assert (caught.value.line, caught.value.detail) == (2, 'metadata key "a" appears twice')
    with pytest.raises(AssemblyError) as caught:
        assemble(HEADER.replace("plan p", 'plan "bad \\q escape"'))
    assert caught.value.line == 1 and "bad string" in caught.value.detail


def test_schema_violations_are_reported_at_the_line_that_wrote_them() -> None:
    error = _error("    signal ch0\n    copy input[0] -> output[4294967296]\n", check=True)
    assert error.line == 9 and error.column is None
    assert error.detail.startswith("gpus[0].threadblocks[0].ops[1].dst.index: 4294967296 is greater than")
    with pytest.raises(AssemblyError) as caught:
        assemble(HEADER.replace("allreduce", "broadcast") + "    nop\n", "b.txt", check=True)
    assert (caught.value.line, caught.value.detail) == (1, "root: missing required field")
    # Without check, the schema is not consulted.
    assert assemble(HEADER + "    copy input[0] -> output[4294967296]\n")["gpus"][0]["threadblocks"][0]["ops"]


def test_comments_and_blank_lines_are_ignored_anywhere() -> None:
    commented = "\n# first\n" + HEADER.replace("\n", "   # note\n\n   # more\n") + "    nop  # end\n# last"
    assert assemble(commented) == assemble(HEADER + "    nop\n")
