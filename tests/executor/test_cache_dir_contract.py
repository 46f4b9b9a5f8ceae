"""The cache-dir contract, held by the Python installer and the C++ loader together: LOOM_CACHE_DIR (or
~/.cache/loom without it) names the cache root, the bundled plans live in <root>/default, and neither
side ever takes the variable for the `default` folder itself."""

from __future__ import annotations

import gzip
import json

import pytest
from loom.runtime.install_plans import (
    STAMP_NAME,
    bundled_plans,
    ensure_default_plans_installed,
    install_default_plans,
    installed_name,
)
from loom.tools import cli

_native = pytest.importorskip("loom._native", reason="the native module is not built")
from loom import Communicator  # noqa: E402
from loom.runtime import registry  # noqa: E402
from loom.runtime.host_ranks import run_ranks  # noqa: E402

PLANS = bundled_plans()


def _plan_names(paths) -> set[str]:
    return {json.loads(path.read_text())["name"] for path in paths}


def _bundled_in_registry() -> set[str]:
    return {entry.name for entry in registry.list_plans(source="bundled")}


@pytest.fixture
def empty_root_afterwards(monkeypatch, tmp_path):
    """Leaves the registry with the (empty) bundled plans of a fresh root, whatever the test loaded."""
    monkeypatch.delenv("LOOM_DEFAULT_PLANS", raising=False)
    yield
    monkeypatch.delenv("LOOM_DEFAULT_PLANS", raising=False)
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path / "empty-afterwards"))
    assert registry.load_default_plans() == []


def test_the_loader_reads_what_the_installer_wrote(monkeypatch, tmp_path, empty_root_afterwards):
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path / "root"))
    installed = install_default_plans()
    assert {path.parent for path in installed} == {tmp_path / "root" / "default"}
    assert registry.load_default_plans() == []
    assert _bundled_in_registry() == _plan_names(PLANS)


def test_the_default_folder_named_as_the_root_is_not_read_as_plans(monkeypatch, tmp_path, empty_root_afterwards):
    # Plans written into <root>/default; then LOOM_CACHE_DIR names that folder: both sides take it as a
    # root, so the installer writes <it>/default and the loader reads only <it>/default.
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path / "root"))
    install_default_plans()
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path / "root" / "default"))
    assert registry.load_default_plans() == []
    assert _bundled_in_registry() == set()  # the plans one level up are not the bundled plans of this root
    installed = install_default_plans()
    assert {path.parent for path in installed} == {tmp_path / "root" / "default" / "default"}
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path / "other"))  # make the loader look again
    registry.load_default_plans()
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path / "root" / "default"))
    registry.load_default_plans()
    assert _bundled_in_registry() == _plan_names(PLANS)


def test_without_loom_cache_dir_both_use_the_home_cache(monkeypatch, tmp_path, capsys, empty_root_afterwards):
    monkeypatch.delenv("LOOM_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cli.main(["install-plans"]) == 0
    root = tmp_path / "home" / ".cache" / "loom"
    assert capsys.readouterr().out.endswith(f" in {root / 'default'}\n")
    assert registry.load_default_plans() == []
    assert _bundled_in_registry() == _plan_names(PLANS)


def test_a_communicator_installs_the_bundled_plans_on_first_use(monkeypatch, tmp_path, empty_root_afterwards):
    # A wheel installed with pip runs no set-up: the first communicator copies the plans into the cache.
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path / "fresh"))
    folder = tmp_path / "fresh" / "default"

    def body(bootstrap):
        return Communicator(bootstrap, host_only=True).world_size

    assert run_ranks(2, None, body) == {0: 2, 1: 2}
    assert sorted(path.name for path in folder.glob("*.json.gz")) == [installed_name(path) for path in PLANS]
    assert (folder / STAMP_NAME).read_text().startswith("loom ")
    assert _bundled_in_registry() == _plan_names(PLANS)
    assert not ensure_default_plans_installed()  # the stamp matches: nothing to do
    (folder / STAMP_NAME).write_text("loom 0.0.0 (an older version)\n")
    (folder / installed_name(PLANS[0])).write_text("{ damaged")
    assert ensure_default_plans_installed()  # another version's stamp: installed again
    assert gzip.decompress((folder / installed_name(PLANS[0])).read_bytes()) == PLANS[0].read_bytes()


def test_loom_default_plans_zero_turns_installer_and_loader_off(monkeypatch, tmp_path, empty_root_afterwards):
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path / "root"))
    install_default_plans()
    monkeypatch.setenv("LOOM_DEFAULT_PLANS", "0")
    assert registry.load_default_plans() == []
    assert _bundled_in_registry() == set()
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path / "fresh"))
    assert not ensure_default_plans_installed()
    assert not (tmp_path / "fresh").exists()
