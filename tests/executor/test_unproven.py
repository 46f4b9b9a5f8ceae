"""Nothing unproven runs (issue 54): a plan the verifier refutes is refused by register_plan, naming the
finding (``verified=False`` registers it with a warning), is compiled anew when it is found in the JIT cache,
and is not registered from the folder of bundled plans when the installer did not write it. A certificate (a
marker named by the verifier's identity and the plan's text) makes the second check a hash."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

_native = pytest.importorskip("loom._native", reason="the native module is not built")
import loom  # noqa: E402
from loom.compiler.driver import compile_algorithm  # noqa: E402
from loom.compiler.jit import cache_key, jit_compile  # noqa: E402
from loom.verify.certificate import certificate_name, certified  # noqa: E402
from loom.verify.report import VerificationError  # noqa: E402


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path))
    yield tmp_path
    _native.registry_clear("user")


def _refuted(name: str = "refuted_allgather") -> str:
    """allgather_fullmesh for 2 ranks without rank 1's waits: it reads its output before rank 0's data lands."""
    plan = json.loads(compile_algorithm("allgather_fullmesh", 2, plan_name=name, verify=False, min_message_size=0))
    for gpu in plan["gpus"]:
        if gpu["id"] == 1:
            for tb in gpu["threadblocks"]:
                tb["ops"] = [op for op in tb["ops"] if op["op"] != "wait"]
    return json.dumps(plan)


def test_register_plan_refuses_a_refuted_plan_naming_the_finding(cache, capfd):
    text = _refuted()
    path = cache / "refuted.json"
    path.write_text(text)
    with pytest.raises(VerificationError) as refused:
        loom.register_plan(str(path))
    message = str(refused.value)
    assert "refuted_allgather" in message and "fails verification" in message, message
    assert "rank 0" in message, message  # the finding names where
    assert loom.registry.list_plans("allgather", 2, "user") == []
    entry = loom.register_plan(_native.Plan.parse(text), verified=False)
    assert entry.name == "refuted_allgather"
    assert "runs unproven (registered with verified=False)" in capfd.readouterr().err


def test_a_proven_plan_is_certified_once(cache):
    text = compile_algorithm("allgather_fullmesh", 2, plan_name="proven_allgather", verify=False)
    assert not certified(text)
    loom.register_plan(_native.Plan.parse(text))
    assert certified(text)
    assert (cache / "verified" / certificate_name(text)).is_file()
    changed = text.replace('"proven_allgather"', '"proven_allgather_2"')
    assert not certified(changed)  # any change to the text, any change to the verifier: a new name
    compiled = compile_algorithm("allgather_fullmesh", 2, plan_name="compiled_allgather")
    assert certified(compiled)  # compiling with verification proves it for this process
    assert not (cache / "verified" / certificate_name(compiled)).exists()  # and writes nothing


def test_a_refuted_plan_in_the_jit_cache_is_compiled_anew(cache, capfd):
    spec = {"world_size": 2, "plan_name": "jit_allgather"}
    good = jit_compile("allgather_fullmesh", spec)
    path = cache / "jit" / f"{cache_key('allgather_fullmesh', spec)}.json"
    assert path == good.path
    path.write_text(_refuted("jit_allgather"))  # planted in the cache under the plan's key
    again = jit_compile("allgather_fullmesh", spec)
    assert not again.from_cache and again.text == good.text
    assert "compiling anew, the cached plan is refuted" in capfd.readouterr().err


def test_a_plan_planted_among_the_bundled_plans_is_not_registered(cache):
    program = f"""
import loom
from loom import _native
from loom.runtime.install_plans import ensure_default_plans_installed
ensure_default_plans_installed()
open({str(cache / "default" / "planted.json")!r}, "w").write({_refuted("planted_allgather")!r})
_native.registry_load_default_plans()
print("registered", _native.registry_find("planted_allgather") is not None)
"""
    environment = {**os.environ, "LOOM_CACHE_DIR": str(cache)}
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, env=environment, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "registered False" in done.stdout
    assert "planted.json: not a plan the installer wrote" in done.stderr, done.stderr[-3000:]


def _run_two_ranks(body) -> list:
    from loom.runtime.host_ranks import run_ranks

    results = run_ranks(2, _native.UniqueId.create("127.0.0.1"), body, timeout_ms=60000)
    for result in results.values():
        if isinstance(result, Exception):
            raise result
    return list(results.values())


def test_executor_execute_runs_only_proven_plans(cache, capfd):
    """A plan handed straight to loom.Executor (a path or a loom.Plan) is proven the first time; a refuted one
    is refused before anything runs, naming the finding; ``verified=False`` runs it with a warning once."""
    import numpy as np

    refuted = cache / "refuted.json"
    refuted.write_text(_refuted("refuted_direct"))
    proven = cache / "proven.json"
    proven.write_text(compile_algorithm("allgather_fullmesh", 2, plan_name="proven_allgather", min_message_size=0))

    def body(bootstrap):
        communicator = _native.Communicator(bootstrap, host_only=True)
        rank = communicator.rank
        data, out = np.full(4, rank + 1, np.float32), np.zeros(8, np.float32)
        outcome = []
        for plan in (str(refuted), _native.Plan.parse(refuted.read_text())):
            try:
                loom.Executor(communicator).execute(plan, data, out)
                outcome.append("ran")
            except VerificationError as error:
                outcome.append(str(error))
        executor = loom.Executor(communicator)
        executor.execute(str(proven), data, out)
        executor.execute(str(proven), data, out)  # proven once per plan object: the second is a lookup
        outcome.append(out.tolist())
        unproven = loom.Executor(communicator, verified=False)
        for _ in range(2):
            unproven.execute(str(refuted), data, np.zeros(8, np.float32))  # may compute wrong: nothing checks it
        return outcome

    results = _run_two_ranks(body)
    for outcome in results:
        assert all("refuted_direct" in text and "fails verification" in text for text in outcome[:2]), outcome
        assert outcome[2] == [1.0] * 4 + [2.0] * 4
    warnings = capfd.readouterr().err
    assert warnings.count("plan 'refuted_direct' runs unproven (loom.Executor(..., verified=False))") == 1, warnings


def test_a_selector_that_returns_an_unregistered_plan_gets_it_proven(cache):
    """A custom selector may return any loom.Plan: one the verifier refutes does not run."""
    import numpy as np

    refuted = _native.Plan.parse(_refuted())
    loom.set_selector(lambda request: refuted if request.collective == "allgather" else None)
    try:

        def body(bootstrap):
            communicator = loom.Communicator(bootstrap, host_only=True)
            try:
                communicator.all_gather(np.zeros(8, np.float32), np.ones(4, np.float32))
                return "ran"
            except VerificationError as error:
                return str(error)

        for outcome in _run_two_ranks(body):
            assert "refuted_allgather" in outcome and "the selector's choice" in outcome, outcome
    finally:
        loom.set_selector(None)
