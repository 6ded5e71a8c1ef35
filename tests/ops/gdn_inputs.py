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
