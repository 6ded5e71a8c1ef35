"""CPU emulators of sgl-kernel-npu's Triton GDN gating kernels (contract: the notes above
``gating_refusal_reason`` in :mod:`sglang_ascend_hybrid.ops.gdn.contract`).

Source: sgl-project/sgl-kernel-npu ``python/sgl_kernel_npu/sgl_kernel_npu/fla/fused_gdn_gating.py`` at
f425bdf1e191a7682296d3b2ed0b927d4e37d671: ``fused_gdn_gating_npu`` with its kernel
``fused_gdn_gating_kernel``, and ``fused_gdn_gating_kernel_without_sigmoid`` with
``fused_gdn_gating_kernel_without_sigmoid_kernel``.  Both source functions and kernels were run under
Triton's CPU interpreter against these emulators and an fp64 loop (docs/kernel-contracts.md, "GDN gating").

What each copies, rule by rule:
- the host's ``batch, num_heads = a.shape``: an ``a`` that is not 2-D raises Python's own unpacking error;
- ``g = -exp(A_log) * softplus(a + dt_bias)`` in fp32, the kernels' own softplus
  ``(1/beta) * log(1 + exp(beta*x))`` where ``beta*x <= threshold``, else x; g float32 ``[1, batch, H]``;
- ``fused_gdn_gating_npu``: ``beta_output = sigmoid(b)`` in fp32, stored in **b's dtype** ``[1, batch, H]``;
- ``..._without_sigmoid``: b returned as given (the same tensor); its tiling
  ``BLK_BATCHES = cdiv(batch, cdiv(48, cdiv(H, 8)))`` goes into ``tl.arange``, which raises for a range
  that is not a power of two (``arange's range must be a power of 2``) or is empty (batch 0:
  ``arange's end argument must be greater than the start argument``): a defect copied here;
- the kernels address a[t, h] / b[t, h] at ``t * H + h`` and A_log / dt_bias at ``h`` whatever their
  strides: a strided input, or weights that are not one contiguous element per head, would be read from
  the wrong places, so :class:`EmulatorContractViolation`;
- ``fused_gdn_gating_npu`` on an empty batch launches a grid of 0 programs: what the NPU does then was
  not read, so :class:`EmulatorContractViolation`.
"""

from __future__ import annotations

import torch

from sglang_ascend_hybrid.ops.errors import EmulatorContractViolation
from sglang_ascend_hybrid.ops.gdn.contract import GATING_ARANGE_TEXT

# fused_gdn_gating_kernel_without_sigmoid's host: ``num_cores = 48  # num_vectorcore of NPU``
WITHOUT_SIGMOID_CORES = 48
BLK_HEADS = 8


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _addressed_by_index(name: str, t: torch.Tensor, what: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if not t.is_contiguous():
        raise EmulatorContractViolation(
            f"fused_gdn_gating: {name} of shape {tuple(t.shape)} strides {tuple(t.stride())} is read at {what} "
            "whatever its strides: elements would come from the wrong places")


def _per_head(name: str, t: torch.Tensor, num_heads: int) -> None:
    _addressed_by_index(name, t, "h")
    if t.numel() != num_heads:
        raise EmulatorContractViolation(
            f"fused_gdn_gating: {name} has {t.numel()} elements, the kernel reads {name}[h] for h < {num_heads} "
            "(one per head): out of bounds or the wrong elements")


def _g(A_log, a, dt_bias, beta: float, threshold: float) -> torch.Tensor:
    x = a.float() + dt_bias.float().reshape(-1)
    softplus_x = torch.where(beta * x <= threshold, (1 / beta) * torch.log(1 + torch.exp(beta * x)), x)
    return -torch.exp(A_log.float().reshape(-1)) * softplus_x


def fused_gdn_gating_npu(A_log, a, b, dt_bias, beta: float = 1.0, threshold: float = 20.0):
    """``sgl_kernel_npu.fla.fused_gdn_gating.fused_gdn_gating_npu`` -> ``(g, beta_output)``."""
    batch, num_heads = a.shape
    for name, t in (("a", a), ("b", b)):
        _addressed_by_index(name, t, "t * num_heads + h")
    if b.numel() != batch * num_heads:
        raise EmulatorContractViolation(
            f"fused_gdn_gating: b of shape {tuple(b.shape)} is read at t * {num_heads} + h for t < {batch}: "
            "out of bounds or the wrong elements")
    _per_head("A_log", A_log, num_heads)
    _per_head("dt_bias", dt_bias, num_heads)
    if batch == 0:
        raise EmulatorContractViolation("fused_gdn_gating_npu: an empty batch launches a grid of 0 programs, "
                                        "whose behaviour on the NPU was not read")
    g = _g(A_log, a, dt_bias, beta, threshold).reshape(1, batch, num_heads)
    beta_output = torch.sigmoid(b.float()).to(b.dtype).reshape(1, batch, num_heads)
    return g, beta_output


def fused_gdn_gating_kernel_without_sigmoid(A_log, a, b, dt_bias, beta: float = 1.0, threshold: float = 20.0):
    """``sgl_kernel_npu.fla.fused_gdn_gating.fused_gdn_gating_kernel_without_sigmoid`` -> ``(g, b)``."""
    batch, num_heads = a.shape
    _addressed_by_index("a", a, "t * num_heads + h")
    _per_head("A_log", A_log, num_heads)
    _per_head("dt_bias", dt_bias, num_heads)
    blk_batches = _cdiv(batch, _cdiv(WITHOUT_SIGMOID_CORES, _cdiv(num_heads, BLK_HEADS)))
    if blk_batches <= 0:
        raise ValueError("arange's end argument must be greater than the start argument")
    if blk_batches & (blk_batches - 1):
        raise ValueError(GATING_ARANGE_TEXT)
    return _g(A_log, a, dt_bias, beta, threshold).reshape(1, batch, num_heads), b
