"""loom.runtime.install_plans and `loom install-plans`: bundled plans into <cache root>/default as NAME.json.gz
with an index and a stamp, idempotently (the installer is C++, executor/src/default_plans_install.cc)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from loom.errors import LoomError, PlanError
from loom.plan.validate import read_plan_json
from loom.runtime import install_plans
from loom.runtime.install_plans import (
    INDEX_NAME,
    STAMP_NAME,
    bundled_plans,
    bundled_plans_dir,
    ensure_default_plans_installed,
    install_default_plans,
    installed_name,
)
from loom.tools import cli
from loom.version import __version__

_native = pytest.importorskip("loom._native", reason="the installer is native: build it with scripts/setup.sh")

REPO = Path(__file__).resolve().parents[3]
MAX_INSTALLED_BYTES = 10 << 20  # issue 38: the bundled plans were 36.9 MiB of JSON


def _plan_json(path: Path) -> bytes:
    """A bundled plan file's JSON, whether it is bundled plain or gzip-compressed."""
    return gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()


@pytest.fixture
def root(monkeypatch, tmp_path) -> Path:
    """A cache root named by LOOM_CACHE_DIR."""
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path / "root"))
    monkeypatch.delenv("LOOM_DEFAULT_PLANS", raising=False)
    return tmp_path / "root"


def _names(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir())


def _installed_names() -> list[str]:
    return sorted([installed_name(path) for path in bundled_plans()] + [INDEX_NAME, STAMP_NAME, ".manifest"])


def test_a_checkout_installs_its_own_plans_folder():
    assert bundled_plans_dir() == REPO / "plans" / "default"
    assert len(bundled_plans()) > 100
    assert all(path.suffix == ".json" for path in bundled_plans())


def test_installs_compressed_plans_an_index_and_a_stamp_into_the_default_folder_of_the_root(root):
    installed = install_default_plans()
    assert [path.name for path in installed] == [installed_name(path) for path in bundled_plans()]
    assert all(path.parent == root / "default" and path.name.endswith(".json.gz") for path in installed)
    assert _names(root) == ["default"]  # nothing beside it, and no root/default/default
    assert _names(root / "default") == _installed_names()
    for source, target in zip(bundled_plans(), installed, strict=True):
        data = target.read_bytes()
        assert data[:4] == b"\x1f\x8b\x08\x00" and data[4:8] == bytes(4)  # gzip, no name, time 0: reproducible
        assert gzip.decompress(data) == source.read_bytes()


def test_the_installed_set_is_under_10_mib(root):
    install_default_plans()
    installed = sum(path.stat().st_size for path in (root / "default").iterdir())
    bundled = sum(path.stat().st_size for path in bundled_plans())
    assert installed < MAX_INSTALLED_BYTES, f"{installed} bytes installed"
    assert installed < bundled / 10, (installed, bundled)


def test_the_stamp_names_the_version_the_layout_and_every_bundled_plan(root):
    install_default_plans()
    lines = (root / "default" / STAMP_NAME).read_text().splitlines()
    assert lines[0] == f"loom {__version__}"
    assert lines[1] == "layout NAME.json.gz, .index 3"
    assert lines[2:] == [f"{installed_name(path)} {len(_plan_json(path))}" for path in bundled_plans()]
    assert (root / "default" / STAMP_NAME).read_text() == _native.installed_stamp(str(bundled_plans_dir()))


def test_the_index_lists_every_plan_with_what_the_registry_selects_it_by(root):
    install_default_plans()
    folder = root / "default"
    index = json.loads((folder / INDEX_NAME).read_text())
    assert index["format"] == 3
    entries = {entry["file"]: entry for entry in index["plans"]}
    assert sorted(entries) == [installed_name(path) for path in bundled_plans()]
    for source in bundled_plans()[::20]:
        entry = entries[installed_name(source)]
        plan = json.loads(source.read_text())
        assert entry["file_bytes"] == (folder / entry["file"]).stat().st_size
        for key in ("name", "collective", "world_size", "ranks_per_node", "min_message_bytes", "max_message_bytes"):
            assert entry[key] == plan[key], (source.name, key)
        assert entry["protocol"] == plan["protocol"] and entry["inplace"] == plan["inplace"]
        assert entry["root"] == plan.get("root")
        assert entry["thread_blocks"] == max(len(gpu["threadblocks"]) for gpu in plan["gpus"])
    reducing = [entry for entry in entries.values() if entry["collective"] in ("allreduce", "reducescatter")]
    assert reducing and {entry["reduce_op"] for entry in reducing} == {"sum"}
    assert {entry["reduce_op"] for entry in entries.values() if entry["collective"] == "allgather"} == {None}


def test_a_compressed_plan_reads_back_as_the_same_plan(root):
    installed = install_default_plans()
    for source, target in list(zip(bundled_plans(), installed, strict=True))[::40]:
        assert read_plan_json(target) == json.loads(source.read_text())
        native_json, native_gz = _native.Plan.load(str(source)), _native.Plan.load(str(target))
        for field in ("name", "collective", "protocol", "world_size", "ranks_per_node", "min_message_bytes"):
            assert getattr(native_gz, field) == getattr(native_json, field)
        assert native_gz.gpus == native_json.gpus and native_gz.summary() == native_json.summary()
        assert native_gz.source_hash == native_json.source_hash


def test_a_damaged_gzip_plan_is_an_error_naming_the_file(tmp_path, monkeypatch):
    source = bundled_plans()[0]
    data = gzip.compress(source.read_bytes(), mtime=0)
    damaged = tmp_path / "damaged.json.gz"
    damaged.write_bytes(data[:10] + bytes(b ^ 0x5A for b in data[10:40]) + data[40:])
    truncated = tmp_path / "truncated.json.gz"
    truncated.write_bytes(data[: len(data) // 2])
    for path, words in ((damaged, "invalid gzip data"), (truncated, "truncated")):
        with pytest.raises(PlanError, match=words) as python_error:
            read_plan_json(path)
        assert str(path) in str(python_error.value)
        with pytest.raises(PlanError, match="invalid gzip data") as native_error:
            _native.Plan.load(str(path))
        assert str(path) in str(native_error.value)
    # The size limit is the JSON's, decompressed: a small file does not get a large plan past it.
    monkeypatch.setenv("LOOM_MAX_PLAN_BYTES", str(len(source.read_bytes()) - 1))
    small = tmp_path / "small.json.gz"
    small.write_bytes(data)
    for load in (read_plan_json, lambda path: _native.Plan.load(str(path))):
        with pytest.raises(PlanError, match="once decompressed"):
            load(small)


def test_cli_cache_dir_names_the_root_too(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert cli.main(["install-plans", "--cache-dir", str(tmp_path / "root")]) == 0
    count = len(bundled_plans())
    assert capsys.readouterr().out == f"installed {count} default plans in {tmp_path / 'root' / 'default'}\n"
    assert _names(tmp_path / "root") == ["default"]
    assert _names(tmp_path / "root" / "default") == _installed_names()
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
    contents = [path.read_bytes() for path in first]
    second = install_default_plans()
    assert second == first
    assert {path.stat().st_mtime_ns for path in second} == {1_000_000_000}
    install_default_plans(force=True)
    assert all(path.stat().st_mtime_ns != 1_000_000_000 for path in first)
    assert [path.read_bytes() for path in first] == contents  # the same bytes again: deterministic
    assert _names(root / "default") == _installed_names()


def test_ensure_installs_once_and_then_finds_the_stamp(root):
    assert ensure_default_plans_installed()
    stamp = root / "default" / STAMP_NAME
    assert stamp.read_text() == _native.installed_stamp(str(bundled_plans_dir()))
    assert not ensure_default_plans_installed()
    stamp.write_text("loom 0.0.0 (an older version)\n")
    assert ensure_default_plans_installed()
    assert not ensure_default_plans_installed()


def test_plans_bundled_as_json_or_as_gzip_stamp_alike(tmp_path):
    # A wheel bundles NAME.json.gz, a checkout NAME.json: the Python package and libloom_nccl.so may find the
    # plans in different places, and must not take each other's install for a stale one (each would install
    # the whole folder again, over files a user placed there meanwhile).
    plain, packed = tmp_path / "plain", tmp_path / "packed"
    plain.mkdir()
    packed.mkdir()
    for source in bundled_plans()[:5]:
        text = _plan_json(source)
        stem = source.name.removesuffix(".gz")
        (plain / stem).write_bytes(text)
        (packed / (stem + ".gz")).write_bytes(gzip.compress(text, mtime=0))
    assert _native.installed_stamp(str(plain)) == _native.installed_stamp(str(packed))


def test_a_folder_installed_the_old_way_is_installed_again(root):
    # Before issue 38 the plans were installed as plain NAME.json and the stamp listed them the same way,
    # without the layout line: such a folder must not pass for an install of this version.
    folder = root / "default"
    folder.mkdir(parents=True)
    for source in bundled_plans():
        shutil.copy(source, folder / source.name)
    old_stamp = "".join([f"loom {__version__}\n"] + [f"{p.name} {p.stat().st_size}\n" for p in bundled_plans()])
    (folder / STAMP_NAME).write_text(old_stamp)
    assert ensure_default_plans_installed()
    assert _names(folder) == sorted(_installed_names() + [".install.lock"])


def test_a_damaged_installed_plan_is_restored(root):
    installed = install_default_plans()
    installed[0].write_bytes(installed[0].read_bytes()[:100])
    install_default_plans()
    assert gzip.decompress(installed[0].read_bytes()) == bundled_plans()[0].read_bytes()


def test_only_plans_an_install_wrote_are_removed_and_the_users_files_are_named(root, capfd):
    target = root / "default"
    target.mkdir(parents=True)
    # The user's own files, plans among them, in the folder (or in one that `default` links to): never deleted.
    (target / "my_allreduce.json").write_text("{}")
    (target / "my_allreduce.json.gz").write_bytes(gzip.compress(b"{}"))
    (target / "notes.txt").write_text("mine")
    install_default_plans()
    names = _names(target)
    assert {"my_allreduce.json", "my_allreduce.json.gz", "notes.txt"} <= set(names)
    warning = capfd.readouterr().err
    assert "holds files the installer did not write, left alone" in warning
    assert "my_allreduce.json, my_allreduce.json.gz" in warning and "notes.txt" not in warning  # plans are named
    manifest = (target / ".manifest").read_text().split()
    assert manifest == sorted(installed_name(path) for path in bundled_plans())
    # A plan an earlier install wrote and the bundle no longer has goes, as the regular file it was.
    (target / "allreduce_from_an_old_release.json.gz").write_bytes(gzip.compress(b"{}"))
    (target / ".manifest").write_text("\n".join([*manifest, "allreduce_from_an_old_release.json.gz"]) + "\n")
    install_default_plans()
    assert "allreduce_from_an_old_release.json.gz" not in _names(target)
    assert "my_allreduce.json" in _names(target)


def test_an_older_install_without_a_manifest_is_read_from_its_stamp(root):
    target = root / "default"
    install_default_plans()
    (target / ".manifest").unlink()
    stamp = (target / STAMP_NAME).read_text()
    (target / STAMP_NAME).write_text(stamp + "allreduce_from_an_old_release.json.gz 2\n")
    (target / "allreduce_from_an_old_release.json.gz").write_bytes(gzip.compress(b"{}"))
    install_default_plans()
    assert "allreduce_from_an_old_release.json.gz" not in _names(target)


def test_the_lock_and_the_stamp_are_never_followed_through_links(root, tmp_path):
    target = root / "default"
    target.mkdir(parents=True)
    elsewhere = tmp_path / "not_the_cache"
    elsewhere.write_text("the user's file")
    (target / ".install.lock").symlink_to(elsewhere)
    (target / STAMP_NAME).symlink_to(elsewhere)
    with pytest.raises(OSError, match="install.lock"):
        _native.ensure_default_plans_installed(str(bundled_plans_dir()), str(target))
    assert elsewhere.read_text() == "the user's file"


def test_an_explicit_target_is_the_plans_folder_itself(root, tmp_path):
    installed = install_default_plans(tmp_path / "plans")
    assert installed[0].parent == tmp_path / "plans"
    assert not root.exists()


def test_a_wheel_carries_the_plans_compressed_and_they_install_as_they_are(monkeypatch, root, tmp_path):
    # As the install rule of CMakeLists.txt lays them out: loom/default_plans/NAME.json.gz.
    package = tmp_path / "site-packages" / "loom"
    (package / "default_plans").mkdir(parents=True)
    for source in bundled_plans()[:6]:
        data = gzip.compress(source.read_bytes(), compresslevel=9)
        (package / "default_plans" / installed_name(source)).write_bytes(data)
    monkeypatch.setattr(install_plans, "_PACKAGE_DIR", package)
    assert bundled_plans_dir() == package / "default_plans"
    assert all(path.name.endswith(".json.gz") for path in bundled_plans())
    installed = install_default_plans()
    assert [path.read_bytes() for path in installed] == [path.read_bytes() for path in bundled_plans()]
    stamp = (root / "default" / STAMP_NAME).read_text().splitlines()
    assert stamp[2:] == [f"{path.name} {len(_plan_json(path))}" for path in bundled_plans()]
    assert len(json.loads((root / "default" / INDEX_NAME).read_text())["plans"]) == 6


def test_no_bundled_plans_is_an_error(monkeypatch, tmp_path):
    monkeypatch.setattr(install_plans, "_PACKAGE_DIR", tmp_path / "site-packages" / "loom")
    with pytest.raises(LoomError, match="plans/build_default_plans.py"):
        install_default_plans(tmp_path / "target")
    assert not (tmp_path / "target").exists()


def test_processes_of_one_host_install_once_between_them(root):
    code = "from loom.runtime.install_plans import ensure_default_plans_installed as e; print(e())"
    env = dict(os.environ, LOOM_CACHE_DIR=str(root))
    processes = [
        subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True) for _ in range(4)
    ]
    answers = sorted(process.communicate(timeout=120)[0].strip() for process in processes)
    assert [process.returncode for process in processes] == [0, 0, 0, 0]
    assert answers == ["False", "False", "False", "True"]  # one installed; the others waited and found the stamp
    assert _names(root / "default") == sorted(_installed_names() + [".install.lock"])
    assert not ensure_default_plans_installed()
