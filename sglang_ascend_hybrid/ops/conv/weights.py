"""The conv weight in the layout ``torch.ops.npu.causal_conv1d`` takes, made once per weight.

The op takes the depthwise taps as a contiguous ``[width, dim]`` tensor; SGLang's models hold them as
``[dim, width]``.  The transposed copy is the same for every call of a layer, so it is made once and
kept on the weight tensor itself (SGLang's Ascend GDN backend keeps its own copy on the layer the
same way, ``AscendGDNAttnBackend._get_conv_weights_t``).  Unlike that copy, this one is checked on
every use: it is made again when the weight's storage, its in-place version counter, dtype, shape or
strides changed (a weight reloaded in place).  A copy made inside a graph capture is not kept: its
values would exist only once the graph replays, and an eager call could read it before that.
"""

from __future__ import annotations

import torch

from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.step_cache import tensor_identity

_ATTR = "_sglang_ascend_hybrid_taps_major"


def taps_major(weight: torch.Tensor) -> torch.Tensor:
    """``weight [dim, width]`` as a contiguous ``[width, dim]`` tensor (a kept copy; never written)."""
    kept = getattr(weight, _ATTR, None)
    identity = tensor_identity(weight)
    if kept is not None and kept[0] == identity:
        return kept[1]
    copy = weight.t().contiguous()
    if not seam.capturing():
        try:
            setattr(weight, _ATTR, (identity, copy))
        except (AttributeError, TypeError):   # a tensor type that takes no attributes: made per call
            pass
    return copy
