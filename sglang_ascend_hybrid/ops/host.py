"""Reading tensor values on the host: the one way plugin code does it.

On an NPU this is a device-to-host copy and a sync, so it is only used where the input
policy allows value checks (direct calls of the public ops, ``SGLANG_ASCEND_HYBRID_DEBUG_CHECKS=1``,
prefill paths that already read offsets on the host), never on the serving decode path.
The explicit copy makes every such read visible to a dispatch-mode sync counter on a CPU too.
"""

from __future__ import annotations

import torch


def host_list(t: torch.Tensor) -> list:
    """``t``'s values as (nested) Python lists, through one explicit copy to the CPU."""
    return t.detach().to("cpu", copy=True).tolist()
