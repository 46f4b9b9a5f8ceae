"""compile_function: a DSL function (a build() returning a CollectiveProgram) compiled as compile_file would."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from loom.compiler.driver import compile_file, compile_function
from loom.errors import DSLError, InvalidArgumentError

# The shared user DSL file, plus functions that fail in the ways the tests need.
SOURCE = (
    (Path(__file__).resolve().parents[2] / "data" / "dsl" / "user_sendrecv.py").read_text()
    + """

def broken(world_size=2):
    return undefined_name


def not_a_program(world_size=2):
    print("this goes to stderr")
    return "plan"
"""
)


@pytest.fixture
def module(tmp_path):
    path = tmp_path / "user_functions.py"
    path.write_text(SOURCE)
    spec = importlib.util.spec_from_file_location("user_functions", path)
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = loaded
    spec.loader.exec_module(loaded)
    yield loaded
    del sys.modules[spec.name]


def test_a_function_compiles_as_its_file_does(module):
    path = Path(module.__file__)
    assert compile_function(module.build, world_size=4) == compile_file(path, world_size=4)


def test_an_argument_the_function_does_not_take_is_named(module):
    with pytest.raises(InvalidArgumentError, match=r"build\(\) cannot take .*unexpected keyword argument 'root'"):
        compile_function(module.build, world_size=2, root=1)


def test_an_error_in_the_function_names_its_line(module):
    with pytest.raises(DSLError) as caught:
        compile_function(module.broken)
    line = SOURCE.splitlines().index("    return undefined_name") + 1
    assert str(caught.value).startswith(f"user_functions.py:{line}: NameError")


def test_the_function_must_return_a_program(module, capsys):
    with pytest.raises(DSLError, match=r"not_a_program\(\) must return a CollectiveProgram, got str"):
        compile_function(module.not_a_program)
    assert "this goes to stderr" in capsys.readouterr().err


def test_not_a_function():
    with pytest.raises(InvalidArgumentError, match="expected a DSL function"):
        compile_function("allreduce_rs_ag")
