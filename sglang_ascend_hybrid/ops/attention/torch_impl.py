"""The pure-torch rung of packed (varlen, ``TND``) attention (the CPU path, and the fallback).

Semantics, for every sequence ``i`` of a packed batch (boundaries are host
tuples of cumulative token counts, one entry per sequence plus a leading 0):

* query rows ``q[qs:qe]`` attend to keys / values ``k[ks:ke]``, ``v[ks:ke]``
  (no mask; GQA: query head ``h`` uses key head ``h // (Nq // Nkv)``);
* a sequence with keys but no queries produces no output rows;
* a query row whose sequence has no keys gets output 0 and LSE ``-inf``, so an
  online-softmax (ring attention) merge gives it zero weight.

Outputs: ``out`` ``[Tq, Nq, Dv]`` in ``q.dtype`` and ``lse`` ``[Nq, Tq]`` fp32
(natural log).  Math runs in fp32 (fp64 for fp64 inputs).  The fp64 oracle the tests compare
it with is :mod:`~sglang_ascend_hybrid.ops.attention.naive`.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Sequence

import torch


def attend_segment(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of one sequence with at least one query and one key.

    ``q`` ``[Lq, Nq, D]``, ``k`` ``[Lk, Nkv, D]``, ``v`` ``[Lk, Nkv, Dv]``.
    Returns ``out`` ``[Lq, Nq, Dv]`` and ``lse`` ``[Nq, Lq]``, both in the
    compute dtype (fp32, or fp64 for fp64 inputs).
    """
    lq, nq, d = q.shape
    nkv = k.shape[1]
    group = nq // nkv
    compute = torch.promote_types(q.dtype, torch.float32)
    # Query head h = kv_head * group + g, so a [Lq, Nkv, group, D] view pairs
    # every query head with its key head without copying keys.
    qg = q.to(compute).reshape(lq, nkv, group, d)
    scores = torch.einsum("qhgd,khd->hgqk", qg, k.to(compute)) * scale
    lse = torch.logsumexp(scores, dim=-1)  # [Nkv, group, Lq]
    probs = torch.exp(scores - lse.unsqueeze(-1))
    out = torch.einsum("hgqk,khd->qhgd", probs, v.to(compute))
    return out.reshape(lq, nq, v.shape[-1]), lse.reshape(nq, lq)


def packed_attention_torch(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_bounds: Sequence[int],
    k_bounds: Sequence[int],
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Packed attention by a plain per-sequence loop (inputs already validated).

    Sequences empty on either side are skipped: KV-only sequences own no output
    rows and query-only rows keep their initial 0 / ``-inf``.
    """
    tq, nq, _ = q.shape
    out = q.new_zeros((tq, nq, v.shape[-1]))
    lse = torch.full((nq, tq), float("-inf"), dtype=torch.float32, device=q.device)
    for (qs, qe), (ks, ke) in zip(pairwise(q_bounds), pairwise(k_bounds)):
        if qe == qs or ke == ks:
            continue
        seg_out, seg_lse = attend_segment(q[qs:qe], k[ks:ke], v[ks:ke], scale)
        out[qs:qe] = seg_out.to(out.dtype)
        lse[:, qs:qe] = seg_lse.to(torch.float32)
    return out, lse
