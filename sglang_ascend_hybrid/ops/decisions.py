"""What a serving call decides from metadata alone, kept for later calls of the same metadata.

A serving call's input checks, its signature and the rung its ladder runs first depend on nothing
but its tensors' metadata (shape, strides, storage offset, dtype, device), its plain arguments, and
the process's serving state: the ops behind the seam (emulators, resolved kernels, package probes),
the device facts, the probes' verdicts, the ladders' call-time refusals and the conv tiling cache.
Every layer of every step repeats the same few decisions, so each call site keeps them in a
:class:`Decisions` table keyed by :func:`key_of` its call, and each entry is valid for one
*generation* of that state: every change of it calls :func:`changed`, and an entry of an older
generation is decided again.  A decision that raised (a bad input, a forced rung that cannot serve)
is never kept: the next call raises the same error the same way.

Nothing decided inside a graph capture is kept: there a probe cannot run, so a kernel whose probe
has not run yet is passed over; the next call outside a capture runs the probe and may choose it.

What the key cannot see: values (decisions never read them; value checks, when asked for, run on
every call) and environment variables (the callers read theirs on every call and put the value in
the key).
"""

from __future__ import annotations

import threading
from dataclasses import fields
from typing import Callable, Hashable, Optional, TypeVar

import torch

T = TypeVar("T")

_lock = threading.Lock()
_generation = 0


def generation() -> int:
    """The serving state's generation (read without the lock: an int is read whole)."""
    return _generation


def changed() -> None:
    """The serving state changed: every kept decision is decided again."""
    global _generation
    with _lock:
        _generation += 1


_Tensor = torch.Tensor
_PLAIN = (type(None), bool, int, float, str)


def _meta(value) -> Hashable:
    """A value as a key holds it: a tensor by its metadata, a tuple or list entry by entry."""
    if isinstance(value, _Tensor):
        return (value.shape, value.stride(), value.storage_offset(), value.dtype, value.device)
    if isinstance(value, (tuple, list)):
        return tuple(_meta(v) for v in value)
    return value


_FIELDS: dict[type, tuple[str, ...]] = {}


def key_of(call) -> tuple:
    """The key of a call object (a dataclass): its type and every public field, a tensor by its
    metadata, a tuple or list entry by entry, anything else as it is (it must be hashable)."""
    cls = type(call)
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in fields(cls) if not f.name.startswith("_"))
    key = [cls]
    for name in names:  # _meta inlined for the common cases: this runs on every serving call
        v = getattr(call, name)
        if type(v) is _Tensor:
            key.append((v.shape, v.stride(), v.storage_offset(), v.dtype, v.device))
        elif type(v) in _PLAIN:
            key.append(v)
        else:
            key.append(_meta(v))
    return tuple(key)


def tensors_key(*tensors) -> tuple:
    """The key of a few tensors (None entries as None): each by its metadata, as :func:`key_of` holds one."""
    return tuple([None if t is None else (t.shape, t.stride(), t.storage_offset(), t.dtype, t.device)
                  for t in tensors])


class Decisions:
    """One call site's kept decisions: ``key -> (generation, value)``.  At most ``capacity`` entries
    (a serving process meets a few shapes per call site; past that the table starts afresh)."""

    def __init__(self, name: str, capacity: int = 256):
        self.name = name
        self.capacity = capacity
        self._table: dict[Hashable, tuple[int, object]] = {}

    def decide(self, key: Hashable, make: Callable[[], T]) -> T:
        """``make()``'s value for ``key``, kept while the serving state's generation is unchanged."""
        gen = _generation
        try:
            kept = self._table.get(key)
        except TypeError:  # a field value that is not hashable: decided on every call
            return make()
        if kept is not None and kept[0] == gen:
            return kept[1]  # type: ignore[return-value]
        value = make()
        from sglang_ascend_hybrid.ops import seam  # seam calls changed(): imported here, not at the top

        if not seam.capturing():
            if len(self._table) >= self.capacity:
                self._table = {}
            self._table[key] = (gen, value)
        return value


def checked_first(table: Decisions, ladder, call, backend: str, check: Callable[[object], None],
                  then: Optional[Callable[[object, Optional[int]], object]] = None) -> tuple:
    """``(call.signature(), ladder.first(...), then(call, first))`` after ``check(call)`` (the call's shape /
    dtype checks), kept in ``table`` per metadata key and forced ``backend``: what the GDN decode and verify
    ops decide for a call (:class:`~sglang_ascend_hybrid.ops.ladder.Ladder` ``__call__`` takes ``first``
    back).  ``then``: a further decision of the same metadata given the rung chosen (None without it)."""

    def decide() -> tuple:
        check(call)
        sig = call.signature()
        first = ladder.first(sig, call, backend=backend)
        return sig, first, None if then is None else then(call, first)

    return table.decide((backend, key_of(call)), decide)
