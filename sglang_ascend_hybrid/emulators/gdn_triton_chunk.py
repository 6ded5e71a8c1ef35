"""CPU emulator of sgl-kernel-npu's Triton prefill entry
``sgl_kernel_npu.fla.chunk:chunk_gated_delta_rule_npu`` (SKN = sgl-project/sgl-kernel-npu f425bdf1,
``python/sgl_kernel_npu/sgl_kernel_npu/fla/chunk.py``); see :func:`make_triton_chunk_emulator`.  The
Triton entry runs the mega kernel instead when its release and the environment say so
(``GDN_USE_MEGA_GDN=1`` from ac3a564f, by default before it), with the mega kernel's contract."""

from __future__ import annotations

from typing import Callable, Optional

import torch

from sglang_ascend_hybrid.emulators.gdn_common import violation as _violation
from sglang_ascend_hybrid.ops.gdn import contract as caps
from sglang_ascend_hybrid.ops.gdn.naive import naive_recurrent_gated_delta_rule
from sglang_ascend_hybrid.ops.gdn.torch_impl import l2norm


def empty_sequence_before_tokens(bounds) -> Optional[tuple[int, int]]:
    """``(i, j)``, an empty sequence ``i`` and a later non-empty sequence ``j``, or None: the
    cu_seqlens the Triton path attributes chunks wrongly for.

    SKN f425bdf1 ``python/sgl_kernel_npu/sgl_kernel_npu/fla/utils.py`` ~155-164
    ``prepare_chunk_indices``: ``indices = cat([arange(cdiv(len_n, chunk)) for n])`` has no entry for
    an empty sequence, and ``indices.eq(0).cumsum(0) - 1`` then numbers every chunk by how many
    non-empty sequences start up to it, not by its sequence.  The chunk-indexed stages read
    ``bos, eos = cu_seqlens[i_n], cu_seqlens[i_n + 1]`` of that wrong number: ``chunk_local_cumsum``
    (``fla/cumsum.py`` ~114), ``chunk_scaled_dot_kkt_fwd`` (``chunk_scaled_dot_kkt.py`` ~140),
    ``solve_tril`` (``solve_tril.py`` ~647, ~675), ``recompute_w_u_fwd`` (``wy_fast.py`` ~117); so the
    cumulative gates, A, w and u of the sequences after the empty one stay ``torch.empty``, and
    ``chunk_gated_delta_rule_fwd_h`` / ``chunk_fwd_o`` (per sequence through ``prepare_chunk_offsets``,
    ``chunk_delta_h.py`` ~238, ``chunk_o.py`` ~154) compute their h, final state and o from those
    unwritten buffers.  Empty sequences only at the end leave every number right."""
    lengths = [b - a for a, b in zip(bounds, bounds[1:])]
    first_empty = next((i for i, n in enumerate(lengths) if n == 0), None)
    if first_empty is None:
        return None
    later = next((j for j in range(first_empty + 1, len(lengths)) if lengths[j] > 0), None)
    return None if later is None else (first_empty, later)


def make_triton_chunk_emulator(*, mega: Optional[Callable] = None, version: Optional[str] = None,
                               environ=None) -> Callable:
    """An emulator of sgl-kernel-npu's Triton prefill entry ``fla.chunk.chunk_gated_delta_rule_npu``,
    written from SKN f425bdf1 ``python/sgl_kernel_npu/sgl_kernel_npu/fla/chunk.py`` (lines 205-388).

    ``mega``: what its ``run_mega_chunk_gdn`` does (a :func:`~.gdn_mega.make_mega_emulator`, or
    :func:`~.gdn_sets.missing_torch_op` for an Ascend 950 build, where the wrapper imports but
    ``torch.ops.npu.mega_chunk_gdn`` is not registered); None: a release without the mega wrapper.
    ``version``: the sgl-kernel-npu release, which decides when the entry runs the mega kernel
    (:func:`caps.triton_mega_mode`; default: the current one, ``GDN_USE_MEGA_GDN=1`` only);
    ``environ``: where the environment is read, at every call as the entry's ``os.getenv``
    (default ``os.environ``).

    Checks (the entry's own, in its order): ``assert q.dtype == k.dtype == v.dtype``; q not fp32; beta
    3-D; ``head_first`` raises DeprecationWarning; with cu_seqlens B must be 1 and the initial states
    one per sequence (ValueErrors).  ``input_guard`` makes every tensor contiguous.
    Mega mode: the result of ``run_mega_chunk_gdn(q, k, v, g, beta, scale, initial_state,
    output_final_state, cu_seqlens)``: o, the fp32 final state kept in fp16, ``h`` per 128 tokens.
    Triton mode (``chunk_gated_delta_rule_fwd_h`` in ``fla/chunk_delta_h.py``): 64-token chunks; the
    running state of a head is fp32 (``b_h1_bv*``), stored to ``h`` in k's dtype at every chunk start
    and used in k's dtype by that chunk's matmuls (``b_h1_bv1.to(b_w.dtype)``, ``chunk_fwd_o``), so a
    chunk's outputs and update see the rounded entering state while the carried decay is fp32.
    Final state fp32 ``[N, H, K, V]`` (None unless ``output_final_state``); o in q's dtype.  Head
    dims above 128 are silently cut off by the fixed ``[128, 64]`` tiles: contract violation.
    An initial state that is not ``[N, H, K, V]`` would be read out of bounds: contract violation.
    An empty sequence followed by a non-empty one (Triton mode, cu_seqlens given): contract violation
    (:func:`empty_sequence_before_tokens`).
    """
    import os

    env = os.environ if environ is None else environ
    mode = caps.triton_mega_mode(version or "2026.6.1", mega_present=mega is not None)
    name = "chunk_gated_delta_rule_npu"

    def chunk_gated_delta_rule_npu(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=True,
                                   cu_seqlens=None, head_first=False, use_qk_l2norm_in_kernel=False):
        q, k, v, g, beta = (x.contiguous() for x in (q, k, v, g, beta))  # input_guard
        if initial_state is not None:
            initial_state = initial_state.contiguous()
        assert q.dtype == k.dtype == v.dtype
        assert q.dtype != torch.float32, \
            "ChunkGatedDeltaRuleFunction does not support float32. Please use bfloat16."
        assert len(beta.shape) == 3, \
            "beta must be of shape [B, T, H] if head_first=False, or [B, H, T] otherwise."
        if head_first:
            raise DeprecationWarning("head_first is deprecated and will be removed in a future version. "
                                     "Please use head_first=False for now instead.")
        if cu_seqlens is not None:
            if q.shape[0] != 1:
                raise ValueError(f"The batch size is expected to be 1 rather than {q.shape[0]} when using "
                                 f"`cu_seqlens`.Please flatten variable-length inputs before processing.")
            if initial_state is not None and initial_state.shape[0] != len(cu_seqlens) - 1:
                raise ValueError(f"The number of initial states is expected to be equal to the number of input "
                                 f"sequences, i.e., {len(cu_seqlens) - 1} rather than {initial_state.shape[0]}.")
        if scale is None:
            scale = k.shape[-1] ** -0.5
        if use_qk_l2norm_in_kernel:
            q, k = l2norm(q), l2norm(k)  # l2norm_fwd: x * rsqrt(sum x^2 + 1e-6)
        Hk, K = q.shape[2], q.shape[3]
        Hv, V = v.shape[2], v.shape[3]
        if caps.triton_runs_mega(mode, env, Hv, Hk, K, V):
            _, o, _, final, _, h, _ = mega(q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens)
            return o.to(q.dtype), final, h
        if K > caps.TRITON_MAX_HEAD_DIM or V > caps.TRITON_MAX_HEAD_DIM:
            _violation(name, f"K={K}, V={V} > {caps.TRITON_MAX_HEAD_DIM}: chunk_delta_h's [128, 64] tiles cut "
                             "the state off")
        B, T = q.shape[0], q.shape[1]
        if cu_seqlens is None:
            cu = torch.arange(0, (B + 1) * T, T)
            q, k, v, g, beta = (x.reshape(1, B * T, *x.shape[2:]) for x in (q, k, v, g, beta))
        else:
            cu = cu_seqlens
        bounds = [int(x) for x in cu.tolist()]
        n = len(bounds) - 1
        late = empty_sequence_before_tokens(bounds) if cu_seqlens is not None else None
        if late is not None:
            _violation(name, f"cu_seqlens {bounds if n <= 16 else '...'}: sequence {late[0]} is empty and sequence "
                             f"{late[1]} after it is not; prepare_chunk_indices numbers chunks by the non-empty "
                             "sequences before them, so the chunk-indexed stages never compute the later "
                             "sequences and their o / final state / h come from unwritten buffers")
        if initial_state is not None and tuple(initial_state.shape) != (n, Hv, K, V):
            _violation(name, f"initial_state {tuple(initial_state.shape)} is not [N, H, K, V] = {(n, Hv, K, V)}")
        rnd = k.dtype  # h and the chunk matmuls' operands
        gf = g[0].float()
        o = torch.empty(1, bounds[-1], Hv, V)
        final = torch.empty(n, Hv, K, V)
        hs = []
        for s in range(n):
            S = torch.zeros(Hv, K, V) if initial_state is None else initial_state[s].float()  # key first
            for c0 in range(bounds[s], bounds[s + 1], caps.TRITON_CHUNK):
                c1 = min(c0 + caps.TRITON_CHUNK, bounds[s + 1])
                hs.append(S.to(rnd))
                entering = S.to(rnd).float()
                oc, end = naive_recurrent_gated_delta_rule(
                        q[:, c0:c1], k[:, c0:c1], v[:, c0:c1], g[:, c0:c1], beta[:, c0:c1],
                                              cu_seqlens=torch.tensor([0, c1 - c0]),
                                              initial_state=entering.transpose(-1, -2)[None], scale=scale)
                o[0, c0:c1] = oc[0].float()
                decay = gf[c0:c1].sum(0).exp()[:, None, None]
                S = end[0].transpose(-1, -2) + decay * (S - entering)  # the fp32 part the rounding dropped
            final[s] = S
        h = torch.stack(hs).unsqueeze(0) if hs else k.new_zeros(1, 0, Hv, K, V)
        # without cu_seqlens each batch row is one sequence, and the outputs keep the batch: SKN
        # ``fla/chunk_o.py`` chunk_fwd_o ``o = torch.empty_like(v)`` ([B, T, H, V]) and ``fla/chunk_delta_h.py``
        # chunk_gated_delta_rule_fwd_h ``h = k.new_empty(B, NT, H, K, V)`` (read at sgl-kernel-npu 268a1f55 and
        # 9a873e53, the versions at hand here; not read at f425bdf1, the commit the rest of this module cites)
        if cu_seqlens is None:
            o, h = o.reshape(B, T, Hv, V), h.reshape(B, h.shape[1] // B, *h.shape[2:])
        return o.to(q.dtype), (final if output_final_state else None), h

    return chunk_gated_delta_rule_npu
