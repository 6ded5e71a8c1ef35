"""The conv weight in the layout ``torch.ops.npu.causal_conv1d`` takes, made once per weight.

The op takes the depthwise taps as a contiguous ``[width, dim]`` tensor; SGLang's models hold them as
``[dim, width]``.  The transposed copy is the same for every call of a layer: kept on the weight
(:mod:`sglang_ascend_hybrid.ops.kept`, which says when it is made again).
"""

from __future__ import annotations

import torch

from sglang_ascend_hybrid.ops.kept import kept


def _transposed(weight: torch.Tensor) -> torch.Tensor:
    return weight.t().contiguous()


def taps_major(weight: torch.Tensor) -> torch.Tensor:
    """``weight [dim, width]`` as a contiguous ``[width, dim]`` tensor (a kept copy; never written)."""
    return kept(weight, "taps_major", _transposed)
