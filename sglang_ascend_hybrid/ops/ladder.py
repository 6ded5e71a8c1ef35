"""Kernel ladder: try the fastest kernel that can serve a call, fall back visibly.

A :class:`Ladder` holds rungs from fastest to always-available.  For a call
with a hashable *signature* (shape facts such as the head pair and dtype) it
skips rungs whose capability predicate says no, runs the first that says yes,
and if that kernel refuses the input at call time (its own shape-check error,
recognised by ``Rung.is_refusal``) it marks ``(rung, signature)`` unsupported,
logs once at INFO naming the signature, the kernel and the rung taken, and
retries the next rung with the original inputs.  Any other exception is a real
error and propagates.  The last rung must be the pure-torch path.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Sequence

from sglang_ascend_hybrid.logutil import log_once

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Rung:
    name: str
    # Capability table: may this rung serve the signature on these inputs?
    supports: Callable[..., bool]
    run: Callable[..., Any]
    # Does this exception mean "kernel refused the shape" (not a real bug)?
    is_refusal: Callable[[BaseException], bool] = lambda exc: False


class Ladder:
    def __init__(self, op: str, rungs: Sequence[Rung]):
        if not rungs:
            raise ValueError(f"ladder {op!r} needs at least one rung")
        self.op = op
        self.rungs = tuple(rungs)
        self._refused: set[tuple[str, Hashable]] = set()
        self._lock = threading.Lock()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.rungs)

    def rung(self, name: str) -> Rung:
        for r in self.rungs:
            if r.name == name:
                return r
        raise ValueError(f"{self.op}: backend={name!r} is not a rung; expected 'auto' or one of {self.names}")

    def refused(self, rung: str, signature: Hashable) -> bool:
        with self._lock:
            return (rung, signature) in self._refused

    def mark_refused(self, rung: str, signature: Hashable) -> None:
        with self._lock:
            self._refused.add((rung, signature))

    def forget_refusals(self) -> None:
        """Forget every call-time refusal (tests; a reloaded kernel)."""
        with self._lock:
            self._refused.clear()

    def candidates(self, signature: Hashable, *args, **kwargs) -> list[Rung]:
        return [
            r for r in self.rungs
            if not self.refused(r.name, signature) and r.supports(signature, *args, **kwargs)
        ]

    def choose(self, signature: Hashable, *args, **kwargs) -> Rung:
        """The rung the next call with this signature will try first (no call made)."""
        found = self.candidates(signature, *args, **kwargs)
        if not found:
            raise RuntimeError(f"{self.op}: no rung can serve {signature!r}")
        return found[0]

    def __call__(self, signature: Hashable, *args, backend: str = "auto", **kwargs) -> Any:
        if backend != "auto":
            return self.rung(backend).run(*args, **kwargs)
        for r in self.candidates(signature, *args, **kwargs):
            try:
                result = r.run(*args, **kwargs)
            except Exception as exc:
                if not r.is_refusal(exc):
                    raise
                self.mark_refused(r.name, signature)
                later = [n.name for n in self.candidates(signature, *args, **kwargs)]
                log_once(
                    logger, (self.op, r.name, signature),
                    "sglang-ascend-hybrid: %s kernel %s refused %s (%s); using %s for this shape from now on",
                    self.op, r.name, signature, str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
                    later[0] if later else "nothing",
                )
                continue
            return result
        raise RuntimeError(f"{self.op}: every rung refused {signature!r}")
