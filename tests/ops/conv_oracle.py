"""An independent fp64 oracle of SGLang's short-conv contract, written from the math with plain
loops (no code shared with the plugin), plus the error bound the conv tests compare against.

State view: ``[slots, dim, S]`` (any strides); the state of a slot is its columns ``[0, W-1)``.
"""

from __future__ import annotations

import contextlib
import os

import torch

from sglang_ascend_hybrid.ops import seam


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


def oracle_fn(x, weight, bias, qsl, idx, his, states, silu, pad=-1):
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


def oracle_update(x, states, weight, bias, idx, silu, pad=-1):
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


_EPS = {torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7, torch.float32: 2.0 ** -23}
_TINY = {torch.float16: 2.0 ** -24, torch.bfloat16: 2.0 ** -133, torch.float32: 2.0 ** -149}


def assert_close_to_oracle(out, expect, scale, dtype, what="", global_scale=0.0):
    """Every specified entry within half an ulp of the result dtype (its rounding) plus a small
    multiple of fp32's accumulation error over the summed term magnitudes (``global_scale``:
    the largest ``W * |w| * |x|``, for implementations that add and subtract neighbouring
    tokens' terms, like the vectorised torch prefill)."""
    mask = ~torch.isnan(expect)
    got = out.double()[mask]
    exp = expect[mask]
    tol = (0.5 * _EPS[dtype] * exp.abs() * 1.02 + 2 * _EPS[torch.float32] * (scale[mask] + global_scale)
           + _TINY[dtype])
    err = (got - exp).abs()
    bad = ~(err <= tol)
    assert not bool(bad.any()), (f"{what}: {int(bad.sum())} entries beyond the bound; worst error "
                                 f"{float(err.max()):.3g}, tolerance there {float(tol[err.argmax()]):.3g}")


@contextlib.contextmanager
def forced_backend(name: str):
    key = "SGLANG_ASCEND_HYBRID_CONV_BACKEND"
    saved = os.environ.get(key)
    os.environ[key] = name
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = saved


def opaque(fn):
    """Run an emulator as the device kernel it stands for: one launch, invisible to a
    TorchDispatchMode (a SyncCounter counts the plugin's host syncs, not the emulator's)."""
    from torch.utils._python_dispatch import _disable_current_modes

    def run(*args, **kwargs):
        with _disable_current_modes():
            return fn(*args, **kwargs)

    return run


@contextlib.contextmanager
def variant(table: dict, wrap=None):
    ops_table = {k: (wrap(v) if wrap else v) for k, v in table.items()}
    with seam.install_emulators(ops_table):
        yield ops_table
