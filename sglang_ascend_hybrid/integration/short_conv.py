"""Ascend short-conv sidecar for LFM2 / LFM2-MoE / LFM2-VL / ZAYA1, and its registry hook.

Upstream ``attn_backend_wrapper`` raises ``NotImplementedError`` on NPU for the
short-conv hybrids because ``ShortConvAttnBackend`` (the conv-state sidecar the
model reaches through ``get_attn_backend().conv_state_metadata``) is
CUDA-only.  This module provides:

``AscendShortConvAttnBackend``
    ``ShortConvAttnBackend``'s per-step plumbing (int64 slot indices refreshed
    once per step into a graph-stable buffer, ``has_initial_state``, the
    ``slot_ids_cpu`` / ``has_prefix_cpu`` host mirrors) stacked on
    ``AscendMambaAttnBackendBase`` (MRO: ShortConv -> AscendMambaBase ->
    MambaAttnBackendBase), so NPU graph capture / replay metadata and the
    pad-slot handling are the Ascend ones.  ``conv_state_metadata`` hands the
    model CUDA-layout strided views of the window-major NPU pool
    (:mod:`.conv_state_layout`): no per-step copies, writes land in the pool.
``AscendShortConvHybridAttnBackend``
    ``AscendHybridLinearAttnBackend`` + ``conv_state_metadata`` forwarding.
:func:`attn_backend_wrapper_around`
    AROUND hook for ``sglang.srt.layers.attention.attention_registry.attn_backend_wrapper``:
    on NPU with a ZayaConfig / Lfm2Config / Lfm2MoeConfig / Lfm2VlConfig model it
    returns the backend above; everything else calls the original.

Speculative decoding (linear draft chains: EAGLE-family, topk 1) is served by
:mod:`.short_conv_verify`: with it on, the pool has ``draft - 1`` extra window rows,
the model's views are of the LAST ``W - 1`` rows (the live state), the verify
writes the whole draft window for SGLang's NPU rollback, and the commit rolls back
every conv state (ZAYA1's ``prev_hs`` too).  Other algorithms are refused at
construction naming the flag.

The upstream Ascend module imports ``sgl_kernel_npu`` at module top, so the
classes are built lazily (:func:`backend_classes`), only when needed.
"""

from __future__ import annotations

import functools
import importlib
import logging
from typing import Optional

from sglang_ascend_hybrid.integration import short_conv_track, short_conv_verify
from sglang_ascend_hybrid.integration.conv_state_layout import layer_cache_cuda_view
from sglang_ascend_hybrid.logutil import log_once
from sglang_ascend_hybrid.model_families import FAMILIES

logger = logging.getLogger(__name__)

def short_conv_config_classes() -> tuple:
    """SGLang's config classes of the short-conv families (``config_class`` of the
    ``short_conv`` rows of :data:`~sglang_ascend_hybrid.model_families.FAMILIES`), imported
    now; every supported release has all of them (an ImportError propagates)."""
    classes = []
    for fam in FAMILIES:
        if fam.kind == "short_conv":
            module, name = fam.config_class.rsplit(".", 1)
            classes.append(getattr(importlib.import_module(module), name))
    return tuple(classes)


def short_conv_config(model_config):
    """The model's mamba2 config if it is one of the short-conv hybrids (the family table's), else None
    (the same test upstream's short-conv branch makes)."""
    from sglang.srt.configs.hybrid_arch import mamba2_config

    cfg = mamba2_config(model_config)
    return cfg if isinstance(cfg, short_conv_config_classes()) else None


def npu_detected() -> bool:
    """Upstream's short-conv branch asks ``sglang.srt.utils.is_npu()`` at call time; so do we."""
    from sglang.srt import utils

    return bool(utils.is_npu())


def speculative_draft_tokens(model_runner) -> Optional[int]:
    """Draft tokens per verify block when speculative decoding is on (None when off); refuses what
    :func:`.short_conv_verify.check_speculative` cannot verify, and a speculative pool without a
    draft count."""
    from sglang.srt.mem_cache.memory_pool import MambaPool

    draft = short_conv_verify.check_speculative(model_runner.server_args)
    cache = model_runner.req_to_token_pool.mamba_pool.mamba_cache
    if draft is None and isinstance(cache, MambaPool.SpeculativeState):
        raise ValueError("sglang-ascend-hybrid: the mamba pool was built for speculative decoding but "
                         "server_args.speculative_algorithm is not set: expected both or neither")
    return draft


def _expected_cuda_conv_shapes(model_runner):
    """Per conv state (channels, state_len) from the model config, or None when unknown."""
    try:
        cfg = short_conv_config(model_runner.model_config)
        params = cfg.mamba2_cache_params
        return [tuple(int(n) for n in shape) for shape in params.shape.conv]
    except Exception:  # config not readable here (e.g. TP context not published)
        return None


def conv_pool_layout(model_runner, draft: Optional[int] = None) -> tuple:
    """``(window_major, state_lens)``: which pool conv tensors are window-major
    ``[L, slots, window, C]`` and how many of their last rows are the state (None: all).

    On NPU every conv state is window major (``_init_npu_conv_state``), with ``draft - 1``
    extra rows when speculative decoding is on; a pool already in the CUDA layout
    ``[L, slots, C, S]`` is passed through unchanged.  Shapes that match neither raise
    ``ValueError``; draft rows without the config's state lengths too."""
    convs = model_runner.req_to_token_pool.mamba_pool.mamba_cache.conv
    extra = 0 if draft is None else draft - 1
    expected = _expected_cuda_conv_shapes(model_runner)
    if expected is None or len(expected) != len(convs):
        if extra:
            raise ValueError("sglang-ascend-hybrid: the model config's conv state shapes are not readable, so the "
                             "state rows of the speculative draft window are unknown")
        return [True] * len(convs), [None] * len(convs)
    flags, lens = [], []
    for i, (conv, (channels, state_len)) in enumerate(zip(convs, expected)):
        tail = tuple(conv.shape[2:])  # the pool's [layers, slots, ...] per-slot shape
        if tail == (state_len + extra, channels):
            flags.append(True)
            lens.append(state_len)
        elif tail == (channels, state_len) and not extra:
            flags.append(False)
            lens.append(None)
        else:
            raise ValueError(f"conv state {i} of the mamba pool has shape {tuple(conv.shape)}: expected "
                             f"(layers, slots, {state_len + extra}, {channels}) window-major"
                             + ("" if extra else f" or (layers, slots, {channels}, {state_len})"))
    return flags, lens


@functools.lru_cache(maxsize=None)
def backend_classes():
    """(AscendShortConvAttnBackend, AscendShortConvHybridAttnBackend), built on first use."""
    from sglang.srt.hardware_backend.npu.attention import ascend_hybrid_linear_attn_backend as hybrid_module
    from sglang.srt.hardware_backend.npu.attention.ascend_hybrid_linear_attn_backend import (
        AscendHybridLinearAttnBackend,
        AscendMambaAttnBackendBase,
    )
    from sglang.srt.layers.attention.linear.short_conv_backend import ShortConvAttnBackend

    class AscendShortConvAttnBackend(ShortConvAttnBackend, AscendMambaAttnBackendBase):
        """ShortConvAttnBackend's plumbing on the Ascend mamba base; window-major pool views."""

        def __init__(self, model_runner):
            self._draft = speculative_draft_tokens(model_runner)
            self._window_major, self._state_lens = conv_pool_layout(model_runner, self._draft)
            super().__init__(model_runner)

        def _publish_track(self, forward_batch):
            short_conv_track.publish(
                short_conv_track.step_track(forward_batch, self.forward_metadata, self._cache_indices))
            short_conv_verify.publish(short_conv_verify.verify_draft(forward_batch, self._draft), self._cache_indices)

        def init_forward_metadata(self, forward_batch):
            super().init_forward_metadata(forward_batch)
            self._publish_track(forward_batch)

        def init_forward_metadata_out_graph(self, forward_batch, in_capture=False):
            super().init_forward_metadata_out_graph(forward_batch, in_capture)
            short_conv_track.publish(None)  # the graph's own batch publishes, in init_forward_metadata_in_graph
            short_conv_verify.publish(short_conv_verify.verify_draft(forward_batch, self._draft), self._cache_indices)

        def init_forward_metadata_in_graph(self, forward_batch):
            # inside the captured region: the captured batch's static track mask, the static
            # track-slot and slot-index buffers the out-of-graph metadata refreshed
            super().init_forward_metadata_in_graph(forward_batch)
            self._publish_track(forward_batch)

        def conv_state_metadata(self, layer_id, forward_batch):
            meta = super().conv_state_metadata(layer_id, forward_batch)
            return meta._replace(
                layer_cache=layer_cache_cuda_view(meta.layer_cache, self._window_major, self._state_lens))

    class AscendShortConvHybridAttnBackend(AscendHybridLinearAttnBackend):
        """Ascend hybrid wrapper that exposes the short-conv sidecar to the model."""

        def __init__(self, full_attn_backend, short_conv_backend, full_attn_layers):
            super().__init__(full_attn_backend, short_conv_backend, full_attn_layers)
            self.short_conv_backend = short_conv_backend

        def conv_state_metadata(self, layer_id, forward_batch):
            return self.short_conv_backend.conv_state_metadata(layer_id, forward_batch)

        def update_mamba_state_after_mtp_verify(self, last_correct_step_indices, mamba_track_indices,
                                                mamba_steps_to_track, model, *args, **kwargs):
            """SGLang's NPU commit (``conv[0]``), then the same for every further conv state."""
            super().update_mamba_state_after_mtp_verify(last_correct_step_indices, mamba_track_indices,
                                                        mamba_steps_to_track, model, *args, **kwargs)
            caches = self.linear_attn_backend.req_to_token_pool.get_speculative_mamba2_params_all_layers()
            if len(caches.conv) < 2:
                return
            n = last_correct_step_indices.shape[0]
            slots = self.linear_attn_backend.forward_metadata.mamba_cache_indices[:n]
            short_conv_verify.commit_extra_conv_states(
                caches.conv[1:], hybrid_module.conv_state_rollback, slots, last_correct_step_indices,
                mamba_track_indices, mamba_steps_to_track, self.short_conv_backend._draft)

    return AscendShortConvAttnBackend, AscendShortConvHybridAttnBackend


def build_short_conv_backend(runner, full_attn_backend, cfg):
    sidecar_cls, hybrid_cls = backend_classes()
    sidecar = sidecar_cls(runner)
    full_attn_layers = [0] if runner.is_draft_worker else list(cfg.full_attention_layer_ids)
    log_once(logger, ("short-conv-backend", type(cfg).__name__),
             "sglang-ascend-hybrid: %s on NPU uses the Ascend short-conv backend "
             "(window-major conv pool, plugin causal_conv1d)", type(cfg).__name__)
    return hybrid_cls(full_attn_backend, sidecar, full_attn_layers)


def attn_backend_wrapper_around(original, runner, full_attn_backend, *args, **kwargs):
    """AROUND hook for ``attention_registry.attn_backend_wrapper`` (see module docstring).

    On NPU it first checks that the installed sgl_kernel_npu provides what the model's
    family imports (:func:`sglang_ascend_hybrid.tools.pairing.enforce_for_model`: under
    ascend_hybrid a missing one stops startup by name instead of an ImportError from
    SGLang), then applies the plugin's deferred patches (targets in modules that
    import NPU packages, e.g. the Ascend GDN backend), which must not be touched at
    plugin discovery."""
    if npu_detected():
        from sglang_ascend_hybrid.patches.apply import apply_deferred
        from sglang_ascend_hybrid.tools.pairing import enforce_for_model

        enforce_for_model(runner.model_config)
        apply_deferred()
        cfg = short_conv_config(runner.model_config)
        if cfg is not None:
            return build_short_conv_backend(runner, full_attn_backend, cfg)
        backend = original(runner, full_attn_backend, *args, **kwargs)
        from sglang_ascend_hybrid.integration.gdn_hooks import probe_gdn_backend

        probe_gdn_backend(runner, backend)  # before any graph capture
        return backend
    return original(runner, full_attn_backend, *args, **kwargs)

