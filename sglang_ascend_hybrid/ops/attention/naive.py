"""The obviously-right oracle of packed attention: fp64, one query row and one head at a time,
plain Python softmax (like FLA's ``naive.py``).  Tests compare the torch rung, the emulator and
the device paths with it; nothing in the serving path calls it.

Semantics (those of :mod:`.torch_impl` and of the op SGLang's upstream function wraps, extended
to one-sided sequences): a KV-only sequence owns no output rows; a query row with no keys gets
output 0 and LSE ``-inf``.
"""

from __future__ import annotations

import math
from itertools import pairwise

import torch


def naive_packed_attention(q, k, v, q_bounds, k_bounds, scale):
    """fp64, one query row and one head at a time.  Returns out [Tq, Nq, Dv]
    fp64 and lse [Nq, Tq] fp64; rows without keys are 0 / -inf by definition."""
    tq, nq, _ = q.shape
    nkv = k.shape[1]
    out = torch.zeros(tq, nq, v.shape[-1], dtype=torch.float64)
    lse = torch.full((nq, tq), -math.inf, dtype=torch.float64)
    q64, k64, v64 = q.double(), k.double(), v.double()
    for (qs, qe), (ks, ke) in zip(pairwise(q_bounds), pairwise(k_bounds)):
        if ke == ks:
            continue
        for h in range(nq):
            kh = h // (nq // nkv)
            for row in range(qs, qe):
                logits = [float(q64[row, h] @ k64[j, kh]) * scale for j in range(ks, ke)]
                peak = max(logits)
                weights = [math.exp(x - peak) for x in logits]
                total = sum(weights)
                out[row, h] = sum(w * v64[j, kh] for w, j in zip(weights, range(ks, ke))) / total
                lse[h, row] = peak + math.log(total)
    return out, lse
