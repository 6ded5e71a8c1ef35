"""Kernel ladder: try the fastest kernel that can serve a call, fall back visibly.

A :class:`Ladder` holds rungs from fastest to always-available.  For a call
with a *signature* (its family's :class:`~sglang_ascend_hybrid.ops.signature.Signature`:
shape facts such as the head pair and dtypes; its text is what every line below shows) it
skips rungs whose capability predicate says no, runs the first that says yes,
and if that kernel refuses the input at call time it marks ``(rung, signature)``
unsupported and retries the next rung with the original inputs:

- a refusal whose text the rung knows (``Rung.is_refusal``: the kernel's own
  ``TORCH_CHECK`` texts) is logged once at INFO;
- on a *device* rung, any other ``RuntimeError`` (``NotImplementedError`` is one),
  or an ``AttributeError`` (a Python entry whose ``torch.ops.npu`` op is missing
  from the build: sgl-kernel-npu's ``run_mega_chunk_gdn`` on Ascend 950), is also a
  refusal -- the inputs passed the capability predicate, so the kernel refused
  something the table did not predict -- logged once at WARNING as "unexpected"
  with the op, the shape and the full text: a kernel that refuses must never take
  the server down while a correct fallback exists;
- memory exhaustion and device loss (:func:`is_fatal_device_error`), emulator
  contract violations, a device result outside its contract (``DeviceResultError``) and every
  error of a pure-torch rung propagate.

A rung may also decline one call without being marked (:class:`DeclinedCall`, e.g.
outputs that came back non-finite from finite inputs): the ladder logs that once
at INFO and tries the next rung for this call only.

Rungs are tried lazily, fastest first: a rung's predicate is asked only when every
faster rung could not serve the call (a predicate may read values on the host).

A predicate answers ``None`` when the rung can serve the call, else the reason it cannot (a
``str``).  The ladder says each reason once per (rung, signature) through the ladder's own
``rejection`` message, if it has one, and puts it in :class:`ForcedRungUnavailable`.  An
:class:`Absent` reason (the rung's kernel is not installed for these tensors) is never logged: on a
CPU it is the normal case.  ``True`` / ``False`` are accepted too (``False``: no reason given).
Each rung names the seam ops it calls (``ops``), so reports of what is installed derive from the
ladders.

A rung may also say how to *prepare* a call (``Rung.prepare``): what it derives from a call's metadata
(shapes, dtypes, layouts, the rungs of the ladders it calls in turn) derived once, giving a runner that
serves every call of that metadata.  A call site keeps the runner beside the rung it chose
(:meth:`Ladder.runner`, :mod:`~sglang_ascend_hybrid.ops.decisions`) and hands both back: the runner serves
the call, and a failure of it is handled exactly as one of the rung's ``run`` (which such a rung does not
write: it is ``prepare(call)(call)``, one code path).

The last rung must be the pure-torch path.  A forced rung (``backend=``) that
cannot serve the call raises :class:`ForcedRungUnavailable`, in the same words
for every ladder.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from sglang_ascend_hybrid.logutil import log_once
from sglang_ascend_hybrid.ops.decisions import changed
from sglang_ascend_hybrid.ops.errors import DeviceResultError, EmulatorContractViolation, bad_input
from sglang_ascend_hybrid.ops.signature import Signature

logger = logging.getLogger(__name__)


# Texts of errors that must never be mistaken for a refusal: memory exhaustion and a lost / broken
# device.  torch's OutOfMemoryError is caught by type; the texts cover torch_npu's RuntimeErrors
# ("NPU out of memory", its UCE / ECC / FORCE STOP / task-abort device errors).  The torch_npu
# source of these texts could not be read here: the list is deliberately broad, since a fatal
# error that propagates stops the server visibly, while one taken for a refusal would hide it.
FATAL_DEVICE_ERROR_MARKERS = (
    "out of memory", "failed to allocate", "memory error", "device lost", "uce error", "ecc error",
    "force stop", "task abort", "hccs link error", "device not ready",
)


class Absent(str):
    """A predicate's reason that the rung's kernel is not here for these tensors (not installed, or
    not for this device): given to :class:`ForcedRungUnavailable`, never logged."""


class ForcedRungUnavailable(RuntimeError):
    """A rung was forced (``backend=`` or an environment variable) but cannot serve the call."""


class DeclinedCall(RuntimeError):
    """Raised by a rung's ``run`` to hand this one call to the next rung without marking the
    rung unsupported for the signature (a value-dependent failure, not a shape refusal).  The
    rung must not have written anything the caller sees."""


# Exception types a device rung's unexpected failure may have and still be a refusal.
DEVICE_REFUSAL_TYPES = (RuntimeError, AttributeError)

# (op, rung) pairs that have served a call in this process, and who wants to hear of a new one
# (the emulated device's records; nothing on a real machine listens).  One set lookup per call.
_served: set[tuple[str, str]] = set()
_served_listeners: list[Callable[[str, str], None]] = []
_served_lock = threading.Lock()


def _note_served(op: str, rung: str) -> None:
    key = (op, rung)
    if key in _served:
        return
    with _served_lock:
        if key in _served:
            return
        _served.add(key)
        listeners = list(_served_listeners)
    for listener in listeners:
        listener(op, rung)


def served() -> frozenset[tuple[str, str]]:
    """The ``(op, rung)`` pairs that have served at least one call in this process."""
    with _served_lock:
        return frozenset(_served)


def on_first_serve(listener: Callable[[str, str], None]) -> None:
    """Call ``listener(op, rung)`` once for each ``(op, rung)`` pair when it first serves a call
    (and now, for each pair that already has)."""
    with _served_lock:
        _served_listeners.append(listener)
        done = sorted(_served)
    for op, rung in done:
        listener(op, rung)


def is_fatal_device_error(exc: BaseException) -> bool:
    """Memory exhaustion or device loss: propagates from every rung, never a refusal."""
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return True
    text = str(exc).lower()
    return any(marker in text for marker in FATAL_DEVICE_ERROR_MARKERS)


def _contract_violation(exc: BaseException) -> bool:
    return isinstance(exc, (EmulatorContractViolation, DeviceResultError))


@dataclass(frozen=True)
class Rung:
    name: str
    # Capability table: None when this rung may serve the signature on these inputs, else why not.
    supports: Callable[..., Optional[str] | bool]
    # Serves one call; None with a prepare step: ``prepare(call)(call)`` (one code path).
    run: Optional[Callable[..., Any]] = None
    # Does this exception mean "kernel refused the shape" with one of its known texts?
    is_refusal: Callable[[BaseException], bool] = lambda exc: False
    # A device kernel: an unexpected RuntimeError after the predicate passed is a refusal too.
    device: bool = False
    # The seam ops the rung calls (kernel reports list them, ForcedRungUnavailable names them;
    # empty for a pure-torch rung).  What a rung needs beyond them is its predicate's reason.
    ops: tuple[str, ...] = ()
    # prepare(call) -> runner(call): the rung for every call of this call's metadata (None: run serves)
    prepare: Optional[Callable[..., Callable[..., Any]]] = None

    def __post_init__(self) -> None:
        if self.run is not None:
            return
        prepare = self.prepare
        if prepare is None:
            raise bad_input("run", None, "a callable, or a prepare step to derive it from", op=f"Rung {self.name!r}")
        object.__setattr__(self, "run", lambda *args, **kwargs: prepare(*args, **kwargs)(*args, **kwargs))

    def classify(self, exc: BaseException) -> str:
        """``"known"`` / ``"unexpected"`` refusal, or ``"error"`` (propagate)."""
        if is_fatal_device_error(exc) or _contract_violation(exc):
            return "error"
        if self.is_refusal(exc):
            return "known"
        if (self.device and isinstance(exc, DEVICE_REFUSAL_TYPES)
                and not isinstance(exc, (ForcedRungUnavailable, DeclinedCall))):
            return "unexpected"
        return "error"


# What a predicate's bare False means.
_DECLINED = Absent("its capability check declined the call")


def _reason(r: Rung, signature: Signature, *args, **kwargs) -> Optional[str]:
    """``r``'s predicate's answer as None (it can serve) or a non-empty reason."""
    answer = r.supports(signature, *args, **kwargs)
    if answer is None or answer is True:
        return None
    return answer if isinstance(answer, str) and answer else _DECLINED


class Ladder:
    """``rejection(rung, signature, reason)`` builds the line said once when a predicate gives a
    reason (None: reasons are not logged, e.g. where the caller says one summary line);
    ``log`` is the logger it goes to (the family's module logger)."""

    def __init__(self, op: str, rungs: Sequence[Rung], *,
                 rejection: Optional[Callable[[str, Signature, str], str]] = None,
                 log: Optional[logging.Logger] = None):
        if not rungs:
            raise bad_input("rungs", list(rungs), "at least one rung", op=f"Ladder {op!r}")
        self.op = op
        self.rungs = tuple(rungs)
        self.names: tuple[str, ...] = tuple(r.name for r in self.rungs)
        self.rejection = rejection
        self.log = log or logger
        self._refused: set[tuple[str, Signature]] = set()
        self._lock = threading.Lock()

    def rung(self, name: str) -> Rung:
        for r in self.rungs:
            if r.name == name:
                return r
        raise bad_input("backend", repr(name), f"'auto' or one of the rungs {self.names}", op=self.op)

    def refused(self, rung: str, signature: Signature) -> bool:
        refused = self._refused   # a set read whole (writers hold the lock); empty: no signature hashed
        return bool(refused) and (rung, signature) in refused

    def mark_refused(self, rung: str, signature: Signature) -> None:
        with self._lock:
            self._refused = self._refused | {(rung, signature)}
        changed()

    def forget_refusals(self) -> None:
        """Forget every call-time refusal (tests; a reloaded kernel)."""
        with self._lock:
            self._refused = set()
        changed()

    def why_not(self, r: Rung, signature: Signature, *args, **kwargs) -> Optional[str]:
        """None when ``r`` may serve the call, else the reason it cannot (its predicate's, said once)."""
        if self.refused(r.name, signature):
            return Absent(f"it refused {signature} earlier in this process")
        reason = _reason(r, signature, *args, **kwargs)
        if reason is not None and self.rejection is not None and not isinstance(reason, Absent):
            log_once(self.log, (self.op, r.name, signature, "rejected"), "%s",
                     self.rejection(r.name, signature, reason))
        return reason

    def _serves(self, r: Rung, signature: Signature, *args, **kwargs) -> bool:
        return self.why_not(r, signature, *args, **kwargs) is None

    def candidates(self, signature: Signature, *args, **kwargs) -> list[Rung]:
        """Every rung that may serve the call (asks every predicate)."""
        return [r for r in self.rungs if self._serves(r, signature, *args, **kwargs)]

    def _next(self, after: int, signature: Signature, *args, **kwargs) -> str:
        for r in self.rungs[after + 1:]:
            if self._serves(r, signature, *args, **kwargs):
                return r.name
        return "nothing"

    def choose(self, signature: Signature, *args, **kwargs) -> Rung:
        """The rung the next call with this signature will try first (no call made)."""
        for r in self.rungs:
            if self._serves(r, signature, *args, **kwargs):
                return r
        raise RuntimeError(f"{self.op}: no rung can serve {signature}")

    def forced(self, name: str, signature: Signature, *args, **kwargs) -> Rung:
        """The rung ``name`` when it can serve the call, else :class:`ForcedRungUnavailable`."""
        r = self.rung(name)
        reason = _reason(r, signature, *args, **kwargs)
        if reason is not None:
            why = "" if reason is _DECLINED else f": {reason}"
            need = f" (it calls {', '.join(r.ops)})" if r.ops else ""
            raise ForcedRungUnavailable(
                f"{self.op}: the forced kernel {name!r} is unavailable for {signature}{why}{need}; "
                f"use 'auto' to let the ladder {self.names} choose")
        return r

    def first(self, signature: Signature, *args, backend: str = "auto", **kwargs) -> Optional[int]:
        """The index of the rung a call runs first: the forced one (None when it cannot serve the call:
        ``__call__`` then raises :class:`ForcedRungUnavailable`, after the caller's value checks), else
        the first whose predicate admits it.  What a call site keeps
        (:mod:`~sglang_ascend_hybrid.ops.decisions`) and hands back as ``__call__``'s ``first``."""
        if backend != "auto":
            r = self.rung(backend)
            return None if _reason(r, signature, *args, **kwargs) is not None else self.rungs.index(r)
        for i, r in enumerate(self.rungs):
            if self._serves(r, signature, *args, **kwargs):
                return i
        raise RuntimeError(f"{self.op}: every rung refused {signature}")

    def runner(self, call, first: Optional[int]) -> Optional[Callable[..., Any]]:
        """The runner the rung ``first`` prepares for ``call``'s metadata (None: no rung, or one without
        ``prepare``): what a call site keeps beside ``first`` and hands back to ``__call__``."""
        if first is None:
            return None
        r = self.rungs[first]
        return None if r.prepare is None else r.prepare(call)

    def __call__(self, signature: Signature, *args, backend: str = "auto", first: Optional[int] = None,
                 runner: Optional[Callable[..., Any]] = None, **kwargs) -> Any:
        """Serve the call.  ``first``: what :meth:`first` answered for this call's metadata in the
        serving state of now (kept by the caller): that rung is run without asking its predicate
        again, the rungs before it are skipped; ``runner``: what :meth:`runner` prepared for it, run
        in place of the rung's ``run``."""
        if backend != "auto":
            r = self.rungs[first] if first is not None else self.forced(backend, signature, *args, **kwargs)
            try:
                result = (runner if runner is not None and first is not None else r.run)(*args, **kwargs)
            except DeclinedCall as exc:
                raise ForcedRungUnavailable(
                    f"{self.op}: the forced kernel {backend!r} declined this call for {signature} ({exc}); "
                    f"use 'auto' to let the ladder {self.names} choose") from exc
            _note_served(self.op, r.name)
            return result
        if runner is not None and first is not None and not self.refused(self.names[first], signature):
            try:  # the kept rung's runner: no predicate asked, nothing else looked up
                result = runner(*args, **kwargs)
            except Exception as exc:
                self._failed(first, exc, signature, *args, **kwargs)
                return self._walk(first + 1, None, signature, *args, **kwargs)
            _note_served(self.op, self.names[first])
            return result
        return self._walk(0 if first is None else first, first, signature, *args, **kwargs)

    def _walk(self, start: int, first: Optional[int], signature: Signature, *args, **kwargs) -> Any:
        """Serve the call on the first rung from ``start`` that may (``first``: run without asking its
        predicate, unless refused since it was chosen)."""
        for i in range(start, len(self.rungs)):
            r = self.rungs[i]
            if (i != first or self.refused(r.name, signature)) and not self._serves(r, signature, *args, **kwargs):
                continue
            try:
                result = r.run(*args, **kwargs)
            except Exception as exc:
                self._failed(i, exc, signature, *args, **kwargs)
                continue
            _note_served(self.op, r.name)
            return result
        raise RuntimeError(f"{self.op}: every rung refused {signature}")

    def _failed(self, i: int, exc: Exception, signature: Signature, *args, **kwargs) -> None:
        """Rung ``i`` failed on a call: a decline is said once and the call goes on down the ladder; a
        refusal marks the rung refused for the signature, said once; anything else propagates."""
        r = self.rungs[i]
        if isinstance(exc, DeclinedCall):
            log_once(logger, (self.op, r.name, signature, "declined"),
                     "sglang-ascend-hybrid: %s kernel %s declined a call on %s (%s); using %s for such calls",
                     self.op, r.name, signature, exc, self._next(i, signature, *args, **kwargs))
            return
        kind = r.classify(exc)
        if kind == "error":
            raise exc
        self.mark_refused(r.name, signature)
        taken = self._next(i, signature, *args, **kwargs)
        if kind == "known":
            log_once(
                logger, (self.op, r.name, signature),
                "sglang-ascend-hybrid: %s kernel %s refused %s (%s); using %s for this shape from now on",
                self.op, r.name, signature, str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
                taken)
        else:
            log_once(
                logger, (self.op, r.name, signature),
                "sglang-ascend-hybrid: %s kernel %s failed unexpectedly on %s although its capability "
                "check accepted the call; treating it as a refusal and using %s for this shape from "
                "now on. Full error: %s: %s",
                self.op, r.name, signature, taken, type(exc).__name__, exc, level=logging.WARNING)


def env_forced_rung(var, names: Sequence[str], family: str, op: str) -> str:
    """The one forced-backend resolver: the rung the environment variable ``var`` (an
    :mod:`sglang_ascend_hybrid.envs` entry, validated there against every rung name of its op
    family) forces on ladder ``op`` whose rung names are ``names``; ``"auto"`` when it forces
    nothing or names a rung of another ladder of the family (said once per ladder and value)."""
    forced = var.get()
    if forced == "auto" or forced in names:
        return forced
    log_once(logger, ("env-backend", var.name, op, forced),
             "sglang-ascend-hybrid: %s=%s is not a %s %s kernel; %s walks its ladder %s",
             var.name, forced, family, op, op, tuple(names))
    return "auto"
