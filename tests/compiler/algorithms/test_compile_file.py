"""compile_file: a user's DSL file that defines build(), or prints its plan MSCCL++-style."""

from __future__ import annotations

import json
import textwrap

import pytest
from loom.compiler.driver import compile_file
from loom.errors import DSLError, InvalidArgumentError
from loom.verify import verify

BUILDER = textwrap.dedent(
    """
    from loom.language import AllGather, CollectiveProgram, MemoryChannel, Rank, SyncType

    def build(world_size, ranks_per_node=None, instances=1, name="user_allgather"):
        program = CollectiveProgram(name, AllGather(world_size, 1, False), world_size, instances=instances)
        with program:
            for r in range(world_size):
                mine = Rank(r).get_input_buffer()[0:1]
                Rank(r).copy(Rank(r).get_output_buffer()[r : r + 1], mine, tb=0)
                for p in range(world_size):
                    if p != r:
                        channel = MemoryChannel(p, r)
                        channel.signal(tb=0, relaxed=True)
                        channel.wait(tb=0, relaxed=True, data_sync=SyncType.after)
                        channel.put(Rank(p).get_output_buffer()[r : r + 1], mine, tb=0)
                        channel.signal(tb=0)
                        channel.wait(tb=0)
        return program

    print("building (this line goes to stderr)")
    """
)

PRINTER = textwrap.dedent(
    """
    import argparse
    from loom.language import CollectiveProgram, JSON, MemoryChannel, Rank, SendRecv

    parser = argparse.ArgumentParser()
    parser.add_argument("--num_gpus", type=int, required=True)
    n = parser.parse_args().num_gpus
    with CollectiveProgram("user_sendrecv", SendRecv(n, 1, False), n):
        for r in range(n):
            after, before = (r + 1) % n, (r - 1) % n
            channels = {p: MemoryChannel(p, r) for p in sorted({after, before})}
            channels[before].signal(tb=0, relaxed=True)
            channels[after].wait(tb=0, relaxed=True)
            channels[after].put(Rank(after).get_output_buffer()[0:1], Rank(r).get_input_buffer()[0:1], tb=0)
            channels[after].signal(tb=0)
            channels[before].wait(tb=0)
        print(JSON())
    """
)


@pytest.fixture
def builder(tmp_path):
    path = tmp_path / "user_allgather.py"
    path.write_text(BUILDER)
    return path


@pytest.fixture
def printer(tmp_path):
    path = tmp_path / "user_sendrecv.py"
    path.write_text(PRINTER)
    return path


def test_build_style_file_gets_the_parameters(builder, capsys):
    text = compile_file(builder, world_size=3, instances=2)
    plan = json.loads(text)
    assert (plan["name"], plan["world_size"], plan["metadata"]["parameters"]["instances"]) == ("user_allgather", 3, 2)
    assert {op["loc"]["file"] for g in plan["gpus"] for tb in g["threadblocks"] for op in tb["ops"]} == {
        "user_allgather.py"
    }
    assert verify(plan, calls=3) == []
    assert "building" in capsys.readouterr().err
    assert compile_file(builder, world_size=3, instances=2) == text


def test_build_style_file_gets_extra_options(builder):
    assert json.loads(compile_file(builder, world_size=2, name="renamed"))["name"] == "renamed"


def test_build_that_cannot_take_an_argument(builder):
    with pytest.raises(InvalidArgumentError, match=r"build\(\) cannot take"):
        compile_file(builder, world_size=2, root=1)


def test_print_style_file_with_its_own_arguments(printer):
    text = compile_file(printer, argv=["--num_gpus", "4"])
    plan = json.loads(text)
    assert (plan["name"], plan["world_size"]) == ("user_sendrecv", 4)
    assert text.endswith("}\n")
    assert verify(plan, calls=3) == []
    assert compile_file(printer, argv=["--num_gpus", "4"], world_size=4) == text


def test_print_style_file_without_its_arguments(printer):
    with pytest.raises(InvalidArgumentError, match="argv"):
        compile_file(printer)


def test_print_style_file_cannot_take_another_world_size(printer):
    with pytest.raises(InvalidArgumentError, match="world_size 4, not 8"):
        compile_file(printer, argv=["--num_gpus", "4"], world_size=8)


def _main_block_style(printer_source: str) -> str:
    """PRINTER's program as MSCCL++'s default algorithms write it: a function, called with the parsed
    arguments from the file's `if __name__ == "__main__":` block, which prints the plan."""
    head, _, body = printer_source.partition("parser = argparse.ArgumentParser()")
    setup, _, program = body.partition("with CollectiveProgram")
    program = textwrap.indent("with CollectiveProgram" + program, "    ")
    main = setup.replace("n = parser.parse_args().num_gpus", "user_sendrecv(parser.parse_args().num_gpus)")
    return f'{head}\ndef user_sendrecv(n):\n{program}\n\nif __name__ == "__main__":\n' + textwrap.indent(
        "parser = argparse.ArgumentParser()" + main, "    "
    )


def _without_sources(value):
    """The plan without what names its source file (the metadata's hash, each op's line)."""
    if isinstance(value, dict):
        return {k: _without_sources(v) for k, v in value.items() if k not in ("loc", "source_hash")}
    return [_without_sources(v) for v in value] if isinstance(value, list) else value


def test_a_plan_printed_from_the_main_block_is_compiled(tmp_path, printer):
    path = tmp_path / "main_block.py"
    path.write_text(_main_block_style(PRINTER))
    assert 'if __name__ == "__main__":' in path.read_text()
    plan = json.loads(compile_file(path, argv=["--num_gpus", "4"]))
    same = json.loads(compile_file(printer, argv=["--num_gpus", "4"]))
    assert _without_sources(plan) == _without_sources(same)  # the same program from another file
    assert verify(plan, calls=3) == []
    with pytest.raises(InvalidArgumentError, match="argv"):
        compile_file(path)  # its arguments are still the file's own


def test_a_main_block_that_prints_no_plan_is_still_neither(tmp_path):
    path = tmp_path / "main_prints_nothing.py"
    path.write_text('x = 1\nif __name__ == "__main__":\n    print("hello")\n')
    with pytest.raises(DSLError, match="neither defines build"):
        compile_file(path)


def test_file_that_neither_builds_nor_prints(tmp_path):
    path = tmp_path / "empty.py"
    path.write_text("x = 1\n")
    with pytest.raises(DSLError, match="neither defines build"):
        compile_file(path)


def test_missing_file(tmp_path):
    with pytest.raises(InvalidArgumentError, match="no such DSL file"):
        compile_file(tmp_path / "absent.py")


def test_python_error_in_the_file_names_its_line(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("def build(world_size):\n    return missing_name\n")
    with pytest.raises(DSLError) as caught:
        compile_file(path, world_size=2)
    assert str(caught.value).startswith("broken.py:2: NameError")


def test_dsl_error_in_the_file_propagates(tmp_path):
    path = tmp_path / "bad_dsl.py"
    path.write_text(
        "from loom.language import AllReduce, CollectiveProgram, Rank\n"
        "def build(world_size):\n"
        "    with CollectiveProgram('x', AllReduce(world_size, 1, False), world_size) as program:\n"
        "        Rank(world_size)\n"
        "    return program\n"
    )
    with pytest.raises(DSLError, match="out of range"):
        compile_file(path, world_size=2)


def test_build_must_return_a_program(tmp_path):
    path = tmp_path / "returns_text.py"
    path.write_text("def build(world_size):\n    return 'plan'\n")
    with pytest.raises(DSLError, match="must return a CollectiveProgram, got str"):
        compile_file(path, world_size=2)
