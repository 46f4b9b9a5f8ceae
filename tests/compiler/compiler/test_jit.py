"""loom.compiler.jit: compile once, then read the plan back from <cache root>/jit/<key>.json."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from loom.compiler import jit
from loom.compiler.driver import compile_algorithm
from loom.compiler.jit import cache_key, jit_compile
from loom.errors import DSLError, InvalidArgumentError

SPEC = {"world_size": 2, "instances": 2}

DSL_FILE = (Path(__file__).resolve().parents[2] / "data" / "dsl" / "user_sendrecv.py").read_text()


@pytest.fixture
def root(monkeypatch, tmp_path) -> Path:
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path / "root"))
    return tmp_path / "root"


@pytest.fixture
def compiles(monkeypatch) -> list[str]:
    """Records every compile jit_compile does (library, function or file)."""
    calls: list[str] = []
    for name in ("compile_algorithm", "compile_function", "compile_file"):
        original = getattr(jit, name)

        def counted(*args, _original=original, _name=name, **kwargs):
            calls.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(jit, name, counted)
    return calls


def _import_file(path: Path, module_name: str):
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def test_miss_compiles_and_a_hit_reads_the_cache(root, compiles):
    first = jit_compile("allreduce_allpairs_packet", SPEC)
    assert (first.from_cache, compiles) == (False, ["compile_algorithm"])
    assert first.path == root / "jit" / f"{first.key}.json"
    assert first.text == compile_algorithm("allreduce_allpairs_packet", 2, instances=2)
    assert first.path.read_text() == first.text
    assert first.name == "allreduce_allpairs_packet_2r_i2"
    second = jit_compile("allreduce_allpairs_packet", dict(reversed(SPEC.items())))
    assert second.from_cache and compiles == ["compile_algorithm"]
    assert (second.path, second.text, second.name, second.key) == (first.path, first.text, first.name, first.key)


def test_cache_dir_argument_is_the_folder_of_the_plans(root, tmp_path, compiles):
    plan = jit_compile("sendrecv", {"world_size": 2}, cache_dir=tmp_path / "mine")
    assert plan.path.parent == tmp_path / "mine"
    assert not root.exists()
    assert jit_compile("sendrecv", {"world_size": 2}, cache_dir=tmp_path / "mine").from_cache


def test_the_key_changes_with_the_spec():
    keys = {
        cache_key("allreduce_allpairs_packet", spec)
        for spec in (SPEC, {**SPEC, "world_size": 4}, {**SPEC, "inplace": True}, {"world_size": 2})
    }
    assert len(keys) == 4
    assert cache_key("allreduce_allpairs_packet", SPEC) != cache_key("allreduce_twoshot_packet", SPEC)


def test_the_key_changes_with_the_loom_source_and_version(monkeypatch):
    before = cache_key("sendrecv", {"world_size": 2})
    monkeypatch.setattr(jit, "_loom_source_digest", lambda: "an edited algorithm")
    edited = cache_key("sendrecv", {"world_size": 2})
    monkeypatch.setattr(jit, "__version__", "99.0")
    assert len({before, edited, cache_key("sendrecv", {"world_size": 2})}) == 3


def test_a_dsl_file_is_keyed_by_its_text(root, tmp_path, compiles):
    path = tmp_path / "user_sendrecv.py"
    path.write_text(DSL_FILE)
    first = jit_compile(path, {"world_size": 4})
    assert (first.from_cache, first.name) == (False, "user_sendrecv")
    assert jit_compile(str(path), {"world_size": 4}).from_cache
    path.write_text(DSL_FILE.replace('name="user_sendrecv"', 'name="renamed"'))
    changed = jit_compile(path, {"world_size": 4})
    assert (changed.from_cache, changed.name) == (False, "renamed")
    assert changed.key != first.key
    assert compiles == ["compile_file", "compile_file"]


def test_a_dsl_function_is_keyed_by_its_file(root, tmp_path, compiles):
    path = tmp_path / "user_dsl.py"
    path.write_text(DSL_FILE)
    build = _import_file(path, "user_dsl_v1").build
    first = jit_compile(build, {"world_size": 2})
    assert (first.from_cache, first.name) == (False, "user_sendrecv")
    assert jit_compile(build, {"world_size": 2}).from_cache
    path.write_text(DSL_FILE + "\n# an edit\n")
    edited = _import_file(path, "user_dsl_v2").build
    assert not jit_compile(edited, {"world_size": 2}).from_cache
    assert compiles == ["compile_function", "compile_function"]


def test_a_corrupt_cache_file_is_compiled_again(root, compiles):
    plan = jit_compile("sendrecv", {"world_size": 2})
    for damage in (plan.text[: len(plan.text) // 2], "{}", "\xff not text"):
        plan.path.write_text(damage, encoding="latin-1")
        again = jit_compile("sendrecv", {"world_size": 2})
        assert not again.from_cache
        assert plan.path.read_text() == plan.text == again.text
    assert compiles == ["compile_algorithm"] * 4
    assert jit_compile("sendrecv", {"world_size": 2}).from_cache


def test_an_unknown_spec_key_is_named(root):
    with pytest.raises(InvalidArgumentError, match="unknown spec key 'iterationz'"):
        jit_compile("allreduce_rs_ag_pipelined", {"world_size": 2, "iterationz": 2})
    jit_compile("allreduce_rs_ag_pipelined", {"world_size": 2, "iterations": 2})  # its own option is known


def test_a_spec_without_world_size_for_a_library_algorithm(root):
    with pytest.raises(InvalidArgumentError, match="world_size"):
        jit_compile("sendrecv")


def test_a_function_that_cannot_take_a_spec_key(root, tmp_path):
    path = tmp_path / "user_dsl_keys.py"
    path.write_text(DSL_FILE)
    build = _import_file(path, "user_dsl_keys").build
    with pytest.raises(InvalidArgumentError, match="unexpected keyword argument 'root'"):
        jit_compile(build, {"world_size": 2, "root": 1})
    assert not (root / "jit").exists()


def test_bad_algorithms_and_specs(root, tmp_path):
    with pytest.raises(InvalidArgumentError, match="unknown algorithm 'allreduce_magic'"):
        jit_compile("allreduce_magic", {"world_size": 2})
    with pytest.raises(InvalidArgumentError, match="no such DSL file"):
        jit_compile(tmp_path / "absent.py")
    with pytest.raises(InvalidArgumentError, match="got int"):
        jit_compile(42)
    with pytest.raises(InvalidArgumentError, match="spec must be a dict"):
        jit_compile("sendrecv", [("world_size", 2)])
    with pytest.raises(InvalidArgumentError, match="spec key 'world_size'.*not JSON data"):
        jit_compile("sendrecv", {"world_size": object()})


def test_a_verification_failure_caches_nothing(root, monkeypatch):
    def broken(*args, **kwargs):
        raise DSLError("the program races")

    monkeypatch.setattr(jit, "compile_algorithm", broken)
    with pytest.raises(DSLError):
        jit_compile("sendrecv", {"world_size": 2})
    assert not (root / "jit").exists() or not list((root / "jit").iterdir())


def test_algorithm_options_reach_the_plan(root):
    plan = jit_compile("broadcast", {"world_size": 4, "root": 3})
    document = json.loads(jit_compile("broadcast", {"world_size": 4, "root": 3}).text)
    assert (document["name"], document["world_size"]) == (plan.name, 4)
    assert document["metadata"]["parameters"]["options"]["root"] == 3


def test_loom_compile_is_the_jit_compiler(root, compiles):
    import loom

    first = loom.compile("sendrecv", {"world_size": 2})
    second = loom.compile("sendrecv", {"world_size": 2})
    assert (first.from_cache, second.from_cache, compiles) == (False, True, ["compile_algorithm"])
    assert second.path == root / "jit" / f"{first.key}.json"
