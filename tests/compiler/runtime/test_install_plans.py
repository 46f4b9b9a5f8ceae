"""loom.runtime.install_plans and `loom install-plans`: bundled plans into <cache root>/default, idempotently."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from loom.errors import LoomError
from loom.runtime import install_plans
from loom.runtime.install_plans import bundled_plans, bundled_plans_dir, install_default_plans
from loom.tools import cli

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def root(monkeypatch, tmp_path) -> Path:
    """A cache root named by LOOM_CACHE_DIR."""
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path / "root"))
    return tmp_path / "root"


def _names(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir())


def test_a_checkout_installs_its_own_plans_folder():
    assert bundled_plans_dir() == REPO / "plans" / "default"
    assert len(bundled_plans()) > 100


def test_installs_into_the_default_folder_of_the_root(root):
    installed = install_default_plans()
    bundled = [path.name for path in bundled_plans()]
    assert [path.name for path in installed] == bundled
    assert all(path.parent == root / "default" for path in installed)
    assert _names(root) == ["default"]  # nothing beside it, and no root/default/default
    assert _names(root / "default") == bundled
    for source in bundled_plans()[:5]:
        assert (root / "default" / source.name).read_bytes() == source.read_bytes()


def test_cli_cache_dir_names_the_root_too(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert cli.main(["install-plans", "--cache-dir", str(tmp_path / "root")]) == 0
    count = len(bundled_plans())
    assert capsys.readouterr().out == f"installed {count} default plans in {tmp_path / 'root' / 'default'}\n"
    assert _names(tmp_path / "root") == ["default"]
    assert len(_names(tmp_path / "root" / "default")) == count
    assert not (tmp_path / "elsewhere").exists()


def test_cli_uses_loom_cache_dir(root, capsys):
    assert cli.main(["install-plans"]) == 0
    assert capsys.readouterr().out.endswith(f" in {root / 'default'}\n")
    assert _names(root) == ["default"]


def test_installing_again_changes_nothing_unless_forced(root):
    first = install_default_plans()
    # Back-date every file: a second install must not rewrite them, a forced one must.
    for path in first:
        os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    second = install_default_plans()
    assert second == first
    assert {path.stat().st_mtime_ns for path in second} == {1_000_000_000}
    install_default_plans(force=True)
    assert all(path.stat().st_mtime_ns != 1_000_000_000 for path in first)
    assert _names(root / "default") == [path.name for path in first]


def test_a_damaged_installed_plan_is_restored(root):
    installed = install_default_plans()
    installed[0].write_text("{ truncated")
    install_default_plans()
    assert installed[0].read_bytes() == bundled_plans()[0].read_bytes()


def test_stale_plans_are_removed_and_other_files_kept(root):
    target = root / "default"
    target.mkdir(parents=True)
    (target / "allreduce_from_an_old_release.json").write_text("{}")
    (target / "notes.txt").write_text("mine")
    install_default_plans()
    names = _names(target)
    assert "allreduce_from_an_old_release.json" not in names
    assert "notes.txt" in names
    assert len(names) == len(bundled_plans()) + 1


def test_an_explicit_target_is_the_plans_folder_itself(root, tmp_path):
    installed = install_default_plans(tmp_path / "plans")
    assert installed[0].parent == tmp_path / "plans"
    assert not root.exists()


def test_no_bundled_plans_is_an_error(monkeypatch, tmp_path):
    monkeypatch.setattr(install_plans, "_PACKAGE_DIR", tmp_path / "site-packages" / "loom")
    with pytest.raises(LoomError, match="plans/build_default_plans.py"):
        install_default_plans(tmp_path / "target")
    assert not (tmp_path / "target").exists()
