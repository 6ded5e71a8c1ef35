"""Radix-cache snapshots of short-conv states (SGLang's mamba ``extra_buffer`` strategy) on Ascend.

SGLang's ``extra_buffer`` strategy keeps prefix caching with paged KV by copying the
recurrent state at tracked token boundaries into private *track slots*, which the
radix tree then stores and hands to a later request sharing the prefix (the model
runner copies the slot into that request's slot).  SGLang's short-conv sidecar
(``ShortConvAttnBackend``) writes no such snapshot in any release: the model runs its
own conv kernel, never the backend's ``forward_extend`` / ``forward_decode`` where
the GDN backends take theirs.  A short-conv layer's state at a boundary is just the
last ``S`` (= kernel width - 1) inputs of the layer before it, so the plugin takes it
where the layer's input is at hand: in the conv calls the plugin already serves.

Per step, the Ascend sidecar publishes a :class:`StepTrack` (:func:`publish`) from
SGLang's own tracking fields:

* extend: the rows of ``mamba_track_mask``, the boundary ``query_start_loc[row] +
  ForwardBatch.mamba_track_aligned_lens()[row]`` (SGLang's one home of that maths,
  the one its GDN conv snapshots use), the track slots ``mamba_track_indices[row]``;
* decode: ``mamba_track_mask`` (the steps whose new length is on the track grid) and
  the track slots of the step's metadata (the static buffer under graph capture).

The conv calls then snapshot: before a prefill kernel runs (it overwrites the
request's slot), the window before each boundary is gathered from the layer's
input, or from the request's cached state where the boundary is fewer than ``S``
tokens into the extend (:func:`snapshot_extend`); after a decode update, tracked
rows copy their new state into their track slot (:func:`copy_decode`: one
``index_copy_`` with static shapes, untracked rows copy their own slot onto itself,
no host sync, capture-safe).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from sglang_ascend_hybrid.ops.errors import bad_input


@dataclass(frozen=True)
class ExtendTrack:
    starts: torch.Tensor  # [n] first token (flattened) of each tracked request's extend
    ends: torch.Tensor  # [n] flattened index of its boundary (tokens before it are in the snapshot)
    dst: torch.Tensor  # [n] int64 track slots
    src: torch.Tensor  # [n] int64 the requests' own slots (their cached state before this step)
    has_prefix: torch.Tensor  # [n] bool: the request resumes a cached prefix


@dataclass(frozen=True)
class DecodeTrack:
    mask: torch.Tensor  # [bs] bool
    dst: torch.Tensor  # [bs] int64 track slots (ignored where not masked)
    src: torch.Tensor  # [bs] int64 the rows' slots


@dataclass(frozen=True)
class StepTrack:
    extend: Optional[ExtendTrack] = None
    decode: Optional[DecodeTrack] = None


_CURRENT: list = [None]


def publish(track: Optional[StepTrack]) -> None:
    """The step's snapshots to take (None: this step takes none)."""
    _CURRENT[0] = track


def current() -> Optional[StepTrack]:
    return _CURRENT[0]


def step_track(forward_batch, metadata, cache_indices) -> Optional[StepTrack]:
    """The :class:`StepTrack` of one step from SGLang's tracking fields, or None."""
    mask = getattr(forward_batch, "mamba_track_mask", None)
    if mask is None or metadata is None or cache_indices is None:
        return None
    mode = forward_batch.forward_mode
    track_dst = getattr(metadata, "mamba_track_indices", None)
    if track_dst is None:
        track_dst = forward_batch.mamba_track_indices
    if mode.is_decode_or_idle():
        return StepTrack(decode=DecodeTrack(mask, track_dst.to(torch.int64), cache_indices.to(torch.int64)))
    if not mode.is_extend() or mode.is_target_verify() or not getattr(metadata, "has_mamba_track_mask", False):
        return None
    aligned = forward_batch.mamba_track_aligned_lens()
    if aligned is None:
        return None
    rows = mask.nonzero(as_tuple=True)[0]  # extend: host sync allowed (upstream's own tracking syncs)
    starts = metadata.query_start_loc[:-1].to(torch.int64)[rows]
    return StepTrack(extend=ExtendTrack(
        starts=starts, ends=starts + aligned.to(torch.int64)[rows], dst=track_dst.to(torch.int64)[rows],
        src=cache_indices.to(torch.int64)[rows], has_prefix=(forward_batch.extend_prefix_lens > 0)[rows]))


def snapshot_extend(state: torch.Tensor, x: torch.Tensor, track: ExtendTrack) -> None:
    """Write into ``state[track.dst]`` the window before each tracked boundary.

    ``state``: a conv state pool ``[slots, C, S]`` (the CUDA-layout view of the window-major
    pool; writes land in the pool); ``x``: the layer's conv input ``[C, T]`` (flattened
    batch).  Positions before a request's extend come from its cached state (``state[src]``,
    read before the kernel overwrites it) when it resumes a prefix, else zeros."""
    n, S = track.ends.shape[0], state.shape[-1]
    if n == 0:
        return
    C = state.shape[-2]
    if x.shape[0] != C:
        raise bad_input("x", x, f"shape ({C}, tokens) to snapshot a state of shape {tuple(state.shape)}",
                        op="snapshot_extend")
    offs = torch.arange(S, device=x.device)
    pos = track.ends[:, None] - S + offs  # [n, S]
    from_input = pos >= track.starts[:, None]
    inputs = x[:, pos.clamp(min=0).reshape(-1)].reshape(C, n, S).permute(1, 0, 2)  # [n, C, S]
    cached_pos = (pos - track.starts[:, None] + S).clamp(0, S - 1)  # cached state column j = position start - S + j
    cached = torch.gather(state[track.src], 2, cached_pos[:, None, :].expand(n, C, S))
    cached = torch.where(track.has_prefix[:, None, None], cached, torch.zeros_like(cached))
    state[track.dst] = torch.where(from_input[:, None, :], inputs.to(state.dtype), cached)


def snapshot_extend_rows(state: torch.Tensor, rows: torch.Tensor, track: ExtendTrack) -> None:
    """A one-token-lag state ``[slots, D, 1]`` (ZAYA1's ``prev_hs``): the input row before each
    boundary, from ``rows [T, D]``, or the cached value (zeros without a prefix)."""
    if track.ends.shape[0] == 0:
        return
    last = track.ends - 1
    inside = (last >= track.starts)[:, None]
    taken = rows[last.clamp(min=0)].to(state.dtype)  # [n, D]
    cached = state[track.src][..., 0]
    cached = torch.where(track.has_prefix[:, None], cached, torch.zeros_like(cached))
    state[track.dst] = torch.where(inside, taken, cached).unsqueeze(-1)


def copy_decode(state: torch.Tensor, track: DecodeTrack) -> None:
    """After a decode update: tracked rows' new state into their track slots (untracked rows
    copy their slot onto itself).  Static shapes, no host sync."""
    dst = torch.where(track.mask, track.dst, track.src)
    state.index_copy_(0, dst, state.index_select(0, track.src))


def before_prefill(x: torch.Tensor, conv_states: torch.Tensor) -> None:
    """Called by the conv prefill hook before the plugin's kernel overwrites the slots: the
    tracked boundaries' windows into their track slots (nothing unless a step is published)."""
    step = current()
    if step is not None and step.extend is not None and conv_states is not None:
        snapshot_extend(conv_states, x, step.extend)


def after_update(conv_state: torch.Tensor) -> None:
    """Called by the conv decode hook after the plugin's update: tracked rows' new state into
    their track slots (capture-safe; nothing unless a step is published)."""
    step = current()
    if step is not None and step.decode is not None and conv_state is not None:
        copy_decode(conv_state, step.decode)


def _cca_args(args, kwargs):
    names = ("qk", "hidden_states", "conv_qk", "conv_state", "prev_hs_state")
    got = dict(zip(names, args))
    got.update({k: v for k, v in kwargs.items() if k in names})
    return got


def cca_extend_around(original, *args, **kwargs):
    """AROUND hook of ZAYA1's ``sglang.srt.models.zaya.cca_extend``: in a TARGET_VERIFY step
    published by the Ascend sidecar, the plugin's CCA verify
    (:func:`~sglang_ascend_hybrid.integration.short_conv_verify.cca_verify`); otherwise, before it
    overwrites the requests' slots, the tracked boundaries' conv window (of ``qk``, the CCA conv
    input) and ``prev_hs`` (the hidden state of the token before the boundary) into their track
    slots."""
    from sglang_ascend_hybrid.integration import short_conv_verify

    draft = short_conv_verify.current()
    if draft is not None:
        return _cca_verify_call(short_conv_verify, draft, args, kwargs)
    step = current()
    if step is not None and step.extend is not None:
        a = _cca_args(args, kwargs)
        snapshot_extend(a["conv_state"], a["qk"].transpose(0, 1), step.extend)
        snapshot_extend_rows(a["prev_hs_state"], a["hidden_states"], step.extend)
    return original(*args, **kwargs)


def _cca_verify_call(verify_module, draft: int, args, kwargs):
    """``cca_extend``'s arguments -> the plugin's CCA verify; the slots come from the sidecar's
    published step (``cca_extend``'s host mirrors are None in TARGET_VERIFY)."""
    a = _cca_args(args, kwargs)
    total_padding = args[8] if len(args) > 8 else kwargs.get("total_padding")
    slots = verify_module.current_slots()
    return verify_module.cca_verify(a["qk"], a["hidden_states"], a["conv_qk"], a["conv_state"], a["prev_hs_state"],
                                    slots, draft, total_padding)


def cca_decode_around(original, *args, **kwargs):
    """AROUND hook of ZAYA1's ``sglang.srt.models.zaya.cca_decode``: after the update, tracked
    decode steps copy the conv window and ``prev_hs`` into their track slots (capture-safe)."""
    out = original(*args, **kwargs)
    step = current()
    if step is not None and step.decode is not None:
        a = _cca_args(args, kwargs)
        copy_decode(a["conv_state"], step.decode)
        copy_decode(a["prev_hs_state"], step.decode)
    return out
