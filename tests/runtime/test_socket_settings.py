"""The socket settings from the environment (hostile input like any other): a malformed LOOM_LINK_TIMEOUT_MS,
LOOM_SOCKET_IFNAME or NCCL_SOCKET_IFNAME, or an interface setting that matches nothing, is an error naming the
variable, never a default taken silently. Each case is a fresh process (the settings are read once)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("loom._native", reason="the native module is not built")

CREATE = "from loom import _native\n_native.UniqueId.create()\nprint('created')"


def _create(**settings: str) -> subprocess.CompletedProcess:
    environment = {key: value for key, value in os.environ.items() if not key.endswith("SOCKET_IFNAME")}
    environment.pop("LOOM_BOOTSTRAP_HOST", None)
    return subprocess.run(
        [sys.executable, "-c", CREATE], env={**environment, **settings}, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        ({"LOOM_LINK_TIMEOUT_MS": "soon"}, "LOOM_LINK_TIMEOUT_MS: expected an integer"),
        ({"LOOM_LINK_TIMEOUT_MS": "-5"}, "LOOM_LINK_TIMEOUT_MS: expected an integer"),
        ({"LOOM_SOCKET_IFNAME": "^"}, "LOOM_SOCKET_IFNAME: expected interface names"),
        ({"NCCL_SOCKET_IFNAME": "=,"}, "NCCL_SOCKET_IFNAME: expected interface names"),
        ({"NCCL_SOCKET_IFNAME": "=no-such-interface"}, "NCCL_SOCKET_IFNAME==no-such-interface matches no interface"),
    ],
    ids=["timeout-word", "timeout-negative", "ifname-empty", "nccl-ifname-empty", "ifname-unmatched"],
)
def test_a_bad_socket_setting_is_an_error_naming_the_variable(settings, said):
    run = _create(**settings)
    assert run.returncode != 0 and said in run.stderr, run.stdout + run.stderr[-2000:]


def test_loom_socket_ifname_comes_before_nccls_and_loopback_can_be_chosen():
    run = _create(LOOM_SOCKET_IFNAME="=lo", NCCL_SOCKET_IFNAME="=no-such-interface", LOOM_DEBUG="INFO")
    assert run.returncode == 0, run.stderr[-2000:]
    assert "network interface lo (127.0.0.1), chosen by LOOM_SOCKET_IFNAME==lo" in run.stderr, run.stderr
