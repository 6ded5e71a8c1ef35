"""CPU emulator of sgl-kernel-npu's Triton ``l2norm_fwd`` (contract: ``l2norm_refusal_reason`` and the
notes above it in :mod:`sglang_ascend_hybrid.ops.gdn.contract`).

Source: sgl-project/sgl-kernel-npu ``python/sgl_kernel_npu/sgl_kernel_npu/fla/l2norm.py`` at
f425bdf1e191a7682296d3b2ed0b927d4e37d671 (read again at 0c31ccf727c3d7a55cc8b1d28247b2403b8408b3:
the same text): ``l2norm_fwd`` (``x.view(-1, D)``, ``y = torch.empty_like(x)`` or of ``output_dtype``,
``BD = min(65536 // x.element_size(), next_power_of_2(D))``, ``D > BD`` raising), its kernels
``l2norm_fwd_kernel_opt`` (D <= 512: ``b_x * rsqrt(sum b_x^2 + eps)`` over block pointers of shape
``(T, D)`` and strides ``(D, 1)``) and ``l2norm_fwd_kernel1`` (``x += i_t * D``, ``1 / sqrt``).  Math
in fp32, stored in the output's dtype, the result viewed back to x's shape.

Rules, each from the source:
- rows of more than 64 KB: ``RuntimeError("This layer doesn't support feature dim >= 64KB.")``;
- an x whose leading dims cannot be merged: ``x.view`` raises (torch's own ``RuntimeError``);
- an x that can be viewed as ``[T, D]`` but whose rows are not ``D`` elements apart is read at
  ``t * D`` regardless: wrong rows, so :class:`EmulatorContractViolation` (undefined here).
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang_ascend_hybrid.ops.errors import EmulatorContractViolation
from sglang_ascend_hybrid.ops.gdn.contract import L2NORM_MAX_ROW_BYTES, L2NORM_TEXT


def _next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def l2norm_fwd(x: torch.Tensor, eps: float = 1e-6, output_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """``sgl_kernel_npu.fla.l2norm.l2norm_fwd``: ``x / sqrt(sum(x^2) + eps)`` over the last dim."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
    shape = x.shape
    rows = x.view(-1, x.shape[-1])   # the source's view: raises where the rows cannot be merged
    d = rows.shape[-1]
    block_d = min(L2NORM_MAX_ROW_BYTES // x.element_size(), _next_power_of_2(d))
    if d > block_d:
        raise RuntimeError(L2NORM_TEXT)
    if rows.shape[0] > 1 and rows.stride(0) != d or d > 1 and rows.stride(1) != 1:
        raise EmulatorContractViolation(
            f"l2norm_fwd: x of shape {tuple(shape)} strides {tuple(x.stride())} is read at row t * {d} "
            "whatever its strides (the kernels' block pointers): rows would come from the wrong places")
    xf = rows.float()
    sum_sq = (xf * xf).sum(dim=1, keepdim=True)
    scale = torch.rsqrt(sum_sq + eps) if d <= 512 else 1 / torch.sqrt(sum_sq + eps)
    return (xf * scale).to(output_dtype or x.dtype).view(shape)
