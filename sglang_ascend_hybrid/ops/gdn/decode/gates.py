"""The decay of a GDN decode step for a kernel that takes it computed: the ``gdn_decode_gates`` ladder.

SGLang's ``TritonGDNKernel.decode`` hands the step's gating inputs ``a`` / ``b`` and the layer's ``A_log`` /
``dt_bias``.  The Triton decode entry computes the gates itself; ``torch.ops.npu.recurrent_gated_delta_rule``
(the decode ladder's npu_recurrent rung) takes ``g = -exp(A_log) * softplus(a + dt_bias)`` (fp32, log space)
and beta before its sigmoid (SGLang's ``b`` as given).  Rungs for g:

``npu_gating``  sgl-kernel-npu's Triton ``fused_gdn_gating_npu`` (SGLang's Ascend GDN backend runs it for a
                step's gates; contract: ``gating_refusal_reason`` and the notes above it in :mod:`..contract`)
                on contiguous a / b: one launch.  Its g is used; its ``beta_output`` (post-sigmoid) is not,
                since the recurrent op applies the sigmoid itself.
``torch``       the same formula in torch (:meth:`.call.DecodeCall.decay`): four launches

Capture-safe: metadata only, no host read.
"""

from __future__ import annotations

import logging
from typing import Optional

import torch

from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.gdn import contract as caps
from sglang_ascend_hybrid.ops.gdn.contract import OP_GATING
from sglang_ascend_hybrid.ops.gdn.decode.call import SOFTPLUS_BETA, SOFTPLUS_THRESHOLD, DecodeCall
from sglang_ascend_hybrid.ops.gdn.gating import decay_on_kernel
from sglang_ascend_hybrid.ops.gdn.signature import GdnSignature, log_path, rejection_line
from sglang_ascend_hybrid.ops.ladder import Absent, Ladder, Rung

logger = logging.getLogger(__name__)


def _npu_supports(sig: GdnSignature, call: DecodeCall) -> Optional[str]:
    if call.precomputed_gates is not None:
        return Absent("the call's gates are precomputed")
    if not seam.serves(OP_GATING, call.a, call.b, call.A_log, call.dt_bias):
        return Absent(f"{OP_GATING} is not installed for these tensors")
    return caps.gating_refusal_reason(sig.value_heads, call.A_log, call.dt_bias)


def _npu_prepare(call: DecodeCall):
    """npu_gating for every call of ``call``'s metadata (its rows, heads and signature read once)."""
    sig, rows, heads = call.signature(), call.batch, call.heads[2]

    def run(c: DecodeCall) -> torch.Tensor:
        g = decay_on_kernel(c.A_log, c.a, c.b, c.dt_bias, rows, heads, SOFTPLUS_BETA, SOFTPLUS_THRESHOLD)
        log_path("decode gates", "npu_gating", sig)
        return g   # read by its elements

    return run


def _torch_run(call: DecodeCall) -> torch.Tensor:
    log_path("decode gates", "torch", call.signature())
    return call.decay()


GATES = Ladder("gdn_decode_gates", [
    Rung("npu_gating", _npu_supports, device=True, ops=(OP_GATING,), prepare=_npu_prepare),
    Rung("torch", lambda sig, call: None, _torch_run),
], rejection=rejection_line("decode gates"), log=logger)

