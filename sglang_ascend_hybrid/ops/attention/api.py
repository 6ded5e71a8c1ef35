"""Packed (varlen) attention that accepts sequences empty on one side.

Drop-in replacement for SGLang's
``sglang.multimodal_gen.runtime.layers.attention.backends.ascend_fa.fused_infer_attention_varlen``,
which raises ``NotImplementedError`` when a sequence has queries but no keys or
keys but no queries (ring-attention KV-only chunks, empty query segments).

Semantics: a KV-only sequence produces no output rows; a query row with no keys
gets output 0 and LSE ``-inf`` (ring merges then ignore it).  Every output row
and LSE entry is defined, also for batches with no work at all.

Dispatch: the ladder in :mod:`.dispatch`.  The patch that puts it in SGLang's place, and
the startup checks of that patch: :mod:`sglang_ascend_hybrid.integration.packed_attention`.

Input checks (every path, before any work; ``ops.errors.bad_input``'s ``ValueError``
``"fused_infer_attention_varlen: <argument>=<value>: expected <what>"``):
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
(one ``.tolist()`` per side) and a disagreement raises ``ValueError`` naming both values.
Without a host copy each ``cu_seqlens_*`` is read with one ``.tolist()``, as
upstream does.  No other device-to-host transfer happens.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from sglang_ascend_hybrid.ops.attention.contract import OP_NAME  # noqa: F401  (the seam name callers use)
from sglang_ascend_hybrid.ops.attention.dispatch import AttentionCall, attend
from sglang_ascend_hybrid.ops.attention.inputs import OP, check_tensors, packed_boundaries
from sglang_ascend_hybrid.ops.errors import bad_input


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
        raise bad_input("cu_seqlens_k", list(k_bounds), f"{len(q_bounds) - 1} sequences, the batch cu_seqlens_q "
                        "describes", op=OP)
    if softmax_scale is not None and (isinstance(softmax_scale, bool)
                                      or not isinstance(softmax_scale, (int, float))
                                      or not math.isfinite(softmax_scale)):
        raise bad_input("softmax_scale", repr(softmax_scale), "a finite number or None", op=OP)
    scale = q.shape[-1] ** -0.5 if softmax_scale is None else float(softmax_scale)

    out, lse = attend(AttentionCall(q, k, v, scale, bool(return_softmax_lse), q_bounds, k_bounds))
    return (out, lse) if return_softmax_lse else out
