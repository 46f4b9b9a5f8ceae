"""Nothing unproven runs: a plan's certificate, and the check before a plan is registered or read back.

A certificate says that this version's verifier found nothing wrong with exactly this plan text: its name
is the sha256 of the verifier's identity (the Loom version and the digest of the verifier's own sources)
and of the plan's JSON text, kept as an empty file in ``<cache root>/verified/``. A plan with a certificate
costs a hash to check; one without is verified (and certified when the verifier passes it); one the
verifier refutes is refused with its first finding. Any change to the plan text or to the verifier makes a
new name, so a certificate never outlives what it speaks for. A cache folder others can write to is not
trusted with certificates: ``loom.verify.certificate.prove`` reads the marker only as a regular file.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import stat
import sys
import threading
from pathlib import Path

from loom.errors import PlanError
from loom.plan.cache import cache_root
from loom.verify.report import VerificationError

_VERIFY_DIR = Path(__file__).resolve().parent


@functools.cache
def verifier_identity() -> str:
    """The Loom version and a digest of the verifier's sources: what a certificate is valid for."""
    from loom.version import __version__

    digest = hashlib.sha256(__version__.encode())
    for path in sorted(_VERIFY_DIR.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def certificate_name(text: str) -> str:
    digest = hashlib.sha256(verifier_identity().encode() + b"\0" + text.encode())
    return digest.hexdigest()


def _marker(text: str, store: Path | None) -> Path:
    return _store(store) / certificate_name(text)


def _store(store: Path | None) -> Path:
    return Path(cache_root()) / "verified" if store is None else store


def certified(text: str, store: Path | None = None) -> bool:
    """Whether this verifier has passed exactly ``text`` before (a regular file, never through a link).
    ``store``: the folder of certificates (default ``<cache root>/verified``)."""
    name = certificate_name(text)
    if name in _CERTIFIED_HERE:
        return True
    try:
        return stat.S_ISREG(os.lstat(_store(store) / name).st_mode)
    except OSError:
        return False


# What this process proved: certified even where the cache cannot be written.
_CERTIFIED_HERE: set[str] = set()

# Ranks that are threads of one process prove the same plan at once: one verifies, the others wait for it.
_PROVING = threading.Lock()


def prove(text: str, origin: str, store: Path | None = None) -> None:
    """Return when ``text`` (a plan's JSON) is proven, from its certificate or by verifying it now (and then
    certifying it); raise VerificationError naming ``origin`` and the verifier's first finding otherwise."""
    if certified(text, store):
        return
    with _PROVING:
        if certified(text, store):
            return
        _verify_and_certify(text, origin, store)


def _verify_and_certify(text: str, origin: str, store: Path | None) -> None:
    from loom.verify import verify

    try:
        document = json.loads(text)
    except ValueError as error:
        raise PlanError(f"{origin}: not plan JSON: {error}") from error
    findings = verify(document)
    if findings:
        # "plan NAME (from ORIGIN) fails verification, ...": the findings, each with its op and DSL line.
        raise VerificationError(f"'{document.get('name')}' (from {origin})", findings, limit=3)
    record_proof(text, store)


def remember_proof(text: str) -> None:
    """This process has just verified ``text``: proven for the rest of its life, with no file written."""
    _CERTIFIED_HERE.add(certificate_name(text))


def record_proof(text: str, store: Path | None = None) -> None:
    """Certify ``text``, which this verifier has just passed (the compiler's own verification)."""
    remember_proof(text)
    marker = _marker(text, store)
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        os.close(fd)
    except FileExistsError:
        pass
    except OSError:
        pass  # a cache that cannot be written: proven all the same, verified again next time


_WARNED: set[str] = set()


def warn_unproven(name: str, how: str = "registered with verified=False") -> None:
    """Once per plan: it runs without proof because the caller asked for that (``how``)."""
    if name not in _WARNED:
        _WARNED.add(name)
        print(f"loom: warning: plan '{name}' runs unproven ({how})", file=sys.stderr)


__all__ = [
    "certificate_name",
    "certified",
    "prove",
    "record_proof",
    "remember_proof",
    "verifier_identity",
    "warn_unproven",
]
