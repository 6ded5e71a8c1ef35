"""Speculative decoding (TARGET_VERIFY) for the short-conv hybrids on Ascend: LFM2 / LFM2-MoE
(``shortconv_target_verify``) and ZAYA1 (its CCA conv), on SGLang's NPU draft pool.

The pool (``_init_npu_conv_state``) stores every conv state window major with ``draft - 1``
extra rows: ``[layers, slots, S + (draft-1), C]``, the live state in the LAST ``S`` rows.
SGLang's NPU commit (``AscendHybridLinearAttnBackend.update_mamba_state_after_mtp_verify``)
does not read a tape: it calls sgl-kernel-npu's ``conv_state_rollback`` on ``conv[0]``, which
shifts a slot's rows down by ``(draft-1) - accepted_step``, so the verify must leave each slot
holding the last ``S + draft - 1`` rows of ``[state, block tokens]`` (SGLang's own GDN verify
does exactly that through ``torch.ops.npu.causal_conv1d``'s speculative mode).  Then the last
``S`` rows after the rollback are the state after the accepted token, the window SGLang's CUDA
path copies from its ``intermediate_conv_window`` tape.

* LFM2 / LFM2-MoE: :func:`shortconv_target_verify_around` runs the plugin's
  :func:`~sglang_ascend_hybrid.ops.conv.api.causal_conv1d_verify` ladder on the slot's whole
  draft window instead of SGLang's Triton update with the CUDA-layout tape.
* ZAYA1: CCA calls ``cca_extend`` in TARGET_VERIFY (upstream has no verify form: its host
  mirrors are None there).  The sidecar publishes the step's draft count
  (:func:`publish`); ``cca_extend``'s hook then runs :func:`cca_verify`: the CCA conv over
  ``[state, block]`` per request, both windows (``conv_qk``'s and the one-token ``prev_hs``
  lag, ``draft`` rows) written for the rollback; no host read, fixed shapes (graph safe).
* The commit: SGLang's rolls back ``conv[0]`` only; :func:`commit_extra_conv_states` does the
  same for every further conv state (ZAYA1's ``prev_hs``), with SGLang's own radix-track copy
  first, through the same ``conv_state_rollback`` SGLang's module bound.

Which algorithms: a verify block must be a linear chain (the conv runs token after token);
EAGLE-family drafts with ``speculative_eagle_topk == 1`` (NEXTN resolves to EAGLE) are, and
SGLang's commit path serves them.  Anything else is refused at startup naming the flag
(:func:`check_speculative`).
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang_ascend_hybrid.envs import ENV
from sglang_ascend_hybrid.integration.conv_hooks import routes_to_plugin
from sglang_ascend_hybrid.integration.conv_state_layout import draft_window
from sglang_ascend_hybrid.ops.conv.api import causal_conv1d_verify
from sglang_ascend_hybrid.ops.conv.torch_impl import pad_redirect
from sglang_ascend_hybrid.ops.errors import bad_input

LINEAR_CHAIN_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")

UNSUPPORTED = (
    "sglang-ascend-hybrid: speculative decoding for short-conv hybrid models (LFM2 / LFM2-MoE / LFM2-VL / "
    "ZAYA1) on Ascend verifies linear draft chains only: --speculative-algorithm one of "
    f"{', '.join(LINEAR_CHAIN_ALGORITHMS)} with --speculative-eagle-topk 1"
)


def _algorithm_name(algo) -> Optional[str]:
    if algo is None:
        return None
    name = getattr(algo, "name", algo)
    return str(name).upper()


def check_speculative(server_args) -> Optional[int]:
    """The draft tokens per verify block when speculative decoding is on (None when off);
    ``ValueError`` naming the flag for an algorithm / topk this path cannot verify.  Every
    short-conv family is served alike (LFM2-VL's verify steps are text tokens through its LFM2
    language model).  ``server_args`` is SGLang's ``ServerArgs`` (every ``speculative_*`` field is
    always set)."""
    name = _algorithm_name(server_args.speculative_algorithm)
    if name in (None, "NONE"):
        return None
    topk = server_args.speculative_eagle_topk
    if name not in LINEAR_CHAIN_ALGORITHMS or (topk not in (None, 1)):
        raise ValueError(f"{UNSUPPORTED} (got --speculative-algorithm {name}, --speculative-eagle-topk {topk})")
    draft = server_args.speculative_num_draft_tokens
    if not isinstance(draft, int) or draft < 1:
        raise bad_input("speculative_num_draft_tokens", repr(draft), f"an int >= 1 with --speculative-algorithm {name}")
    if name == "STANDALONE":
        _check_standalone_draft(getattr(server_args, "speculative_draft_model_path", None))
    return draft


def _check_standalone_draft(path: Optional[str]) -> None:
    """SGLang builds a STANDALONE draft model's attention backends without the hybrid wrapper
    (``speculative/draft_utils.py``: ``create_draft_extend_backend`` wraps only Inkling / Dots3
    drafts, ``create_decode_backend`` refuses any draft that needs a conv sidecar): a draft with
    short-conv or linear-attention layers of its own fails in its first draft extend
    (``'AscendAttnBackend' object has no attribute 'conv_state_metadata'``, found by running SGLang's
    Engine).  Refused here at startup, naming the draft."""
    from sglang_ascend_hybrid.model_families import GDN_ARCHS, SHORT_CONV_ARCHS

    arch = _architecture_of(path)
    if arch in SHORT_CONV_ARCHS or arch in GDN_ARCHS:
        raise ValueError(
            f"sglang-ascend-hybrid: --speculative-algorithm STANDALONE with --speculative-draft-model-path "
            f"{path} ({arch}): SGLang gives a STANDALONE draft model no conv or linear-attention state "
            "backend, so a draft with short-conv or GDN layers cannot run; use a draft model of full-attention "
            "layers only (e.g. a small Llama / Qwen3 model with the same vocabulary)")


def _architecture_of(path: Optional[str]) -> Optional[str]:
    """``architectures[0]`` of a local model directory's config.json, or None (a hub id, no file)."""
    import json
    import os

    if not path:
        return None
    config = os.path.join(path, "config.json") if os.path.isdir(path) else path
    try:
        with open(config, encoding="utf-8") as fh:
            archs = json.load(fh).get("architectures") or [None]
    except (OSError, ValueError, AttributeError):
        return None
    return archs[0]


# --------------------------------------------------------------------------- the step's verify fact

_STEP: list = [None, None]


def publish(draft: Optional[int], slots: Optional[torch.Tensor] = None) -> None:
    """The draft tokens per request of this step's TARGET_VERIFY (None: not a verify step) and the
    step's slot indices (the sidecar's graph-stable buffer)."""
    _STEP[0], _STEP[1] = (draft, slots) if draft is not None else (None, None)


def current() -> Optional[int]:
    return _STEP[0]


def current_slots() -> Optional[torch.Tensor]:
    return _STEP[1]


def verify_draft(forward_batch, draft: Optional[int]) -> Optional[int]:
    """``draft`` when the step is a TARGET_VERIFY (a Python decision on the forward mode, never on
    tensor values), else None.  ``draft`` is the server args' ``speculative_num_draft_tokens``,
    the count SGLang's EAGLE-family workers build every verify input with
    (``EagleVerifyInput.draft_token_num``), so the batch's ``spec_info`` is not read again."""
    if draft is None or not forward_batch.forward_mode.is_target_verify():
        return None
    return draft


# --------------------------------------------------------------------------- LFM2 / LFM2-MoE


def shortconv_target_verify_around(original, conv, Bx, meta, draft_token_num, arch, *args, **kwargs):
    """AROUND hook of ``sglang.srt.models.lfm2.shortconv_target_verify`` (also bound into
    ``lfm2_moe``): on the NPU pool the plugin's verify op over the slot's whole draft window;
    every other call (CUDA, a CUDA-layout pool) runs the original."""
    state = meta.layer_cache.conv[0]
    if not routes_to_plugin(Bx, state):
        return original(conv, Bx, meta, draft_token_num, arch, *args, **kwargs)
    draft = int(draft_token_num)
    window = draft_window(state, state.shape[-1] + draft - 1)
    return causal_conv1d_verify(Bx, window, conv.conv_weight, conv.conv_bias, None, meta.cache_indices, draft,
                                check_values=ENV.DEBUG_CHECKS.get())


# --------------------------------------------------------------------------- ZAYA1 CCA


@torch.no_grad()
def cca_verify(qk, hidden_states, conv_qk, conv_state, prev_hs_state, cache_indices, draft: int,
               total_padding: Optional[int] = None):
    """ZAYA1's CCA over a TARGET_VERIFY block of ``draft`` tokens per request: ``(qk_out, v2_input)``
    as ``cca_extend`` returns them for requests resuming their cached state, and both draft windows
    left for SGLang's rollback (module docstring).  ``conv_state`` / ``prev_hs_state`` are the
    sidecar's CUDA-layout views ``[slots, C, P]`` / ``[slots, H, 1]``; pad rows are skipped."""
    batch = cache_indices.shape[0]
    dtype = hidden_states.dtype
    pad = total_padding if total_padding is not None else conv_state.shape[-1]
    if pad != conv_state.shape[-1]:
        raise bad_input("total_padding", pad, f"the conv state's {conv_state.shape[-1]} columns", op="cca_verify")
    if qk.shape[0] != batch * draft or hidden_states.shape[0] != batch * draft:
        name, t = ("qk", qk) if qk.shape[0] != batch * draft else ("hidden_states", hidden_states)
        raise bad_input(name, t, f"batch ({batch}) * draft ({draft}) = {batch * draft} tokens", op="cca_verify")
    qk_window = draft_window(conv_state, pad + draft - 1)              # [slots, P + d - 1, C]
    hs_window = draft_window(prev_hs_state, draft)                     # [slots, d, H]
    slots = cache_indices.to(torch.int64)
    rows, gather, any_valid = pad_redirect(slots, -1, batch)
    keep = any_valid.reshape(1, 1, 1)

    old_qk = qk_window.index_select(0, gather)                         # [B, P + d - 1, C]
    tokens = qk.reshape(batch, draft, -1).index_select(0, rows)        # [B, d, C]
    stream = torch.cat([old_qk[:, old_qk.shape[1] - pad:].to(dtype), tokens], 1)   # [B, P + d, C]
    qk_out = conv_qk(stream.transpose(1, 2)).transpose(1, 2)           # [B, d, C]
    new_qk = torch.where(keep, stream[:, 1:].to(qk_window.dtype), old_qk)
    qk_window.index_copy_(0, gather, new_qk)

    old_hs = hs_window.index_select(0, gather)                         # [B, d, H]
    hs = hidden_states.reshape(batch, draft, -1).index_select(0, rows)  # [B, d, H]
    v2_input = torch.cat([old_hs[:, -1:].to(dtype), hs[:, :-1]], 1)    # the one-token lag
    hs_window.index_copy_(0, gather, torch.where(keep, hs.to(hs_window.dtype), old_hs))
    # pad rows' outputs carry the first real row's values (unspecified, as on every conv path)
    return qk_out.reshape(batch * draft, -1).to(qk.dtype), v2_input.reshape(batch * draft, -1)


# --------------------------------------------------------------------------- the commit


def commit_extra_conv_states(convs, rollback, state_indices, last_steps, track_indices, steps_to_track,
                             draft_token_num: int) -> None:
    """What SGLang's NPU commit does for ``conv[0]``, for every further conv state (``convs``:
    all-layer pools ``[L, slots, rows, C]``): radix-track slots take the verify-time window of the
    request's slot (their own where not tracked), then ``rollback`` (sgl-kernel-npu's
    ``conv_state_rollback``) of the working slots and the track slots."""
    dst = state_indices.to(torch.int64)
    steps = last_steps.to(torch.int64)
    if track_indices is not None:
        track = track_indices.to(torch.int64)
        track_steps = steps_to_track.to(torch.int64)
        src = torch.where(track_steps >= 0, dst, track)
    for conv in convs:
        if track_indices is not None:
            conv[:, track] = conv[:, src]
        if dst.numel() > 0:
            rollback(conv, dst, steps, draft_token_num)
        if track_indices is not None and track.numel() > 0:
            rollback(conv, track, track_steps, draft_token_num)
