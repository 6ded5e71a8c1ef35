"""A dispatch mode that logs every aten op with which of a set of *static* tensors (a graph's captured
buffers, a state pool) its tensor arguments live in: the "same ops on the same storage at every
replay" check of the graph-mode tests.  Other tensors show as "tmp": on a device graph they come
from the graph's private pool, on a CPU they are fresh allocations."""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class StaticOpLog(TorchDispatchMode):
    def __init__(self, static=()):
        super().__init__()
        self.static = {t.untyped_storage().data_ptr(): i for i, t in enumerate(static)}
        self.ops: list = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        where = tuple(self.static.get(a.untyped_storage().data_ptr(), "tmp") for a in list(args) + list(kwargs.values())
                      if isinstance(a, torch.Tensor) and a.device.type != "meta")
        self.ops.append((str(func), where))
        return func(*args, **kwargs)
