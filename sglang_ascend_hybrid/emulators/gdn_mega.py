"""CPU emulator of sgl-kernel-npu's mega GDN prefill kernel ``run_mega_chunk_gdn``, mirroring
:mod:`sglang_ascend_hybrid.ops.gdn.contract` (abbreviations as there: SKN = sgl-project/sgl-kernel-npu
f425bdf1, SKN-462 = ff984786, SKN-517 = 12f136d3, SKN-533 = 3558cea0).
Memory the real op leaves unwritten is filled with NaN here; calls the real op would take and
compute wrongly without an error (a dtype it reinterprets, an index it reads out of bounds)
raise :class:`~sglang_ascend_hybrid.ops.errors.EmulatorContractViolation`.

``run_mega_chunk_gdn`` (:func:`make_mega_emulator`; SKN ``python/.../fla/mega_chunk_gdn.py`` and
``csrc/mega_chunk_gdn/op_host/mega_chunk_gdn.cpp``)
    Casts q, k, v, beta and the initial state to fp16 (wrapper: ``t.half()``), cu_seqlens to int32,
    then ``check_shape`` with the variant's texts (hint or not) and head-pair set; returns the
    7-tuple ``(g_sum, (out * scale).to(q.dtype), A_inv, final fp32 [N, H, K, V] or None, w, h, v_new)``
    with h per 128-token chunk ``[1, NT, H, K, V]``.  The kernel keeps the state in fp16 (its
    ``final_state`` buffer), so the emulated state is rounded through fp16 after every chunk, and
    writes the output into an fp16 buffer (``out = torch.empty_like(v)`` of the halved v) that the
    wrapper scales in fp16: magnitudes beyond 65504 become inf, in the inputs (the casts) as in
    the state and the output.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import torch

from sglang_ascend_hybrid.emulators.gdn_common import violation as _violation
from sglang_ascend_hybrid.ops.gdn import contract as caps
from sglang_ascend_hybrid.ops.gdn.contract import OP_MEGA
from sglang_ascend_hybrid.ops.gdn.naive import naive_recurrent_gated_delta_rule

MEGA_CHUNK = 128


def make_mega_emulator(predicate: Optional[Callable[[int, int], bool]] = None, *,
                       variant: caps.MegaVariant = caps.MEGA_CURRENT) -> Callable:
    """An emulator of ``run_mega_chunk_gdn`` of ``variant`` (a :data:`caps.MEGA_VARIANTS` entry);
    ``predicate`` replaces the variant's head-pair set (tests of the planner)."""
    pair_ok = predicate or variant.supports

    def check(ok: bool, message: str) -> None:
        if not ok:
            raise RuntimeError(variant.refusal_text(message))

    def run_mega_chunk_gdn(q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens):
        if scale is None:
            scale = k.shape[-1] ** -0.5
        q_dtype, k_dtype, v_dtype = q.dtype, k.dtype, v.dtype
        q, k, v, beta = (t.half() for t in (q, k, v, beta))  # the wrapper's casts
        T = q.shape[1] if q.dim() == 4 else 0
        cu = (torch.tensor([0, T], dtype=torch.int32) if cu_seqlens is None else cu_seqlens.to(torch.int32))
        has_init = initial_state is not None
        if has_init:
            initial_state = initial_state.half()
        D = caps.MEGA_HEAD_DIM
        check(q.dim() == 4, "q must have shape [B, T, Hg, D]")
        check(k.dim() == 4, "k must have shape [B, T, Hg, D]")
        check(v.dim() == 4, "v must have shape [B, T, H, D]")
        check(g.dim() == 3, "g must have shape [B, T, H]")
        check(beta.dim() == 3, "beta must have shape [B, T, H]")
        check(q.shape[0] == 1, "mega_chunk_gdn currently supports packed B=1 input")
        check(q.shape == k.shape, "q and k must have the same shape")
        check(q.shape[1] == v.shape[1], "q/k and v sequence lengths must match")
        check(pair_ok(v.shape[2], q.shape[2]), caps.MEGA_PAIR_TEXT)
        check(q.shape[3] == D and v.shape[3] == D, "mega_chunk_gdn supports head dimension 128")
        check(g.shape[0] == 1 and beta.shape[0] == 1, "g and beta must use packed B=1 layout")
        check(g.shape[1] == q.shape[1] and beta.shape[1] == q.shape[1], "g/beta sequence lengths must match q")
        check(g.shape[2] == v.shape[2] and beta.shape[2] == v.shape[2], "g/beta must use the same NumValueHeads as v")
        check(g.dtype == torch.float32, "g must be float32")
        check(q.is_contiguous() and k.is_contiguous() and v.is_contiguous(), "q, k, and v must be contiguous")
        check(g.is_contiguous() and beta.is_contiguous() and cu.is_contiguous(),
              "g, beta, and cu_seqlens must be contiguous")
        n = cu.numel() - 1
        if has_init:
            check(initial_state.dim() == 4, "initial_state must have shape [N, H, D, D]")
            check(initial_state.shape[0] == n, "initial_state.size(0) must match cu_seqlens sequences")
            check(initial_state.shape[1] == v.shape[2], "initial_state.size(1) must match NumValueHeads")
            check(initial_state.shape[2] == D and initial_state.shape[3] == D,
                  "initial_state must use head dimensions 128 x 128")
        H = v.shape[2]
        bounds = cu.tolist()
        empty = [s for s in range(n) if bounds[s + 1] == bounds[s]]
        if empty:  # SKN csrc/mega_chunk_gdn/op_kernel/chunk_h.cpp ~505-560 (f425bdf1): a sequence with no chunk
            # still stores its entering state at h row ``chunk_offset`` (the next sequence's first chunk, or past
            # the end of h) and raises a cross-core flag no consumer waits for
            _violation(OP_MEGA, f"sequence(s) {empty} of cu_seqlens {bounds} are empty: the kernel writes their "
                                f"state into another sequence's (or past the last) chunk row of h")
        out = torch.empty(1, T, H, D, dtype=torch.float16)  # SKN fla/mega_chunk_gdn.py ~153: empty_like(v.half())
        final = torch.zeros(n, H, D, D, dtype=torch.float32)  # key first
        num_chunks = sum(math.ceil((b - a) / MEGA_CHUNK) for a, b in zip(bounds, bounds[1:]))
        h = torch.full((1, num_chunks, H, D, D), float("nan"))
        row = 0
        for s in range(n):
            state_vf = (initial_state[s].float().transpose(-1, -2) if has_init
                        else torch.zeros(H, D, D))  # value first for the reference
            for c0 in range(bounds[s], bounds[s + 1], MEGA_CHUNK):
                c1 = min(c0 + MEGA_CHUNK, bounds[s + 1])
                h[0, row] = state_vf.transpose(-1, -2)
                o, state_vf = naive_recurrent_gated_delta_rule(q[:, c0:c1], k[:, c0:c1], v[:, c0:c1], g[:, c0:c1],
                                                  beta[:, c0:c1], cu_seqlens=torch.tensor([0, c1 - c0]),
                                                  initial_state=state_vf[None], scale=1.0)
                state_vf = state_vf[0].half().float()  # the kernel's fp16 state buffer
                out[0, c0:c1] = o[0].half()
                row += 1
            final[s] = state_vf.transpose(-1, -2)
        return (torch.zeros_like(g), (out * scale).to(q_dtype),  # fp16 product, as the wrapper's
                torch.zeros(1, T, H, MEGA_CHUNK, dtype=k_dtype),
                final if output_final_state else None, torch.zeros_like(v, dtype=k_dtype), h.to(k_dtype),
                torch.zeros_like(v, dtype=v_dtype))

    return run_mega_chunk_gdn
