"""Packed attention problems (fixed and random) for the startup probe, ``selftest``, tests and
benchmarks."""

from __future__ import annotations

import random
from dataclasses import dataclass
from itertools import accumulate
from typing import Sequence

import torch

from sglang_ascend_hybrid.ops.errors import bad_input


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
        raise bad_input("k_lens", list(k_lens), f"{len(q_lens)} lengths, one per sequence of q_lens (the same "
                        "batch size)", op="packed_case")
    for name, lens in (("q_lens", q_lens), ("k_lens", k_lens)):
        if any(n < 0 for n in lens):
            raise bad_input(name, list(lens), "sequence lengths >= 0", op="packed_case")
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
        raise bad_input("max_len", max_len, "an integer >= 1", op="random_lengths")
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
