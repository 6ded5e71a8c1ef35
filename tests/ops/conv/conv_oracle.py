"""Conv test helpers: the error bound against the fp64 oracle
(:mod:`sglang_ascend_hybrid.ops.conv.naive`, re-exported here for the tests), a forced
backend, opaque emulators and emulator variants."""

from __future__ import annotations

import contextlib
import os

import torch

from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.conv.naive import naive_causal_conv1d_fn, naive_causal_conv1d_update  # noqa: F401

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
