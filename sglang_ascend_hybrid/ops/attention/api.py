"""Packed (varlen) attention that accepts sequences empty on one side.

Drop-in replacement for SGLang's
``sglang.multimodal_gen.runtime.layers.attention.backends.ascend_fa.fused_infer_attention_varlen``,
which raises ``NotImplementedError`` when a sequence has queries but no keys or
keys but no queries (ring-attention KV-only chunks, empty query segments).

Semantics: a KV-only sequence produces no output rows; a query row with no keys
gets output 0 and LSE ``-inf`` (ring merges then ignore it).  Every output row
and LSE entry is defined, also for batches with no work at all.

Dispatch: the ladder in :mod:`.dispatch`.

Input checks (every path, before any work; ``ValueError`` naming the argument,
its value and what was expected; upstream's message first where upstream has one):
q / k / v are ``[T, N, D]`` floating-point tensors of one dtype on one device with
``N, D >= 1``, matching K/V token and head counts, matching Q/K head dims and
query heads a multiple of key/value heads; each ``cu_seqlens_*`` is a 1D int32 /
int64 tensor, its boundaries start at 0, never decrease and end at the side's
token count, and both sides describe the same batch; ``softmax_scale`` is a finite
number.

Host boundary contract.  ``cu_seqlens_*_host`` (a list / tuple of ints or a CPU
tensor, the same length as the device tensor) is *trusted*: when given, the
device tensor's values are never read -- comparing them would be a
device-to-host sync -- and every decision (sequence boundaries, which sequences
are one-sided, the compaction index, the kernel's ``actual_seq_lengths``) is
made from the host copy.  If the two disagree the result is attention over the
boundaries the host copy describes (checked as above), not over the device
tensor's.  With ``SGLANG_ASCEND_HYBRID_DEBUG_CHECKS=1`` the device tensor is read
(one ``.tolist()`` per side) and a disagreement raises ``ValueError`` naming both.
Without a host copy each ``cu_seqlens_*`` is read with one ``.tolist()``, as
upstream does.  No other device-to-host transfer happens.
"""

from __future__ import annotations

import inspect
import math
from typing import Sequence

import torch

from sglang_ascend_hybrid.ops.attention.cases import packed_case
from sglang_ascend_hybrid.ops.attention.contract import OP_NAME  # noqa: F401  (the seam name callers use)
from sglang_ascend_hybrid.ops.attention.dispatch import AttentionCall, attend
from sglang_ascend_hybrid.ops.attention.inputs import check_tensors, packed_boundaries
from sglang_ascend_hybrid.ops.attention.torch_impl import packed_attention_torch

UPSTREAM_MODULE = "sglang.multimodal_gen.runtime.layers.attention.backends.ascend_fa"
UPSTREAM_TARGET = f"{UPSTREAM_MODULE}.fused_infer_attention_varlen"
# Text of the error the replacement removes; its absence from the upstream
# source means upstream handles one-sided sequences itself.
UPSTREAM_REFUSAL = "does not support a sequence that is empty only"



def fused_infer_attention_varlen(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    *,
    cu_seqlens_q_host: Sequence[int] | None = None,
    cu_seqlens_k_host: Sequence[int] | None = None,
    softmax_scale: float | None = None,
    return_softmax_lse: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Packed attention over ``[T, N, D]`` tensors; see the module docstring.

    Returns ``out`` ``[Tq, Nq, Dv]`` (``q.dtype``) and, with
    ``return_softmax_lse``, ``lse`` ``[Nq, Tq]`` fp32 (natural log).
    """
    check_tensors(q, k, v)
    q_bounds = packed_boundaries(cu_seqlens_q, cu_seqlens_q_host, q.shape[0], "cu_seqlens_q")
    k_bounds = packed_boundaries(cu_seqlens_k, cu_seqlens_k_host, k.shape[0], "cu_seqlens_k")
    if len(q_bounds) != len(k_bounds):
        raise ValueError("cu_seqlens_q and cu_seqlens_k must describe the same batch; got "
                         f"{len(q_bounds) - 1} and {len(k_bounds) - 1} sequences")
    if softmax_scale is not None and (isinstance(softmax_scale, bool)
                                      or not isinstance(softmax_scale, (int, float))
                                      or not math.isfinite(softmax_scale)):
        raise ValueError(f"softmax_scale={softmax_scale!r}: expected a finite number or None")
    scale = q.shape[-1] ** -0.5 if softmax_scale is None else float(softmax_scale)

    out, lse = attend(AttentionCall(q, k, v, scale, bool(return_softmax_lse), q_bounds, k_bounds))
    return (out, lse) if return_softmax_lse else out


# ---------------------------------------------------------------------------
# Patch-registry helpers
# ---------------------------------------------------------------------------

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
