"""Values a serving call derives from one step's index tensors, kept for the step's other layers.

Within one forward step SGLang hands every layer the same metadata tensors (slot indices, sequence
offsets), and a rung derives the same small tensors from them in every layer (the GDN verify rung's
padding-row indices and live mask, the decode ladder's live mask).  :class:`StepValue` keeps the last
derived value with the identity of the tensors it came from, and gives it back while they are the
same Python objects (or views of the same base object: a layer may reshape the step's tensor), on
the same storage, shape and strides, at the same in-place version; anything else derives it again
(a new tensor at a freed one's address is another object, so never a match).  Never inside a graph
capture: there the derivation is captured with each layer (a graph replays it with no host cost),
and nothing derived during a capture is kept.

What the key cannot see: a kernel writing an index tensor through its data pointer (no version bump),
and the very object given again at the same version after its storage was swapped without one
(``t.data = ...``; it is then not re-read: storage, shape and strides are compared only for another object).
SGLang builds these tensors per step with torch ops (new tensors, or ``copy_`` into graph buffers,
which bumps the version), so a later step never matches an earlier one's key.
"""

from __future__ import annotations

import weakref
from threading import get_ident
from typing import Callable, TypeVar

import torch

from sglang_ascend_hybrid.ops import seam

T = TypeVar("T")


def tensor_identity(t: torch.Tensor) -> tuple:
    """What a kept value derived from ``t`` depends on besides the object: its storage address, its
    in-place version counter, dtype, shape and strides."""
    return (t.data_ptr(), t._version, t.dtype, t.shape, t.stride())


def _owner(t: torch.Tensor) -> torch.Tensor:
    """The tensor object that owns ``t``'s memory: its base when ``t`` is a view (a layer reshapes the
    step's tensor into a new view object each time; the base and its version counter are shared)."""
    return t if t._base is None else t._base


class StepValue:
    """One kept value per call site (a module-level instance), derived by ``make`` from ``tensors``."""

    def __init__(self, name: str):
        self.name = name
        # per thread (TP ranks in threads never share an entry): thread id -> (extra, weak references to the
        # tensors and to their owners, their identities, value), read without a lock (each thread writes only
        # its own entry; a thread-local costs as much as the rest of a hit).  A thread's entry outlives it
        # until a thread of the same id replaces it: one small value per thread id.
        self._entries: dict[int, tuple] = {}

    def get(self, tensors: tuple, extra: tuple, make: Callable[[], T]) -> T:
        """The value ``make()`` gives for ``tensors`` (and the plain values ``extra``), kept while they
        are unchanged (see the module docstring)."""
        if seam.capturing():
            return make()
        thread = get_ident()
        kept = self._entries.get(thread)
        if kept is not None and kept[0] == extra and len(kept[1]) == len(tensors):
            for obj, ref, identity, t in zip(kept[1], kept[2], kept[3], tensors):
                if obj() is t and t._version == identity[1]:   # the very object, not written since
                    continue
                if ref() is not _owner(t) or identity != tensor_identity(t):  # a view of the same object
                    break
            else:
                return kept[4]
        value = make()
        self._entries[thread] = (extra, tuple(weakref.ref(t) for t in tensors),
                                 tuple(weakref.ref(_owner(t)) for t in tensors),
                                 tuple(tensor_identity(t) for t in tensors), value)
        return value

    def forget(self) -> None:
        """Drop this thread's kept value (the next call derives it again)."""
        self._entries.pop(get_ident(), None)
