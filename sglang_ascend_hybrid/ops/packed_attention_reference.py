"""Pure-torch reference for packed (varlen, ``TND``) attention.

Semantics, for every sequence ``i`` of a packed batch (boundaries are host
tuples of cumulative token counts, one entry per sequence plus a leading 0):

* query rows ``q[qs:qe]`` attend to keys / values ``k[ks:ke]``, ``v[ks:ke]``
  (no mask; GQA: query head ``h`` uses key head ``h // (Nq // Nkv)``);
* a sequence with keys but no queries produces no output rows;
* a query row whose sequence has no keys gets output 0 and LSE ``-inf``, so an
  online-softmax (ring attention) merge gives it zero weight.

Outputs: ``out`` ``[Tq, Nq, Dv]`` in ``q.dtype`` and ``lse`` ``[Nq, Tq]`` fp32
(natural log).  Math runs in fp32 (fp64 for fp64 inputs).  This module also
builds random packed cases for tests, benchmarks and ``selftest``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from itertools import accumulate, pairwise
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


def packed_attention_reference(
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


# ---------------------------------------------------------------------------
# Random packed cases (tests, benchmarks, selftest)
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class PackedCase:
    """One packed attention problem; ``*_bounds`` are the host boundaries."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    cu_seqlens_q: torch.Tensor
    cu_seqlens_k: torch.Tensor
    q_bounds: tuple[int, ...]
    k_bounds: tuple[int, ...]
    scale: float

    def kwargs(self, *, host: bool = True, return_softmax_lse: bool = True) -> dict:
        """Keyword arguments for ``fused_infer_attention_varlen(q, k, v, cu_q, cu_k, **kw)``."""
        kw: dict = {"softmax_scale": self.scale, "return_softmax_lse": return_softmax_lse}
        if host:
            kw["cu_seqlens_q_host"] = self.q_bounds
            kw["cu_seqlens_k_host"] = self.k_bounds
        return kw

    def args(self) -> tuple:
        return self.q, self.k, self.v, self.cu_seqlens_q, self.cu_seqlens_k


def packed_case(
    q_lens: Sequence[int],
    k_lens: Sequence[int],
    *,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    head_dim: int = 16,
    v_head_dim: int | None = None,
    dtype: torch.dtype = torch.float32,
    scale: float | None = None,
    seed: int = 0,
    index_dtype: torch.dtype = torch.int32,
    device: str | torch.device = "cpu",
) -> PackedCase:
    """A packed case with the given per-sequence query / key lengths."""
    if len(q_lens) != len(k_lens):
        raise ValueError(f"q_lens has {len(q_lens)} sequences but k_lens has {len(k_lens)}; "
                         "expected the same batch size")
    if any(n < 0 for n in (*q_lens, *k_lens)):
        raise ValueError(f"sequence lengths must be >= 0, got q_lens={list(q_lens)}, "
                         f"k_lens={list(k_lens)}")
    gen = torch.Generator().manual_seed(seed)
    q_bounds = (0, *accumulate(q_lens))
    k_bounds = (0, *accumulate(k_lens))
    dv = head_dim if v_head_dim is None else v_head_dim

    def rand(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float32).to(dtype).to(device)

    return PackedCase(
        q=rand(q_bounds[-1], num_heads, head_dim),
        k=rand(k_bounds[-1], num_kv_heads, head_dim),
        v=rand(k_bounds[-1], num_kv_heads, dv),
        cu_seqlens_q=torch.tensor(q_bounds, dtype=index_dtype, device=device),
        cu_seqlens_k=torch.tensor(k_bounds, dtype=index_dtype, device=device),
        q_bounds=q_bounds,
        k_bounds=k_bounds,
        scale=head_dim ** -0.5 if scale is None else scale,
    )


def random_lengths(
    num_seqs: int,
    *,
    max_len: int = 16,
    one_sided_fraction: float = 0.0,
    both_empty_fraction: float = 0.0,
    seed: int = 0,
) -> tuple[list[int], list[int]]:
    """Per-sequence (q_lens, k_lens): a ``one_sided_fraction`` of sequences is
    empty on exactly one side (half KV-only, half query-only), a
    ``both_empty_fraction`` empty on both, the rest non-empty on both sides."""
    if max_len < 1:
        raise ValueError(f"max_len must be >= 1, got {max_len}")
    rng = random.Random(seed)
    q_lens, k_lens = [], []
    for _ in range(num_seqs):
        u = rng.random()
        lq, lk = rng.randint(1, max_len), rng.randint(1, max_len)
        if u < one_sided_fraction:
            if rng.random() < 0.5:
                lq = 0
            else:
                lk = 0
        elif u < one_sided_fraction + both_empty_fraction:
            lq = lk = 0
        q_lens.append(lq)
        k_lens.append(lk)
    return q_lens, k_lens


def random_packed_case(
    seed: int = 0,
    *,
    num_seqs: int = 8,
    max_len: int = 16,
    one_sided_fraction: float = 0.25,
    both_empty_fraction: float = 0.1,
    **case_kwargs,
) -> PackedCase:
    """A random packed case mixing every kind of sequence (for ``selftest``)."""
    q_lens, k_lens = random_lengths(
        num_seqs, max_len=max_len, one_sided_fraction=one_sided_fraction,
        both_empty_fraction=both_empty_fraction, seed=seed,
    )
    return packed_case(q_lens, k_lens, seed=seed, **case_kwargs)
