"""Public GDN ops: chunked prefill and one-token decode on any head layout.

The argument checks of the public ops; each then builds its verb's call and runs that verb's ladder:
prefill a :class:`~sglang_ascend_hybrid.ops.gdn.prefill.ChunkCall` on
:data:`~sglang_ascend_hybrid.ops.gdn.prefill.PREFILL`, decode a
:class:`~sglang_ascend_hybrid.ops.gdn.decode.DecodeCall` of precomputed gates on
:data:`~sglang_ascend_hybrid.ops.gdn.decode.DECODE`, the ladder SGLang's decode hook runs too.
"""

from __future__ import annotations

import logging
from typing import Optional

import torch

from sglang_ascend_hybrid.envs import ENV
from sglang_ascend_hybrid.ops.decisions import Decisions, tensors_key
from sglang_ascend_hybrid.ops.errors import bad_input
from sglang_ascend_hybrid.ops.gdn import decode, prefill
from sglang_ascend_hybrid.ops.gdn.prefill.l2norm import L2NORM, qk_l2norm
from sglang_ascend_hybrid.ops.gdn.signature import GdnSignature
from sglang_ascend_hybrid.ops.host import host_list
from sglang_ascend_hybrid.ops.index_dtype import is_index_dtype
from sglang_ascend_hybrid.ops.ladder import env_forced_rung

logger = logging.getLogger(__name__)


def _fail(name: str, value, expected: str):
    raise bad_input(name, value, expected)


def _shape(t) -> str:
    return f"shape {tuple(t.shape)}" if isinstance(t, torch.Tensor) else repr(t)


def resolve_backend(requested: str, ladder_names: tuple, op: str) -> str:
    """The rung a call asks for: ``requested``, else (``"auto"``) the one ``SGLANG_ASCEND_HYBRID_GDN_BACKEND``
    names when it is one of ``ladder_names``, else ``"auto"``.  A requested name outside ``ladder_names``
    raises; the environment's is said once and ignored (it may name another verb's rung)."""
    if not isinstance(requested, str):
        _fail("backend", repr(requested), f"'auto' or one of {ladder_names}")
    if requested != "auto":
        if requested not in ladder_names:
            _fail("backend", repr(requested), f"'auto' or one of {ladder_names}")
        return requested
    return env_forced_rung(ENV.GDN_BACKEND, ladder_names, "GDN", op)


def _check_heads(q, k, v, g, beta, q_layout: str, **others):
    """Checks shared by prefill and decode; returns (T, Hk, K, Hv, V)."""
    for name, t in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta), *others.items()):
        if not isinstance(t, torch.Tensor):
            _fail(name, repr(t), "a torch.Tensor")
    for name, t in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta)):
        if not t.dtype.is_floating_point:
            _fail(f"{name}.dtype", t.dtype, "a floating-point dtype")
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            _fail(f"{name}.dtype", t.dtype, f"the dtype of q ({q.dtype})")
    if q.dim() != 4 or q.shape[0] != 1:
        _fail("q", _shape(q), q_layout)
    if k.shape != q.shape:
        _fail("k", _shape(k), f"the shape of q {tuple(q.shape)}")
    T, Hk, K = q.shape[1], q.shape[2], q.shape[3]
    if v.dim() != 4 or v.shape[0] != 1 or v.shape[1] != T:
        _fail("v", _shape(v), f"[1, {T}, Hv, V]")
    Hv, V = v.shape[2], v.shape[3]
    if Hk == 0 or Hv % Hk:
        _fail("v", _shape(v), f"a value-head count that is a multiple of the {Hk} key heads")
    for name, t in (("g", g), ("beta", beta)):
        if tuple(t.shape) != (1, T, Hv):
            _fail(name, _shape(t), f"[1, {T}, {Hv}]")
    return T, Hk, K, Hv, V


def _check_prefill(q, k, v, g, beta, cu_seqlens, initial_state, host_offsets=None) -> list:
    """The prefill checks; returns the per-sequence lengths (``host_offsets``: cu_seqlens as the caller
    already read it on the host, instead of reading it again)."""
    T, Hk, K, Hv, V = _check_heads(q, k, v, g, beta, "[1, T, Hk, K] (packed, batch 1)",
                                   cu_seqlens=cu_seqlens)
    if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2 or not is_index_dtype(cu_seqlens.dtype):
        _fail("cu_seqlens", f"{_shape(cu_seqlens)} {cu_seqlens.dtype}", "an integer tensor [N + 1], N >= 1")
    bounds = host_list(cu_seqlens) if host_offsets is None else [int(b) for b in host_offsets]
    if len(bounds) != cu_seqlens.numel():
        _fail("host_offsets", bounds, f"cu_seqlens read on the host: {cu_seqlens.numel()} offsets")
    if bounds[0] != 0 or bounds[-1] != T or any(b < a for a, b in zip(bounds, bounds[1:])):
        _fail("cu_seqlens", bounds if len(bounds) <= 16 else f"{bounds[:8]}...",
              f"non-decreasing offsets from 0 to T={T}")
    n = len(bounds) - 1
    if initial_state is not None and tuple(initial_state.shape) != (n, Hv, V, K):
        _fail("initial_state", _shape(initial_state), f"[N, Hv, V, K] = [{n}, {Hv}, {V}, {K}] (value-first)")
    return [b - a for a, b in zip(bounds, bounds[1:])]


def chunk_gated_delta_rule(q, k, v, g, beta, *, cu_seqlens, initial_state=None, scale: Optional[float] = None,
                           use_qk_l2norm: bool = False, output_final_state: bool = True,
                           backend: str = "auto"):
    """Gated DeltaNet over a packed varlen batch, through the kernel ladder.

    q, k ``[1, T, Hk, K]``; v ``[1, T, Hv, V]`` (``Hv % Hk == 0``); g (log-space decay)
    and beta ``[1, T, Hv]``; ``cu_seqlens [N + 1]``; ``initial_state`` value-first
    ``[N, Hv, V, K]`` (zeros when None).  ``backend``: ``"auto"`` (the ladder; on CPU
    tensors that is the torch path; ``SGLANG_ASCEND_HYBRID_GDN_BACKEND`` may force a
    rung) or one of ``npu_chunk``, ``mega``, ``triton``, ``torch``.

    Returns ``(o [1, T, Hv, V] in q.dtype, final_state [N, Hv, V, K] fp32 or None)``.
    ``initial_state`` is never written.
    """
    lengths = _check_prefill(q, k, v, g, beta, cu_seqlens, initial_state)
    backend = resolve_backend(backend, prefill.prefill_rungs(), "prefill")
    o, final, _ = chunk_with_states(q, k, v, g, beta, cu_seqlens=cu_seqlens, initial_state=initial_state,
                                    scale=scale, use_qk_l2norm=use_qk_l2norm, backend=backend,
                                    _checked_lengths=lengths)
    return o, (final.float() if output_final_state else None)


def chunk_with_states(q, k, v, g, beta, *, cu_seqlens, initial_state=None, scale=None, use_qk_l2norm=False,
                      chunk_states: bool = False, exact_chunks=None, backend: str = "auto", skip: tuple = (),
                      host_offsets: Optional[list] = None, packed: bool = False,
                      _checked_lengths: Optional[list] = None):
    """Like :func:`chunk_gated_delta_rule`, returning ``(o, final, h)``; ``h`` is the state at
    the start of every 64-token chunk ``[num_chunks, Hv, V, K]`` when ``chunk_states``, each in the
    initial state's precision; ``final`` and ``h`` in fp32 or in a dtype that keeps that precision
    (the state dtype the serving kernel kept).  ``exact_chunks``: the ``(sequence, chunk)`` pairs whose states the
    caller reads (radix-cache tracking); only those are then promised the initial state's precision,
    which lets a kernel that rounds its chunk states serve (it recomputes those few).
    ``skip`` names rungs not to try (used by integration hooks); ``host_offsets``: ``cu_seqlens`` as
    the caller already read it on the host (checked against it, not read again).  ``packed`` (with
    ``host_offsets``: the serving hook): the tensors come without their batch dim, q / k ``[T, Hk, K]``,
    v ``[T, Hv, V]``, g / beta ``[T, Hv]``, and o goes back ``[T, Hv, V]`` (:class:`.prefill.ChunkCall`)."""
    if packed and host_offsets is None:
        _fail("packed", packed, "False unless host_offsets is given (packed tensors are the serving hook's)")
    if exact_chunks is not None and not chunk_states:
        _fail("exact_chunks", exact_chunks, "None unless chunk_states=True (they name chunk states)")
    if scale is None:
        scale = q.shape[-1] ** -0.5
    # given: a caller that ran the checks; the signatures are made here unless a kept decision has them
    lengths, l2_first, first, l2_sig, sig, runner = _checked_lengths, None, None, None, None, None
    if lengths is None:
        backend = resolve_backend(backend, prefill.prefill_rungs(), "prefill")
        if host_offsets is None:
            lengths = _check_prefill(q, k, v, g, beta, cu_seqlens, initial_state)
        else:   # the serving hook: checks and first rungs kept per metadata and offsets (ops/decisions.py)
            key = (backend, skip, use_qk_l2norm, chunk_states, float(scale), packed, tuple(host_offsets),
                   tensors_key(q, k, v, g, beta, cu_seqlens, initial_state))
            lengths, l2_first, first, l2_sig, sig, runner = _SERVED.decide(key, lambda: _served_decision(
                q, k, v, g, beta, cu_seqlens, initial_state, host_offsets, float(scale), chunk_states,
                use_qk_l2norm, backend, skip, packed))
    if use_qk_l2norm:
        q, k = qk_l2norm(l2_sig or _l2norm_signature(q, v), q, k, first=l2_first)
    call = prefill.ChunkCall(q, k, v, g, beta, cu_seqlens, initial_state, float(scale), chunk_states,
                             packed=packed, _lengths=lengths, _signature=sig)
    if exact_chunks is not None:
        call.exact_chunks = _check_exact_chunks(exact_chunks, call.lengths)
    return prefill.run_prefill(call, backend, skip=skip, first=first, runner=runner)


def _l2norm_signature(q, v) -> GdnSignature:
    return GdnSignature(v.shape[-2], q.shape[-2], q.shape[-1], v.shape[-1], q.dtype)


# What a serving prefill call decides from its metadata and host offsets: its checks' lengths, the first
# rung of the q / k l2norm and of the prefill ladder (None: decided per call), the two ladders' signatures
# (metadata only), and the prefill rung's runner (None without a kept rung).
_SERVED = Decisions("gdn extend")


def _served_decision(q, k, v, g, beta, cu_seqlens, initial_state, host_offsets, scale, chunk_states,
                     use_qk_l2norm, backend, skip, packed) -> tuple:
    # a packed call is checked as the batched one it stands for
    lengths = _check_prefill(*((x.unsqueeze(0) for x in (q, k, v, g, beta)) if packed else (q, k, v, g, beta)),
                             cu_seqlens, initial_state, host_offsets)
    l2_sig = _l2norm_signature(q, v)
    l2_first = L2NORM.first(l2_sig, q, k) if use_qk_l2norm else None   # its rungs read q / k metadata only
    # the prefill rungs are asked with q / k before their normalisation: the same metadata
    call = prefill.ChunkCall(q, k, v, g, beta, cu_seqlens, initial_state, scale, chunk_states, packed=packed,
                             _lengths=lengths)
    # a forced rung is checked on every call (its predicate may read values)
    first = prefill.first_without_values(call, skip) if backend == "auto" else None
    return lengths, l2_first, first, l2_sig, call.signature(), prefill.PREFILL.runner(call, first)


def _check_exact_chunks(exact_chunks, lengths: list) -> tuple:
    """``(sequence, chunk)`` int pairs naming chunks that exist (``lengths``: the call's, read on the
    host once for the whole call)."""
    offsets = prefill.chunk_offsets(lengths)
    chunks = [b - a for a, b in zip(offsets, offsets[1:])]
    pairs = []
    for pair in exact_chunks:
        ok = (isinstance(pair, (tuple, list)) and len(pair) == 2
              and all(isinstance(x, int) and not isinstance(x, bool) for x in pair)
              and 0 <= pair[0] < len(chunks) and 0 <= pair[1] < chunks[pair[0]])
        if not ok:
            _fail("exact_chunks", pair, f"(sequence, chunk) int pairs with sequence in [0, {len(chunks)}) and "
                  f"chunk below that sequence's chunk count {chunks}")
        pairs.append((pair[0], pair[1]))
    return tuple(pairs)


def check_state_indices(state_indices: torch.Tensor, num_slots: int, name: str = "state_indices") -> None:
    """Value checks of decode slot indices (reads them on the host: direct calls and debug mode only):
    every entry a slot in ``[0, num_slots)`` or ``-1`` (padding), no slot twice."""
    values = host_list(state_indices)
    bad = [x for x in values if not (x == -1 or 0 <= x < num_slots)]
    if bad:
        shown = values if len(values) <= 16 else f"{values[:8]}... (bad entries {bad[:4]})"
        _fail(name, shown, f"slots in [0, {num_slots}) or -1 (padding)")
    live = [x for x in values if x >= 0]
    if len(set(live)) != len(live):
        dup = sorted({x for x in live if live.count(x) > 1})
        _fail(name, values if len(values) <= 16 else f"repeated slots {dup[:8]}",
              "each slot at most once per batch (repeated slots would race)")


def recurrent_gated_delta_rule(q, k, v, g, beta, *, state_pool, state_indices, scale: Optional[float] = None,
                               use_qk_l2norm: bool = False, backend: str = "auto",
                               check_values: Optional[bool] = None):
    """One decode step (one token per sequence) on an SSM state pool.

    q, k ``[1, B, Hk, K]``; v ``[1, B, Hv, V]``; g (log-space decay), beta (post-sigmoid)
    ``[1, B, Hv]``; ``state_pool`` value-first ``[slots, Hv, V, K]`` of any float dtype (kept:
    the state is computed in fp32 and stored in the pool's dtype); ``state_indices [B]`` (slot per
    sequence; ``-1`` = padding: its output row is 0 and no slot changes).  Updates the pool rows in
    place, after the kernel succeeded.  Returns ``o [1, B, Hv, V]`` in q.dtype.

    ``check_values`` (default True for a direct call): read ``state_indices`` on the host and
    reject out-of-range or repeated slots with a ``ValueError`` before anything is written.  With
    False the op does no device-to-host sync and has only static shapes (graph capture).
    """
    B, Hk, K, Hv, V = _check_heads(q, k, v, g, beta, "[1, B, Hk, K] (one token per sequence)",
                                   state_pool=state_pool, state_indices=state_indices)
    if state_pool.dim() != 4 or tuple(state_pool.shape[1:]) != (Hv, V, K):
        _fail("state_pool", _shape(state_pool), f"[slots, {Hv}, {V}, {K}] (value-first)")
    if not state_pool.dtype.is_floating_point:
        _fail("state_pool.dtype", state_pool.dtype, "a floating-point dtype")
    if state_indices.dim() != 1 or state_indices.numel() != B or not is_index_dtype(state_indices.dtype):
        _fail("state_indices", f"{_shape(state_indices)} {state_indices.dtype}",
              f"an integer tensor [{B}] (a bool mask is not an index)")
    # the Triton decode rung computes SGLang's gates itself: it never serves precomputed ones, so neither
    # backend= nor the environment can ask for it here
    rungs = tuple(name for name in decode.decode_rungs() if name != "triton_decode")
    backend = resolve_backend(backend, rungs, "decode")
    if check_values is None or check_values:
        check_state_indices(state_indices, state_pool.shape[0])
    if scale is None:
        scale = K ** -0.5
    if B == 0 or state_pool.shape[0] == 0:
        return torch.zeros(1, B, Hv, V, dtype=q.dtype, device=q.device)
    call = decode.DecodeCall.with_gates(q, k, v, g[0], beta[0], state_pool, state_indices, scale=float(scale),
                                        qk_l2norm=use_qk_l2norm)
    return decode.run_decode(call, backend, check_values=False)   # the rung advances the pool rows in place
