"""loom.plan.cache: LOOM_CACHE_DIR names the cache root; default plans and JIT plans live in folders under it."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from loom.plan import cache
from loom.tools import cli


def test_loom_cache_dir_names_the_root(monkeypatch, tmp_path):
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path / "root"))
    assert cache.cache_root() == tmp_path / "root"
    assert cache.default_plans_dir() == tmp_path / "root" / "default"
    assert cache.jit_dir() == tmp_path / "root" / "jit"


def test_without_loom_cache_dir_the_root_is_under_home(monkeypatch, tmp_path):
    monkeypatch.delenv("LOOM_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache.cache_root() == tmp_path / ".cache" / "loom"
    assert cache.default_plans_dir() == tmp_path / ".cache" / "loom" / "default"


def test_an_empty_loom_cache_dir_counts_as_unset(monkeypatch, tmp_path):
    monkeypatch.setenv("LOOM_CACHE_DIR", "")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache.cache_root() == tmp_path / ".cache" / "loom"


def test_loom_cache_dir_command_prints_the_root(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path / "root"))
    assert cli.main(["cache-dir"]) == 0
    assert capsys.readouterr().out == f"{tmp_path / 'root'}\n"


def test_write_atomically_replaces_the_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "new" / "plan.json"
    cache.write_atomically(path, "first")
    cache.write_atomically(path, "second ✓")
    assert path.read_text(encoding="utf-8") == "second ✓"
    assert sorted(p.name for p in path.parent.iterdir()) == ["plan.json"]
    # Readable by others: a cache root may be shared.
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_write_atomically_keeps_the_old_file_when_writing_fails(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text("old")
    try:
        cache.write_atomically(path, "\ud800")  # a lone surrogate cannot be encoded as UTF-8
    except UnicodeEncodeError:
        pass
    else:
        raise AssertionError("expected UnicodeEncodeError")
    assert path.read_text() == "old"
    assert sorted(p.name for p in Path(tmp_path).iterdir()) == ["plan.json"]


def test_loom_default_plans_is_a_strict_boolean(monkeypatch):
    from loom.errors import InvalidArgumentError
    from loom.plan.cache import default_plans_enabled

    for value, enabled in [("", True), ("1", True), ("Yes", True), ("on", True), ("0", False), ("FALSE", False)]:
        monkeypatch.setenv("LOOM_DEFAULT_PLANS", value)
        assert default_plans_enabled() is enabled, value
    monkeypatch.setenv("LOOM_DEFAULT_PLANS", "maybe")
    with pytest.raises(InvalidArgumentError, match="LOOM_DEFAULT_PLANS: expected 1/0, true/false, yes/no or on/off"):
        default_plans_enabled()
