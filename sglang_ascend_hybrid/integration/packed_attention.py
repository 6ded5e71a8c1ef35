"""The packed-attention patch's side in SGLang: the REPLACE hook for the diffusion runtime's
``ascend_fa.fused_infer_attention_varlen`` (the plugin's op,
:func:`sglang_ascend_hybrid.ops.attention.api.fused_infer_attention_varlen`), the upstream
names it replaces, and the two checks the patch registry runs at startup: whether upstream
still refuses one-sided sequences (:func:`upstream_needs_replacement`) and whether what is
in place serves them (:func:`probe_replacement`)."""

from __future__ import annotations

import inspect

import torch

from sglang_ascend_hybrid.ops.attention.api import fused_infer_attention_varlen
from sglang_ascend_hybrid.ops.attention.cases import packed_case
from sglang_ascend_hybrid.ops.attention.torch_impl import packed_attention_torch

__all__ = ["fused_infer_attention_varlen", "upstream_needs_replacement", "probe_replacement",
           "UPSTREAM_MODULE", "UPSTREAM_TARGET", "UPSTREAM_REFUSAL"]

UPSTREAM_MODULE = "sglang.multimodal_gen.runtime.layers.attention.backends.ascend_fa"
UPSTREAM_TARGET = f"{UPSTREAM_MODULE}.fused_infer_attention_varlen"
# Text of the error the replacement removes; its absence from the upstream
# source means upstream handles one-sided sequences itself.
UPSTREAM_REFUSAL = "does not support a sequence that is empty only"


def upstream_needs_replacement(module) -> bool:
    """Whether the upstream ``ascend_fa`` module still refuses one-sided sequences
    (its source carries the NotImplementedError text)."""
    fn = getattr(module, "fused_infer_attention_varlen", None)
    if fn is None:
        return False
    fn = inspect.unwrap(fn)
    try:
        return UPSTREAM_REFUSAL in inspect.getsource(fn)
    except (OSError, TypeError):
        return True  # no source to read: assume the shipped behaviour


def probe_replacement(fn) -> bool:
    """Startup check that ``fn`` (e.g. the patched upstream attribute) handles
    one-sided sequences: a tiny CPU batch with a KV-only, a query-only and a
    two-sided sequence must give 0 / -inf rows and the reference's two-sided rows."""
    case = packed_case([0, 2, 3], [2, 0, 1], num_heads=2, num_kv_heads=1, head_dim=4,
                       dtype=torch.bfloat16)  # served by the reference and the emulator alike
    try:
        out, lse = fn(*case.args(), **case.kwargs())
    except Exception:  # the original raises (CPU tensors, one-sided sequences)
        return False
    if tuple(out.shape) != (5, 2, 4) or tuple(lse.shape) != (2, 5):
        return False
    ref_out, ref_lse = packed_attention_torch(case.q, case.k, case.v, case.q_bounds,
                                                  case.k_bounds, case.scale)
    q_only, two_sided = slice(0, 2), slice(2, 5)
    return (bool((out[q_only] == 0).all()) and bool(torch.isneginf(lse[:, q_only]).all())
            and torch.allclose(out[two_sided].float(), ref_out[two_sided].float(), atol=2e-2)
            and torch.allclose(lse[:, two_sided], ref_lse[:, two_sided], atol=1e-3))
