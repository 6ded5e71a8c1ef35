"""A dispatch mode that counts host syncs and data-dependent-shape ops (graph-capture hazards).

On an NPU the serving decode path runs under graph capture: any op below would either force a
device-to-host sync or produce a shape that depends on tensor values, and break the capture.
On a CPU the same aten ops are dispatched, so counting them proves the property here.
"""

from __future__ import annotations

from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten

# Ops that read tensor values on the host or whose output shape depends on values.
_SYNC_OP_NAMES = (
    "_local_scalar_dense.default",  # .item(), bool(t), int(t), float(t)
    "nonzero.default", "masked_select.default", "_unique.default", "_unique2.default",
    "unique_dim.default", "unique_consecutive.default", "repeat_interleave.Tensor",
    "argwhere.default", "is_nonzero.default", "equal.default", "allclose.default",
)


def _op(name: str):
    packet, overload = name.rsplit(".", 1)
    try:
        return getattr(getattr(aten, packet), overload)
    except (AttributeError, RuntimeError):
        return None


SYNC_OPS = {op for op in map(_op, _SYNC_OP_NAMES) if op is not None}


class SyncCounter(TorchDispatchMode):
    """``with SyncCounter() as c: ...`` then ``c.total`` / ``c.counts`` (op name -> count).

    Also counts copies of device tensors to the CPU (``.cpu()``, ``.to("cpu")``), explicit CPU
    copies of CPU tensors when ``device_of_interest="cpu"`` (how the plugin's host reads show up
    on a CPU machine), and boolean-mask indexing (``t[mask]``), which is a nonzero in disguise.
    """

    def __init__(self, device_of_interest: str | None = None):
        super().__init__()
        self.counts: Counter = Counter()
        self.device_of_interest = device_of_interest

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in SYNC_OPS:
            self.counts[str(func)] += 1
        elif func in (aten.index.Tensor, aten.index_put_.default, aten.index_put.default):
            indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
            if any(i is not None and i.dtype == torch.bool for i in indices):
                self.counts[f"{func} (boolean mask)"] += 1
        elif func is aten._to_copy.default:
            # An explicit transfer to the host.  On a CPU machine the plugin's host reads
            # (ops.host.host_list) are explicit cpu copies, counted with device_of_interest="cpu".
            dst = kwargs.get("device")
            src = args[0]
            if dst is not None and torch.device(dst).type == "cpu" and isinstance(src, torch.Tensor) and (
                    src.device.type != "cpu" or self.device_of_interest == "cpu"):
                self.counts[f"{func} (to cpu)"] += 1
        elif func is aten.copy_.default:
            dst, src = args[0], args[1]
            if isinstance(src, torch.Tensor) and dst.device.type == "cpu" and src.device.type != "cpu":
                self.counts[f"{func} (to cpu)"] += 1
        return func(*args, **(kwargs or {}))
