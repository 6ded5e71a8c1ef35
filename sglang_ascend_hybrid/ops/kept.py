"""Tensors derived from a layer's weights, made once per weight and kept on the weight tensor itself.

A serving call may need a weight in another layout or dtype (the conv taps ``[width, dim]``, a GDN
layer's ``-exp(A_log)`` in fp32): the same for every call of the layer, so it is made once and kept
on the weight (SGLang's Ascend GDN backend keeps its own copy on the layer the same way,
``AscendGDNAttnBackend._get_conv_weights_t``).  Unlike that copy, this one is checked on every use:
it is made again when the weight's storage, its in-place version counter, dtype, shape or strides
changed (a weight reloaded in place).  A copy made inside a graph capture is not kept: its values
would exist only once the graph replays, and an eager call could read it before that.
"""

from __future__ import annotations

from typing import Callable

import torch

from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.step_cache import tensor_identity

_PREFIX = "_sglang_ascend_hybrid_kept_"


def kept(weight: torch.Tensor, name: str, make: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """``make(weight)``, kept on ``weight`` under ``name`` while the weight is unchanged (never write
    the result: every call of the layer shares it)."""
    attr = _PREFIX + name
    found = getattr(weight, attr, None)
    identity = tensor_identity(weight)
    if found is not None and found[0] == identity:
        return found[1]
    value = make(weight)
    if not seam.capturing():
        try:
            setattr(weight, attr, (identity, value))
        except (AttributeError, TypeError):   # a tensor type that takes no attributes: made per call
            pass
    return value
