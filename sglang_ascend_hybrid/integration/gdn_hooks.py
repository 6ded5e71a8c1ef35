"""Integration hooks: SGLang's Ascend GDN kernels go through the plugin's GDN ladders, one per verb.

Each hook adapts one of SGLang's three linear-attention verbs to the package of the same job in
:mod:`sglang_ascend_hybrid.ops.gdn`: ``extend`` -> :mod:`~sglang_ascend_hybrid.ops.gdn.prefill` (through the
public :func:`~sglang_ascend_hybrid.ops.gdn.api.chunk_with_states`), ``decode`` ->
:mod:`~sglang_ascend_hybrid.ops.gdn.decode`, ``target_verify`` -> :mod:`~sglang_ascend_hybrid.ops.gdn.verify`.

``ascend_chunk_gdn`` (AROUND ``sglang.srt.hardware_backend.npu.attention.
ascend_gdn_backend.AscendGDNAttnBackend.chunk_gdn``, SGLang 0.5.21-0.5.23)
    The narrowest symbol around the prefill kernel call
    (``torch.ops.npu.chunk_gated_delta_rule``): it receives q / k / v / g / beta,
    a gathered copy of the SSM states (in the pool's dtype) and
    ``query_start_loc``, and returns ``(o [T, Hv, V], final [N, Hv, V, K],
    h [NT, Hv, V, K])``; ``forward_extend`` then writes ``final`` into the pool.
    The hook replaces the body with the GDN prefill ladder, whose first rung is
    the same op called as its contract requires (the original passes the pool's
    state dtype, which the op refuses on A2/A3 for the fp32 pools the Qwen3.5 /
    3.6 configs ask for, and 3-D beta / g, which its host check rejects): a
    refusal is predicted from the contract or recognised at call time, and the
    rest of the ladder (mega through a head plan, triton, torch) serves the same
    inputs.  The original is never called.  The per-chunk states ``h`` are
    produced whenever radix-cache tracking may read them
    (``forward_metadata.has_mamba_track_mask``), which rules the mega kernel out
    (its chunks are 128 tokens).  ``GDN_ATTN_BACKEND_TRITON=1`` keeps its
    upstream meaning: prefill goes to the Triton chunk path (then torch).
``ascend_verify_update`` (AROUND ``AscendGDNAttnBackend.fused_recurrent_gated_delta_rule_update``)
    Speculative verify: the same arguments as upstream's call of
    ``torch.ops.npu.recurrent_gated_delta_rule`` (graph-mode or eager index
    tensors) go through the verify ladder of :mod:`sglang_ascend_hybrid.ops.gdn.verify`
    (the op where its bf16 contract holds, else an exact torch path keeping the
    pool's dtype).  Capture-safe; the original is never called.
``ascend_verify_gates`` (AROUND sgl-kernel-npu ``fla.fused_gdn_gating.fused_gdn_gating_kernel_without_sigmoid``)
    The verify step's gates, computed just before that call: the kernel's tiling raises for most token
    counts that are not a power-of-two multiple of its per-program share, so the gates go through the
    verify-gates ladder of :mod:`sglang_ascend_hybrid.ops.gdn.verify_gates` (the original where it tiles
    the call, else ``fused_gdn_gating_npu``, else torch).  Capture-safe.
``ascend_gdn_decode`` (AROUND ``sglang.srt.layers.attention.linear.kernels.gdn_triton.TritonGDNKernel.decode``)
    Plain decode: SGLang's Ascend GDN backend (``forward_decode`` -> ``GDNKernelDispatcher.decode``)
    calls the sgl-kernel-npu Triton decode kernel on the pool, and that kernel's readable source
    addresses the pool key first while the pool is value first.  The hook runs the decode
    ladder of :mod:`sglang_ascend_hybrid.ops.gdn.decode` instead: the installed kernel only where
    the probe found it value-first, then ``torch.ops.npu.recurrent_gated_delta_rule`` (bf16), then
    torch.  Capture-safe; the original is never called.
``ascend_gdn_forward_extend`` / ``triton_gdn_extend`` (AROUND ``AscendGDNAttnBackend.forward_extend`` /
``sglang.srt.layers.attention.linear.kernels.gdn_triton.TritonGDNKernel.extend``, SGLang 0.5.20)
    That release's GDN prefill goes ``forward_extend`` -> ``GDNKernelDispatcher.extend`` ->
    ``TritonGDNKernel.extend``, which hands the value-first pool's rows to sgl-kernel-npu's
    Triton entry (key first) and returns its key-first final state and per-chunk ``h`` (in k's
    dtype) for ``forward_extend`` to write into the pool.  The first hook publishes the step's
    metadata (its radix-cache tracking); the second, inside it, serves the call with the same
    prefill ladder as ``ascend_chunk_gdn`` and returns final and ``h [1, NT, Hv, V, K]`` value
    first in the pool's dtype.  Outside a published step the original runs.
``sgl_chunk_gated_delta_rule_npu`` (AROUND ``sgl_kernel_npu.fla.chunk.
chunk_gated_delta_rule_npu``, older SGLang releases' prefill entry)
    Calls the original; when the mega kernel inside refuses the head pair
    (failure B: ``unsupported mega_chunk_gdn (NumValueHeads, NumKeyHeads) pair``)
    it runs the ladder below that entry with the original inputs, returning the
    entry's own layouts (key-first states, ``h [1, NT, H, K, V]``).  SGLang's own prefill no longer
    reaches it on any supported release (``triton_gdn_extend``); it guards other callers.

No hook writes the caller's state tensors: the ladder returns new ones.

Pool layout: every hook reads and writes the SSM pool through
:func:`sglang_ascend_hybrid.ops.gdn.pool_layout.value_first`, the view whose logical order is the
pool's physical (value-first) order, and returns states SGLang assigns through its own view in that
view's order (:func:`~sglang_ascend_hybrid.ops.gdn.pool_layout.in_view_order`).  SGLang 0.5.20 with
speculative decoding hands the layers a ``transpose(-1, -2)`` view of the pool; the NPU ops and its
commit (``move_intermediate_cache``) address the bytes, so the pool's bytes stay value first whatever
view arrives.  The decision comes from strides, not from the release.
"""

from __future__ import annotations

import bisect
import contextvars
import logging

import torch

from sglang_ascend_hybrid.envs import ENV, read_environ
from sglang_ascend_hybrid.logutil import log_once
from sglang_ascend_hybrid.ops.errors import bad_input
from sglang_ascend_hybrid.ops.gdn import decode, pool_layout, prefill, verify
from sglang_ascend_hybrid.ops.gdn.api import chunk_with_states, resolve_backend
from sglang_ascend_hybrid.ops.gdn.decode import contract as decode_contract
from sglang_ascend_hybrid.ops.gdn.prefill import entries
from sglang_ascend_hybrid.ops.gdn.signature import GdnSignature
from sglang_ascend_hybrid.ops.gdn.verify_gates import verify_gates
from sglang_ascend_hybrid.ops.host import host_list
from sglang_ascend_hybrid.ops.step_cache import StepValue
from sglang_ascend_hybrid.ops.tensors import as_dtype, as_shape

logger = logging.getLogger(__name__)


def _triton_requested() -> bool:
    return (read_environ("GDN_ATTN_BACKEND_TRITON") or "0").strip() == "1"


# The prefill rungs ``GDN_ATTN_BACKEND_TRITON=1`` takes out of ascend_chunk_gdn's ladder (also read by ``plan``).
TRITON_REQUESTED_SKIP = ("npu_chunk", "mega")


def prefill_skip() -> tuple:
    """The prefill rungs ascend_chunk_gdn skips under the current environment."""
    return TRITON_REQUESTED_SKIP if _triton_requested() else ()


def _log_refusal(sig, kernel: str, exc: BaseException, taken: str) -> None:
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    log_once(logger, ("gdn-hook-refusal", kernel, sig),
             "sglang-ascend-hybrid: gdn_prefill kernel %s refused %s (%s); using %s for this shape from now on",
             kernel, sig, first, taken)


_TRACKED_ATTR = "_sglang_ascend_hybrid_tracked_chunks"


_OFFSETS_ATTR = "_sglang_ascend_hybrid_host_offsets"


def step_offsets(metadata, cu_seqlens) -> list:
    """``cu_seqlens`` on the host, read once per step: kept on the step's metadata (SGLang builds one
    per forward step) for as long as the step's offsets are the same tensor at the same version
    (every layer of the step); without metadata that takes attributes, read per call."""
    return _step_read(metadata, cu_seqlens)[0]


def _step_read(metadata, cu_seqlens) -> tuple:
    """(:func:`step_offsets`, :func:`step_chunk_offsets`), kept on the step's metadata."""
    cached = getattr(metadata, _OFFSETS_ATTR, None)
    if cached is not None and cached[0] is cu_seqlens and cached[1] == cu_seqlens._version:
        return cached[2]
    bounds = [int(b) for b in host_list(cu_seqlens)]
    read = (bounds, prefill.chunk_offsets(b - a for a, b in zip(bounds, bounds[1:])))
    try:
        setattr(metadata, _OFFSETS_ATTR, (cu_seqlens, cu_seqlens._version, read))
    except (AttributeError, TypeError):
        pass
    return read


def step_chunk_offsets(metadata, cu_seqlens) -> list:
    """Where each sequence's 64-token chunk states start in ``h``, the total last
    (:func:`prefill.chunk_offsets` of :func:`step_offsets`), kept with them."""
    return _step_read(metadata, cu_seqlens)[1]


def tracked_chunks(metadata, cu_seqlens):
    """The ``(sequence, chunk)`` pairs of ``h`` SGLang's ``_track_mamba_state_extend`` copies into
    track slots this step: ``h[forward_metadata.track_ssm_h_src]``, ``h`` being the per-sequence
    64-token chunk states laid end to end (``_init_track_ssm_indices``: offset of sequence i plus
    its tracked length // chunk).  None when the metadata does not say (every chunk state is then
    kept exact).  Read on the host once per step (cached on the step's metadata): prefill
    already reads the offsets there."""
    src = getattr(metadata, "track_ssm_h_src", None)
    if src is None:
        return None
    cached = getattr(metadata, _TRACKED_ATTR, None)
    if cached is not None and cached[0] is src:
        return cached[1]
    offsets = step_chunk_offsets(metadata, cu_seqlens)
    pairs = []
    for j in src.tolist():
        i = bisect.bisect_right(offsets, int(j)) - 1
        if not 0 <= i < len(offsets) - 1:  # an index outside h: not the layout this reads
            return None
        pairs.append((i, int(j) - offsets[i]))
    pairs = tuple(pairs)
    try:
        setattr(metadata, _TRACKED_ATTR, (src, pairs))
    except (AttributeError, TypeError):  # a metadata class that takes no attributes: computed per layer
        pass
    return pairs


def _serve_extend(metadata, q, k, v, g, beta, initial_state, cu_seqlens, packed: bool = False):
    """One GDN prefill of SGLang's Ascend backend through the ladder: q / k ``[1, T, Hk, K]`` (not
    normalised), v ``[1, T, Hv, V]``, g / beta ``[1, T, Hv]`` (``packed``: without the leading 1, as
    ``chunk_gdn`` hands them), ``initial_state`` the requests' rows of the value-first pool
    ``[N, Hv, V, K]`` in its dtype.  Returns ``(o [1, T, Hv, V] ([T, Hv, V] packed), final
    [N, Hv, V, K], h)``: h the per-chunk states ``[NT, Hv, V, K]`` in the pool's dtype when the step's
    radix-cache tracking may read them (``metadata.has_mamba_track_mask``; exact for the chunks
    ``track_ssm_h_src`` names), else None."""
    need_h = bool(getattr(metadata, "has_mamba_track_mask", True))
    skip = prefill_skip()
    if skip:
        log_once(logger, ("gdn-hook-triton",), "sglang-ascend-hybrid: GDN_ATTN_BACKEND_TRITON=1: GDN prefill "
                 "uses the Triton chunk kernel (torch if it refuses)")
    o, final, h = chunk_with_states(
        q, k, v, as_dtype(g, torch.float32), beta, cu_seqlens=cu_seqlens, initial_state=initial_state,
        use_qk_l2norm=True, chunk_states=need_h,
        exact_chunks=tracked_chunks(metadata, cu_seqlens) if need_h else None, skip=skip,
        host_offsets=step_offsets(metadata, cu_seqlens), packed=packed)
    # the per-chunk states in the pool's dtype: SGLang's _track_mamba_state_extend copies h[...] into
    # track slots, and a radix-cache hit resumes from them; rounding an fp32 pool's snapshot through
    # the activation dtype would make a hit differ from a fresh prefill of the same prefix
    state_dtype = initial_state.dtype if initial_state is not None else k.dtype
    return o, final, None if h is None else as_dtype(h, state_dtype)


def backend_pool_layout(backend) -> str:
    """The layout of the SSM pool a GDN backend serves (``req_to_token_pool.mamba_pool.mamba_cache.
    temporal``), decided from its strides; value first when the backend names no pool."""
    cache = getattr(getattr(getattr(backend, "req_to_token_pool", None), "mamba_pool", None), "mamba_cache", None)
    temporal = getattr(cache, "temporal", None)
    if not isinstance(temporal, torch.Tensor):
        return pool_layout.VALUE_FIRST
    return pool_layout.layout_of(temporal, "mamba pool temporal state")


def ascend_chunk_gdn(original, self, q, k, v, g, beta, initial_state, cu_seqlens):
    """AROUND hook of ``AscendGDNAttnBackend.chunk_gdn`` (see module docstring); ``original``
    is not called.  ``initial_state`` is SGLang's gathered copy ``ssm_states[cache_indices]`` in the
    order of its view of the pool; final and h go back in that order."""
    del original
    T, Hv, V = v.shape[-3], v.shape[-2], v.shape[-1]
    layout = backend_pool_layout(self)
    # packed, as SGLang hands them (q / k [T, Hk, K], v [T, Hv, V]): the npu_chunk op takes them so
    o, final, h = _serve_extend(getattr(self, "forward_metadata", None), q, k, v, as_shape(g, (T, Hv)),
                                as_shape(beta, (T, Hv)), pool_layout.in_view_order(initial_state, layout),
                                cu_seqlens, packed=True)
    if h is None:  # upstream's shape, never read: SGLang's _track_mamba_state_extend reads h only
        # under forward_metadata.has_mamba_track_mask, the flag that asked for no chunk states here
        num_chunks = step_chunk_offsets(getattr(self, "forward_metadata", None), cu_seqlens)[-1]
        state_dtype = initial_state.dtype if initial_state is not None else k.dtype
        h = k.new_empty(num_chunks, Hv, V, k.shape[-1], dtype=state_dtype)
    return o, pool_layout.in_view_order(final, layout), pool_layout.in_view_order(h, layout)


# ------------------------------------------------- SGLang 0.5.20: GDNKernelDispatcher.extend route

_EXTEND_STEP: contextvars.ContextVar = contextvars.ContextVar("gdn_extend_step", default=None)


def ascend_gdn_forward_extend(original, self, *args, **kwargs):
    """AROUND hook of ``AscendGDNAttnBackend.forward_extend`` on releases whose GDN prefill goes
    through ``GDNKernelDispatcher.extend``: the step's metadata (its radix-cache tracking) is
    published to :func:`triton_gdn_extend` for the duration of the original."""
    token = _EXTEND_STEP.set(getattr(self, "forward_metadata", None))
    try:
        return original(self, *args, **kwargs)
    finally:
        _EXTEND_STEP.reset(token)


def triton_gdn_extend(original, self, q, k, v, g, beta, *, ssm_states, cache_indices, query_start_loc,
                      inplace_update: bool = True, **kwargs):
    """AROUND hook of ``TritonGDNKernel.extend`` inside :func:`ascend_gdn_forward_extend` (the Ascend
    GDN prefill of those releases): the GDN prefill ladder on the value-first pool's rows instead of
    sgl-kernel-npu's Triton entry, which reads and writes states key first ``[N, H, K, V]`` while the
    pool, the decode ladder and the verify op are value first.  Returns the entry's tuple ``(o,
    final, h)`` in the pool's layout: final ``[N, Hv, V, K]`` and h ``[1, NT, Hv, V, K]`` in the pool's
    dtype (None when no tracking reads it).  Anywhere else (no published step) the original runs."""
    metadata = _EXTEND_STEP.get()
    if metadata is None or kwargs or not inplace_update:
        return original(self, q, k, v, g, beta, ssm_states=ssm_states, cache_indices=cache_indices,
                        query_start_loc=query_start_loc, inplace_update=inplace_update, **kwargs)
    layout = pool_layout.layout_of(ssm_states)
    o, final, h = _serve_extend(metadata, q, k, v, g, beta, pool_layout.value_first(ssm_states)[cache_indices],
                                query_start_loc)
    # forward_extend assigns both through its own view of the pool: give them in that view's order
    final, h = pool_layout.in_view_order(final, layout), pool_layout.in_view_order(h, layout)
    return o, final, None if h is None else h.unsqueeze(0)


def _graph_mode_counts(cache_indices, batch_size: int, seq_len: int):
    """Upstream's graph-mode ``num_accepted_tokens`` (all 1) and ``actual_seq_lengths`` (all S)."""
    device = cache_indices.device
    return (torch.ones(batch_size, dtype=torch.int32, device=device),
            torch.full((batch_size,), seq_len, dtype=torch.int32, device=device))


# the same two tensors for every layer of a step (the verify rung keeps what it derives from them)
_GRAPH_MODE_COUNTS = StepValue("gdn verify graph-mode counts")


def ascend_verify_update(original, self, mix_qkv, num_heads, num_value_heads, head_k_dim, head_v_dim,
                         recurrent_state, beta, g, cache_indices, intermediate_state=None):
    """AROUND hook of ``AscendGDNAttnBackend.fused_recurrent_gated_delta_rule_update`` (see module
    docstring).  Mirrors upstream's argument preparation, then runs the verify ladder."""
    del original
    batch_size, seq_len = mix_qkv.shape[0], mix_qkv.shape[1]
    recurrent_state = pool_layout.value_first(recurrent_state, "recurrent_state")  # bytes [slots, nv, dv, dk]
    head_v = recurrent_state.shape[2]
    if intermediate_state is not None:
        # the scratch is contiguous (the op writes it and SGLang's commit reads it by raw offsets): its
        # rows are value first whatever shape SGLang gave it
        if not intermediate_state.is_contiguous():
            raise pool_layout.PoolLayoutError(
                f"intermediate_state: shape {tuple(intermediate_state.shape)} strides "
                f"{tuple(intermediate_state.stride())} is not contiguous; SGLang's commit reads it by raw offsets")
        intermediate_state = intermediate_state.view(-1, num_value_heads, head_v, head_k_dim)
    if getattr(self, "graph_mode", False):
        num_accepted, lengths = _GRAPH_MODE_COUNTS.get((cache_indices,), (batch_size, seq_len),
                                                       lambda: _graph_mode_counts(cache_indices, batch_size, seq_len))
        ssm_state_indices = self.forward_metadata.mamba_cache_indices_gdn
    else:
        num_accepted, lengths = self.num_accept_tokens, self.actual_seq_lengths
        ssm_state_indices = self.ssm_state_indices
    per_head = (batch_size, seq_len, num_value_heads)   # as_shape: the tensor itself when it has the shape
    call = verify.VerifyCall(mix_qkv, recurrent_state, as_shape(beta, per_head),
                      None if g is None else as_shape(g, per_head),
                      1.0 / head_k_dim ** 0.5, lengths, as_shape(ssm_state_indices, (batch_size, seq_len)),
                      num_heads, num_value_heads, intermediate_state=intermediate_state,
                      cache_indices=cache_indices, num_accepted_tokens=num_accepted)
    return verify.recurrent_verify(call, check_values=ENV.DEBUG_CHECKS.get())


def ascend_verify_gates(original, A_log, a, b, dt_bias, beta=1.0, threshold=20.0):
    """AROUND hook of sgl-kernel-npu's ``fused_gdn_gating_kernel_without_sigmoid`` (SGLang's target-verify
    gates): ``(g, b)`` through the verify-gates ladder, ``original`` its first rung where its tiling serves
    the call's token count (:mod:`sglang_ascend_hybrid.ops.gdn.verify_gates`)."""
    return verify_gates(A_log, a, b, dt_bias, beta, threshold, kernel=original)


def ascend_gdn_decode(original, self, q, k, v, a, b, *, A_log, dt_bias, ssm_states, cache_indices,
                      query_start_loc=None, **kwargs):
    """AROUND hook of ``TritonGDNKernel.decode`` (see module docstring); ``original`` is not called."""
    del original, self, kwargs
    call = decode.DecodeCall(q, k, v, a, b, A_log, dt_bias, pool_layout.value_first(ssm_states), cache_indices,
                             query_start_loc, entry=decode_contract.installed_decode_entry())
    return decode.run_decode(call, backend=resolve_backend("auto", decode.decode_rungs(), "decode"))


def probe_gdn_backend(runner, backend) -> None:
    """Run the GDN probes for a model at backend construction (on NPU, before any graph capture):
    only when the backend SGLang built serves GDN layers (``AscendGDNAttnBackend``)."""
    linear = getattr(backend, "linear_attn_backend", None)
    if not any(c.__name__ == "AscendGDNAttnBackend" for c in type(linear).__mro__):
        return
    cache = runner.req_to_token_pool.mamba_pool.mamba_cache
    V_cfg, K_cfg = _head_dims(runner)
    layout = pool_layout.check_pool(cache.temporal, value_dim=V_cfg, key_dim=K_cfg,
                                    intermediate=getattr(cache, "intermediate_ssm", None))
    if layout != pool_layout.VALUE_FIRST:
        log_once(logger, ("gdn-pool-layout", layout),
                 "sglang-ascend-hybrid: SGLang hands the GDN layers a transposed view of the SSM pool "
                 "(speculative decoding on this release); the plugin reads and writes its bytes value first, "
                 "as the NPU ops and SGLang's commit do")
    layer = pool_layout.value_first(cache.temporal)  # [layers, slots, Hv, V, K] in memory
    V, K = layer.shape[-2:]
    decode.probe_before_serving(decode_contract.installed_decode_entry(), runner.dtype, layer.dtype, K, V,
                                layer.device)
    key_heads = _per_rank_key_heads(runner, layer.shape[-3])
    if key_heads is not None:
        prefill.probe_triton_entry_before_serving(layer.shape[-3], key_heads, K, V, runner.dtype, layer.device)


def _text_config(runner):
    mc = getattr(runner, "model_config", None)
    return getattr(mc, "hf_text_config", None) or getattr(mc, "hf_config", None)


def _head_dims(runner):
    """The config's GDN (value, key) head dims, None where it does not say."""
    cfg = _text_config(runner)
    dims = (getattr(cfg, "linear_value_head_dim", None), getattr(cfg, "linear_key_head_dim", None))
    return tuple(d if isinstance(d, int) and d > 0 else None for d in dims)


def _per_rank_key_heads(runner, value_heads: int):
    """This rank's GDN key heads: its value heads (the pool's) times the config's key / value ratio
    (None when the config does not say)."""
    cfg = _text_config(runner)
    hv, hk = getattr(cfg, "linear_num_value_heads", None), getattr(cfg, "linear_num_key_heads", None)
    if not (isinstance(hv, int) and isinstance(hk, int) and hv > 0 and hk > 0 and (value_heads * hk) % hv == 0):
        return None
    return value_heads * hk // hv


# Keyword arguments of the Triton entry the hook serves on its ladder: sgl-kernel-npu PR #744 (open,
# "[NPU] Optimize GDN indexed state pool I/O") adds an indexed state pool to chunk_gated_delta_rule_npu:
# ``initial_state`` becomes the pool, sequence i reads slot ``initial_state_indices[i]`` (a negative or
# out-of-range slot starts from zeros and is never written back) and ``inplace_final_state`` writes the
# final states back into those slots (PR description; its code is not readable here).
POOL_KWARGS = ("initial_state_indices", "inplace_final_state")


def _pool_rows(pool, indices):
    """(valid mask, the rows ``pool[indices]`` with zeros where a slot is negative or out of range)."""
    idx = indices.reshape(-1).long()
    valid = (idx >= 0) & (idx < pool.shape[0])
    rows = pool[idx.clamp(0, pool.shape[0] - 1)]
    return valid, torch.where(valid.view(-1, *([1] * (rows.dim() - 1))), rows, torch.zeros_like(rows))


def sgl_chunk_gated_delta_rule_npu(original, q, k, v, g, beta, scale=None, initial_state=None,
                                   output_final_state=True, cu_seqlens=None, head_first=False,
                                   use_qk_l2norm_in_kernel=False, **kwargs):
    """AROUND hook of sgl-kernel-npu's ``chunk_gated_delta_rule_npu`` (see module docstring).  A call
    with the indexed-pool keywords of :data:`POOL_KWARGS` goes down the ladder like any other (the pool's
    rows are gathered, served, and written back when asked); a keyword the hook does not know reaches
    the entry as given, and if the entry then refuses the shape the error names that keyword."""
    args = dict(scale=scale, initial_state=initial_state, output_final_state=output_final_state,
                cu_seqlens=cu_seqlens, head_first=head_first, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                **kwargs)
    if entries.IN_LADDER.get() or head_first:
        return original(q, k, v, g, beta, **args)
    unknown = sorted(set(kwargs) - set(POOL_KWARGS))
    B, T, Hk, K = q.shape
    Hv, V = v.shape[-2], v.shape[-1]
    sig = GdnSignature(Hv, Hk, K, V, q.dtype, True)
    if unknown or not prefill.PREFILL.refused("triton", sig):
        try:
            return original(q, k, v, g, beta, **args)
        except Exception as exc:
            if not prefill.is_triton_entry_refusal(exc):
                raise
            if unknown:
                raise RuntimeError(
                    f"chunk_gated_delta_rule_npu refused {sig} ({str(exc).splitlines()[0] if str(exc) else exc!r}) "
                    f"and the plugin's GDN ladder cannot serve the call in its place: it does not know the keyword "
                    f"argument(s) {', '.join(unknown)}") from exc
            prefill.PREFILL.mark_refused("triton", sig)
            _log_refusal(sig, "chunk_gated_delta_rule_npu (sgl-kernel-npu)", exc, "the GDN ladder")
    indices = kwargs.get("initial_state_indices")
    inplace = kwargs.get("inplace_final_state")
    if inplace is not None and indices is None:
        raise bad_input("initial_state_indices", None, f"the pool's slots with inplace_final_state={inplace!r} (both "
                        "or neither)", op="chunk_gated_delta_rule_npu")
    if indices is not None and initial_state is None:
        raise bad_input("initial_state", None, "the state pool [slots, H, K, V] with initial_state_indices",
                        op="chunk_gated_delta_rule_npu")
    pool, valid = None, None
    if indices is not None:
        if inplace is None:
            raise bad_input("inplace_final_state", None, "True or False with initial_state_indices (whether the "
                            "final states go back into the pool is not readable from the entry's source here)",
                            op="chunk_gated_delta_rule_npu")
        pool = initial_state
        valid, initial_state = _pool_rows(pool, indices)
    if B != 1 and cu_seqlens is None:  # equal-length batch: pack it
        cu_seqlens = torch.arange(0, (B + 1) * T, T, device=q.device)
        q, k, v, g, beta = (x.reshape(1, B * T, *x.shape[2:]) for x in (q, k, v, g, beta))
    elif cu_seqlens is None:
        cu_seqlens = torch.tensor([0, T], device=q.device)
    state_vf = None if initial_state is None else initial_state.float().transpose(-1, -2)
    o, final, h = chunk_with_states(q, k, v, g.float(), beta, cu_seqlens=cu_seqlens, initial_state=state_vf,
                                    scale=scale, use_qk_l2norm=use_qk_l2norm_in_kernel, chunk_states=True,
                                    skip=("npu_chunk", "triton"))
    o = o.reshape(B, T, Hv, V)
    final = final.transpose(-1, -2).contiguous()
    if pool is not None and inplace:  # valid slots only: a negative / out-of-range slot is never written
        pool[indices.reshape(-1).long()[valid]] = final[valid].to(pool.dtype)
    h = h.transpose(-1, -2).unsqueeze(0).to(k.dtype)
    return o, (final if output_final_state else None), h
