"""Probes: find out what an installed kernel really does where builds differ, before serving.

A probe runs a kernel once on private, tiny inputs built to tell its known variants apart,
compares the result with the plugin's references for each variant, and records a
:class:`Verdict` in the seam (:func:`seam.record_verdict`), once per process and signature.
Capability predicates read verdicts; they never guess a build.

Probes run before serving: at backend construction (:func:`run`, from the integration hooks)
or at the first eager call of a kernel; never inside a graph capture (:func:`seam.capturing`:
then :func:`verdict` answers None, which predicates treat as "not proven", so the next rung
serves) and never at plugin discovery.  ``doctor`` lists every verdict (:func:`all_verdicts`).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Callable, Optional

from sglang_ascend_hybrid.logutil import log_once
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.errors import bad_input

logger = logging.getLogger(__name__)

# Verdicts every probe may give besides its variants' names (logged at WARNING).
NEITHER = "matches neither"   # the result matches no known variant: treated as refusing
REFUSED = "refused"           # the kernel raised on the probe's inputs: treated as refusing


@dataclass(frozen=True)
class Verdict:
    probe: str          # registry name
    signature: str      # what was probed (kernel entry, dtypes, dims)
    verdict: str        # one of the probe's verdict names
    usable: bool        # whether the kernel may serve on this verdict
    detail: str = ""    # the measured numbers

    def __str__(self) -> str:
        extra = f" ({self.detail})" if self.detail else ""
        return f"{self.probe} {self.signature}: {self.verdict}{extra}"


@dataclass(frozen=True)
class Probe:
    name: str
    what: str
    verdicts: dict  # verdict name -> what it means for serving (docs/kernels.md / doctor)


REGISTRY: dict[str, Probe] = {}
_lock = threading.Lock()
_runs: dict[str, int] = {}     # probe name -> how many times a probe body ran (tests count them)
_in_flight = threading.local()


def register(probe: Probe) -> Probe:
    REGISTRY[probe.name] = probe
    return probe


def probing() -> bool:
    """Whether this thread is inside a probe body (a kernel called now is called by a probe)."""
    return bool(getattr(_in_flight, "active", False))


def runs(name: str) -> int:
    with _lock:
        return _runs.get(name, 0)


def verdict(name: str, signature: str, body: Callable[[], Verdict], *, before_serving: bool = False
            ) -> Optional[Verdict]:
    """The verdict of probe ``name`` for ``signature``: recorded, else ``body()`` run now (and
    recorded), else None when it cannot run now (inside a graph capture, or re-entered from its
    own body).  ``before_serving``: the caller knows no capture is in progress (backend
    construction)."""
    if name not in REGISTRY:
        raise bad_input("probe", repr(name), f"one of {sorted(REGISTRY)}")
    found = seam.verdict_of(name, signature)
    if found is not None:
        return found
    if getattr(_in_flight, "active", False) or (not before_serving and seam.capturing()):
        log_once(logger, ("probe-deferred", name, signature),
                 "sglang-ascend-hybrid: probe %s for %s cannot run inside a graph capture; the kernel is "
                 "not used for it until the probe has run (it runs at backend construction)", name, signature,
                 level=logging.WARNING)
        return None
    _in_flight.active = True
    try:
        with _lock:
            _runs[name] = _runs.get(name, 0) + 1
        try:
            result = body()
        except Exception as exc:  # a probe must never take the server down
            if _fatal(exc):
                raise
            result = Verdict(name, signature, REFUSED, False, f"{type(exc).__name__}: {exc}")
    finally:
        _in_flight.active = False
    seam.record_verdict(name, signature, result)
    level = logging.WARNING if result.verdict in (NEITHER, REFUSED) else logging.INFO
    log_once(logger, ("probe", name, signature), "sglang-ascend-hybrid: probe %s", result, level=level)
    return result


def _fatal(exc: BaseException) -> bool:
    from sglang_ascend_hybrid.ops.ladder import is_fatal_device_error

    return is_fatal_device_error(exc)


def all_verdicts() -> list[Verdict]:
    return [v for v in seam.recorded_verdicts() if isinstance(v, Verdict)]
