"""An independent fp64 oracle of ``torch.ops.npu.recurrent_gated_delta_rule`` (decode and verify),
written token by token from sgl-project/sgl-kernel-npu f425bdf1 ``csrc/recurrent_gated_delta_rule``
(host + kernel), with plain Python loops and no code shared with
the plugin or its emulators."""

from __future__ import annotations

import math

import torch


def _l2(x):
    return x / math.sqrt(float((x * x).sum()) + 1e-6)


def naive_gdn_verify(mix, recurrent, beta, g, scale, lengths, indices, nk, nv, intermediate=None, cache=None,
                  accepted=None):
    """Returns ``(out, recurrent_after, intermediate_after)`` in fp64; output rows past a
    sequence's length are NaN (unwritten); padding rows (index -1) are skipped."""
    mix = mix.double()
    rec = recurrent.double().clone()
    inter = None if intermediate is None else intermediate.double().clone()
    B, S, _ = mix.shape
    dv, dk = recurrent.shape[2], recurrent.shape[3]
    out = torch.full((B, S, nv, dv), float("nan"), dtype=torch.float64)
    ratio = nv // nk
    for b in range(B):
        pos = 0 if accepted is None else int(accepted[b]) - 1
        r0 = int(indices[b][pos])
        if inter is not None and r0 % S == 0:
            src_row = int(cache[b])
            state = rec[src_row].clone() if src_row >= 0 else torch.zeros(nv, dv, dk, dtype=torch.float64)
        elif inter is not None:
            state = inter[r0].clone()
        else:
            state = rec[r0].clone() if r0 >= 0 else torch.zeros(nv, dv, dk, dtype=torch.float64)
        for t in range(int(lengths[b])):
            row = int(indices[b][t])
            tok = mix[b, t]
            for h in range(nv):
                kh = h // ratio
                q = _l2(tok[kh * dk:(kh + 1) * dk]) * scale
                k = _l2(tok[nk * dk + kh * dk: nk * dk + (kh + 1) * dk])
                v = tok[2 * nk * dk + h * dv: 2 * nk * dk + (h + 1) * dv]
                if g is not None:
                    state[h] = state[h] * math.exp(float(g[b, t, h]))
                bt = 1.0 / (1.0 + math.exp(-float(beta[b, t, h])))
                u = bt * (v - state[h] @ k)
                state[h] = state[h] + torch.outer(u, k)
                out[b, t, h] = state[h] @ q
            if row >= 0:
                (inter if inter is not None else rec)[row] = state
    return out, rec, inter
