"""A GDN step's decay from SGLang's gating inputs, ``g = -exp(A_log) * softplus(a + dt_bias)`` in fp32 (log
space): computed by sgl-kernel-npu's ``fused_gdn_gating_npu`` (:func:`decay_on_kernel`) or in torch
(:func:`decay_in_torch`).  Shared by the decode gates ladder (:mod:`.decode.gates`) and the verify gates
ladder (:mod:`.verify_gates`); the kernel's contract is ``gating_refusal_reason`` in :mod:`.contract`.
"""

from __future__ import annotations

import torch

from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.gdn.contract import OP_GATING
from sglang_ascend_hybrid.ops.kept import kept
from sglang_ascend_hybrid.ops.tensors import as_shape


def decay_on_kernel(A_log: torch.Tensor, a: torch.Tensor, b: torch.Tensor, dt_bias: torch.Tensor, rows: int,
                    heads: int, softplus_beta: float, threshold: float) -> torch.Tensor:
    """g of ``rows`` x ``heads`` gates on ``fused_gdn_gating_npu``, a / b handed as the contiguous
    ``[rows, heads]`` the kernel addresses at ``t * heads + h`` (its host unpacks a 2-D shape); its
    ``beta_output`` is not used.  g as the kernel returns it: ``[1, rows, heads]`` (f425bdf1) or
    ``[rows, heads]`` (the form reported after PR #747), so read it by its elements."""
    shape = (rows, heads)
    g, _ = seam.call(OP_GATING, A_log, as_shape(a, shape).contiguous(), as_shape(b, shape).contiguous(), dt_bias,
                     softplus_beta, threshold)
    return g


def decay_in_torch(A_log: torch.Tensor, a: torch.Tensor, dt_bias: torch.Tensor, rows: int, heads: int,
                   softplus_beta: float, threshold: float) -> torch.Tensor:
    """The same g in torch, fp32 ``[rows, heads]``; the layer's constants (``dt_bias`` in fp32, ``-exp(A_log)``)
    are kept on its weights (:mod:`...ops.kept`)."""
    x = a.reshape(rows, heads).float() + kept(dt_bias, "gdn_dt_bias_fp32", _fp32)
    sp = torch.nn.functional.softplus(x, beta=softplus_beta, threshold=threshold)
    return kept(A_log, "gdn_minus_exp_a_log", _minus_exp) * sp


def _fp32(t: torch.Tensor) -> torch.Tensor:
    return t.float().reshape(-1)


def _minus_exp(a_log: torch.Tensor) -> torch.Tensor:
    return -a_log.float().reshape(-1).exp()
