"""``torch.ops.npu.recurrent_gated_delta_rule`` as a one-token decode step on rows of a state pool
(the decode ladder's npu_recurrent rung)."""

from __future__ import annotations

import torch

from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.gdn.contract import OP_NPU_RECURRENT
from sglang_ascend_hybrid.ops.gdn.scatter import scatter_live_rows
from sglang_ascend_hybrid.ops.tensors import as_dtype

# The op applies the sigmoid to beta itself (sgl-project/sgl-kernel-npu csrc/recurrent_gated_delta_rule/
# op_kernel/recurrent_gated_delta_rule_kernel.cpp, CopyInGamaBeta, at f425bdf1), so a post-sigmoid beta is
# handed over as its logit, clamped to this finite bound: never +-inf (0 and 1 give -inf / +inf), and
# sigmoid(+-128) rounds to exactly 1 / 0 in fp32.
BETA_LOGIT_BOUND = 128.0


def beta_logit(beta: torch.Tensor) -> torch.Tensor:
    """The finite bf16 logit of a post-sigmoid ``beta`` (what the op's sigmoid turns back into beta)."""
    return torch.logit(beta.float()).clamp(-BETA_LOGIT_BOUND, BETA_LOGIT_BOUND).to(torch.bfloat16)


def recurrent_on_rows(q, k, v, beta_logits, g, pool, slots, live, scale: float, *, lengths,
                      slot_rows) -> torch.Tensor:
    """``torch.ops.npu.recurrent_gated_delta_rule`` for one token per request on the pool rows ``slots``;
    only live requests' rows change.

    q, k ``[B, Hk, K]`` raw (the op l2-normalises them); v ``[B, Hv, V]`` (each may have a leading
    dim of 1: a decode step's ``[1, B, ...]``); ``beta_logits`` (the op applies the sigmoid) and g
    (fp32) ``B * Hv`` elements each, in row order (any shape); ``slots`` ``[B]`` in ``[0, slots)`` (padding
    clamped there), ``live`` ``[B]`` bool.  Returns ``o``, ``B x Hv x V`` elements in row order (the op's
    ``[B, 1, Hv, V]``; padded requests' rows undefined).

    A contiguous pool is handed to the op in place: request b reads row ``slots[b]`` and, with
    ``actual_seq_lengths[b] = live[b]``, writes it back only when live (the op stores the state of
    token t only for ``t < actual_seq_lengths[b]``; a padded request's row is read and never written;
    the op's host checks run before any write).  A pool the op cannot address in place (not
    contiguous) goes through a gathered copy of the rows, written back for the live requests.
    ``lengths`` / ``slot_rows``: ``live`` as int32 ``[B]`` / ``slots`` as int32 ``[B, 1]`` (the decode
    step's, made once per step)."""
    B, Hv, V = v.shape[-3:]
    Hk = q.shape[-2]
    if q.shape[-1] == v.shape[-1] and q.dim() == v.dim():   # K == V: one cat over the heads, one view
        mix = torch.cat([q, k, v], -2).reshape(B, 1, -1)
    else:
        mix = torch.cat([q.reshape(B, 1, -1), k.reshape(B, 1, -1), v.reshape(B, 1, -1)], -1)
    beta = beta_logits.reshape(B, 1, Hv).contiguous()
    gates = as_dtype(g.reshape(B, 1, Hv), torch.float32).contiguous()
    if pool.is_contiguous():
        return seam.call(OP_NPU_RECURRENT, mix, pool, beta, scale, lengths, slot_rows, Hk, Hv, g=gates)
    slots = slots.long()
    states = pool.index_select(0, slots)   # the kernel updates in place: a gathered copy
    idx = torch.arange(B, dtype=torch.int32, device=q.device)
    ones = torch.ones(B, dtype=torch.int32, device=q.device)
    o = seam.call(OP_NPU_RECURRENT, mix, states, beta, scale, ones, idx.view(B, 1), Hk, Hv, g=gates)
    scatter_live_rows(pool, slots, live, states)
    return o
