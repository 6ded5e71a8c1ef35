"""The obviously-right oracle of SGLang's short-conv contract: fp64, plain loops over sequences,
tokens and taps, no code shared with the rungs (like FLA's ``naive.py``).  Tests compare every
rung and every emulator with it; nothing in the serving path calls it.

State view: ``[slots, dim, S]`` (any strides); the state of a slot is its columns ``[0, W-1)``.
Each function also returns ``scale``, the sum of the absolute terms of every output, from which
the tests derive their error bound.
"""

from __future__ import annotations

import torch


def _conv(hist, seq, weight, bias, silu):
    """hist [dim, W-1], seq [dim, L] -> fp64 [dim, L]."""
    width = weight.shape[1]
    full = torch.cat([hist.double(), seq.double()], dim=1)
    out = torch.zeros(seq.shape[0], seq.shape[1], dtype=torch.float64)
    scale = torch.zeros_like(out)
    for t in range(seq.shape[1]):
        for j in range(width):
            out[:, t] += weight[:, j].double() * full[:, t + j]
            scale[:, t] += (weight[:, j].double() * full[:, t + j]).abs()
        if bias is not None:
            out[:, t] += bias.double()
            scale[:, t] += bias.double().abs()
    if silu:
        out = out * torch.sigmoid(out)
    return out, scale


def naive_causal_conv1d_fn(x, weight, bias, qsl, idx, his, states, silu, pad=-1):
    """-> (out fp64 [dim, T] with NaN where unspecified, scale, expected states)."""
    width = weight.shape[1]
    dim, total = x.shape
    out = torch.full((dim, total), float("nan"), dtype=torch.float64)
    scale = torch.zeros_like(out)
    new = states.clone() if states is not None else None
    q = [int(v) for v in qsl]
    for b in range(len(q) - 1):
        start, end = q[b], q[b + 1]
        slot = int(idx[b]) if idx is not None else b
        if idx is not None and slot == pad:
            continue
        use = states is not None and his is not None and bool(his[b])
        hist = states[slot, :, :width - 1] if use else torch.zeros(dim, width - 1, dtype=x.dtype)
        seq = x[:, start:end]
        o, s = _conv(hist, seq, weight, bias, silu)
        out[:, start:end], scale[:, start:end] = o, s
        if new is not None and end > start:
            new[slot, :, :width - 1] = torch.cat([hist.to(x.dtype), seq], dim=1)[:, -(width - 1):].to(new.dtype)
    return out, scale, new


def naive_causal_conv1d_update(x, states, weight, bias, idx, silu, pad=-1):
    """x [B, dim] or [B, dim, L] -> (out fp64 like x with NaN for pads, scale, expected states)."""
    width = weight.shape[1]
    x3 = x.unsqueeze(-1) if x.dim() == 2 else x
    out = torch.full(x3.shape, float("nan"), dtype=torch.float64)
    scale = torch.zeros_like(out)
    new = states.clone()
    for b in range(x3.shape[0]):
        slot = int(idx[b]) if idx is not None else b
        if idx is not None and slot == pad:
            continue
        hist = states[slot, :, :width - 1]
        out[b], scale[b] = _conv(hist, x3[b], weight, bias, silu)
        if x3.shape[2] > 0:
            new[slot, :, :width - 1] = torch.cat([hist, x3[b].to(states.dtype)], dim=1)[:, -(width - 1):]
    if x.dim() == 2:
        return out[..., 0], scale[..., 0], new
    return out, scale, new


def naive_causal_conv1d_verify(x, window, weight, bias, idx, draft, silu, pad=-1):
    """Speculative verify: x [B * draft, dim] token major, window [slots, R, dim] window major
    (R = (W-1) + (draft-1)) -> (out fp64 [B * draft, dim] with NaN for pads, scale, expected
    window).  Per request: history = the slot's last W-1 rows; the slot afterwards holds the last
    R rows of [history, tokens]."""
    width = weight.shape[1]
    rows = window.shape[1]
    out = torch.full(x.shape, float("nan"), dtype=torch.float64)
    scale = torch.zeros_like(out)
    new = window.clone()
    for b in range(len(idx)):
        slot = int(idx[b])
        if slot == pad:
            continue
        hist = window[slot, rows - (width - 1):].t()                  # [dim, W-1]
        seq = x[b * draft:(b + 1) * draft].t()                         # [dim, draft]
        o, s = _conv(hist, seq, weight, bias, silu)
        out[b * draft:(b + 1) * draft], scale[b * draft:(b + 1) * draft] = o.t(), s.t()
        stream = torch.cat([hist.double(), seq.double()], dim=1)      # [dim, W-1+draft]
        new[slot] = stream[:, -rows:].t().to(window.dtype)
    return out, scale, new
