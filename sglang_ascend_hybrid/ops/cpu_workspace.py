"""Temporaries kept from call to call on CPU, per thread.

A fresh multi-MB CPU tensor is fresh pages: with PyTorch's CPU allocator the first touch of each
page faults (about 0.5 ms per MB on the benchmark machine), which for the torch rungs costs about
as much as the arithmetic that fills them.  Temporaries that never leave an op are therefore kept
per thread on CPU and reused by the next call; other devices have caching allocators and get a
plain ``torch.empty``.  Nothing an op returns may alias these buffers (each user's tests check it).
"""

from __future__ import annotations

import math
import threading

import torch

KEEP_MAX_ELEMENTS = 1 << 23   # larger temporaries are not kept (32 MB of fp32 per buffer)

_LOCAL = threading.local()


def buffers(device) -> dict:
    """The calling thread's kept buffers on CPU; a new (throw-away) dict on other devices."""
    if torch.device(device).type != "cpu":
        return {}
    if not hasattr(_LOCAL, "buffers"):
        _LOCAL.buffers = {}
    return _LOCAL.buffers


def kept(name: str, shape: tuple[int, ...], dtype: torch.dtype, device, store: dict | None = None) -> torch.Tensor:
    """An uninitialised ``shape`` tensor, a view of the buffer ``(name, dtype)`` of ``store``
    (grown when too small).  Without ``store``: the thread's kept buffers on CPU, and a new
    tensor elsewhere or above :data:`KEEP_MAX_ELEMENTS`.  A caller that passes its own
    ``store`` (``buffers(device)``: on other devices a dict for one call) bounds its sizes
    itself, and its temporaries of one name share memory on every device."""
    numel = math.prod(shape)
    if store is None:
        if torch.device(device).type != "cpu" or numel > KEEP_MAX_ELEMENTS:
            return torch.empty(shape, dtype=dtype, device=device)
        store = buffers(device)
    buf = store.get((name, dtype))
    if buf is None or buf.numel() < numel:
        # a normal tensor even under inference_mode: later calls may run outside it
        with torch.inference_mode(False):
            buf = torch.empty(numel, dtype=dtype, device=device)
        store[(name, dtype)] = buf
    return buf[:numel].view(shape)
