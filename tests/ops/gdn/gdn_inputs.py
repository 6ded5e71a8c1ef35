"""Random packed GDN inputs shared by the chunked-path tests (l2-normalised q / k, gates
``logsigmoid(randn + 2)``, ``beta ~ U(0, 1)``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def random_case(lens, seed, *, hv, hk, d, with_state=True):
    """``((q, k, v, g, beta), {"cu_seqlens", "initial_state"})`` for sequences of ``lens`` tokens."""
    gen = torch.Generator().manual_seed(seed)
    T = sum(lens)
    q = F.normalize(torch.randn(1, T, hk, d, generator=gen), dim=-1)
    k = F.normalize(torch.randn(1, T, hk, d, generator=gen), dim=-1)
    v = torch.randn(1, T, hv, d, generator=gen)
    g = F.logsigmoid(torch.randn(1, T, hv, generator=gen) + 2.0)
    beta = torch.rand(1, T, hv, generator=gen)
    h0 = torch.randn(len(lens), hv, d, d, generator=gen) if with_state else None
    return (q, k, v, g, beta), dict(cu_seqlens=torch.tensor([0] + list(lens)).cumsum(0), initial_state=h0)


def bf16_packed(lens, seed, *, hv, hk, d=128, pool_dtype=torch.bfloat16, gate_shift=2.0):
    """``(q, k, v, g, beta, cu_seqlens, h0)`` in the dtypes the NPU prefill kernels take: bf16 q / k / v /
    beta (q, k l2-normalised), fp32 ``g = logsigmoid(randn + gate_shift)``, an initial state ``0.1 randn``
    in ``pool_dtype``."""
    from sglang_ascend_hybrid.ops.gdn.torch_impl import l2norm

    gen = torch.Generator().manual_seed(seed)
    T = sum(lens)
    q = l2norm(torch.randn(1, T, hk, d, generator=gen)).bfloat16()
    k = l2norm(torch.randn(1, T, hk, d, generator=gen)).bfloat16()
    v = torch.randn(1, T, hv, d, generator=gen).bfloat16()
    g = F.logsigmoid(torch.randn(1, T, hv, generator=gen) + gate_shift)
    beta = torch.rand(1, T, hv, generator=gen).bfloat16()
    cu = torch.tensor([0, *lens]).cumsum(0)
    h0 = (torch.randn(len(lens), hv, d, d, generator=gen) * 0.1).to(pool_dtype)
    return q, k, v, g, beta, cu, h0
