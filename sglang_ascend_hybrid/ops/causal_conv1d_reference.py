"""Vectorised pure-torch causal conv1d with SGLang's conv-state contract.

This is the CPU path and the last rung of the conv ladder in
:mod:`sglang_ascend_hybrid.ops.causal_conv1d`.  Semantics are those of
``sglang.srt.layers.attention.mamba.causal_conv1d`` (and its Triton kernels):

* conv states are any strided ``[slots, dim, state_len]`` tensor with
  ``state_len >= width - 1``; only the first ``width - 1`` columns are read and
  written (a transposed view of a window-major NPU pool works, writes land in
  the pool);
* ``cache_indices == pad_slot_id`` skips the sequence: its state is untouched
  (its output rows are unspecified, as in the kernels);
* ``has_initial_state`` False (or None) means zeros before the first token;
* the final state is the last ``width - 1`` inputs, left-filled from the old
  state (or zeros) when the sequence is shorter;
* a zero-length sequence leaves its state unchanged.

Prefill packs every sequence as ``[initial state (W-1 columns), tokens]`` into
one buffer and runs a single depthwise ``F.conv1d`` over it: no Python loop
over tokens or sequences.  Fp16 / bf16 inputs are computed in fp32 (as the
kernels accumulate) and cast back.

Input checks raise ``ValueError`` naming the argument, the value and what was
expected, before anything is written.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

PAD_SLOT_ID = -1
_INT_DTYPES = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)


# --------------------------------------------------------------------------- checks


def activation_is_silu(activation) -> bool:
    """``None`` / False -> identity, ``"silu"`` / ``"swish"`` / True -> SiLU."""
    if activation is None or activation is False:
        return False
    if activation is True or activation in ("silu", "swish"):
        return True
    raise ValueError(f"activation={activation!r}: expected None, 'silu' or 'swish'")


def _need(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


def _check_index_vector(t, name: str, length: int, dtypes=_INT_DTYPES) -> None:
    if t is None:
        return
    _need(isinstance(t, torch.Tensor), f"{name}={type(t).__name__}: expected a tensor")
    _need(t.dim() == 1 and t.shape[0] == length,
          f"{name} has shape {tuple(t.shape)}: expected ({length},)")
    _need(t.dtype in dtypes, f"{name} has dtype {t.dtype}: expected one of {list(dtypes)}")


def check_weight(weight, bias, dim: int) -> int:
    """Validate ``weight [dim, width]`` / ``bias [dim]``; return the width."""
    _need(isinstance(weight, torch.Tensor) and weight.dim() == 2,
          f"weight has shape {tuple(getattr(weight, 'shape', ()))}: expected (dim={dim}, width)")
    _need(weight.shape[0] == dim,
          f"weight has shape {tuple(weight.shape)}: expected first dim == x channels ({dim})")
    _need(weight.shape[1] >= 2, f"weight has width {weight.shape[1]}: expected width >= 2")
    _need(weight.is_floating_point(), f"weight has dtype {weight.dtype}: expected a floating dtype")
    if bias is not None:
        _need(bias.dim() == 1 and bias.shape[0] == dim,
              f"bias has shape {tuple(bias.shape)}: expected ({dim},)")
    return int(weight.shape[1])


def check_conv_states(conv_states, name: str, dim: int, width: int) -> None:
    if conv_states is None:
        return
    _need(isinstance(conv_states, torch.Tensor) and conv_states.dim() == 3,
          f"{name} has shape {tuple(getattr(conv_states, 'shape', ()))}: "
          f"expected (slots, dim={dim}, state_len>={width - 1})")
    _need(conv_states.shape[1] == dim and conv_states.shape[2] >= width - 1,
          f"{name} has shape {tuple(conv_states.shape)}: expected (slots, {dim}, >= {width - 1})")
    _need(conv_states.is_floating_point(),
          f"{name} has dtype {conv_states.dtype}: expected a floating dtype")


def check_slot_values(indices: Optional[torch.Tensor], name: str, num_slots: int, pad_slot_id: int,
                      active: Optional[torch.Tensor] = None) -> None:
    """Value check (reads the values on the host: never on the serving decode path): every
    index is ``pad_slot_id`` or in ``[0, num_slots)``, and no slot repeats among the rows that
    write a state (``active``: rows that would write, e.g. non-empty sequences)."""
    if indices is None or indices.numel() == 0:
        return
    idx = indices.detach().to("cpu", torch.int64)
    bad = (idx != pad_slot_id) & ((idx < 0) | (idx >= num_slots))
    if bool(bad.any()):
        first = int(idx[bad][0])
        raise ValueError(f"{name} contains slot {first}: expected pad_slot_id ({pad_slot_id}) "
                         f"or a slot in [0, {num_slots})")
    live = idx != pad_slot_id
    if active is not None:
        live = live & active.detach().to("cpu").bool()
    same = (idx[:, None] == idx[None, :]) & live[:, None] & live[None, :]
    same.fill_diagonal_(False)
    if bool(same.any()):
        slot = int(idx[same.any(1)][0])
        raise ValueError(f"{name} uses slot {slot} for more than one sequence of the batch "
                         f"({idx.tolist()}): expected distinct slots (or pad_slot_id {pad_slot_id})")


# Backward-compatible name (range check plus duplicates).
check_slot_range = check_slot_values


def check_fn_inputs(x, weight, bias, query_start_loc, cache_indices, has_initial_state,
                    conv_states) -> int:
    """Shape / dtype checks of ``causal_conv1d_fn`` (no host sync); returns the width."""
    _need(isinstance(x, torch.Tensor) and x.dim() == 2,
          f"x has shape {tuple(getattr(x, 'shape', ()))}: expected (dim, total_tokens)")
    _need(x.is_floating_point(), f"x has dtype {x.dtype}: expected a floating dtype")
    dim = x.shape[0]
    width = check_weight(weight, bias, dim)
    _need(query_start_loc is not None and query_start_loc.dim() == 1 and query_start_loc.shape[0] >= 1,
          f"query_start_loc has shape {tuple(getattr(query_start_loc, 'shape', ()))}: expected (batch + 1,)")
    _need(query_start_loc.dtype in _INT_DTYPES,
          f"query_start_loc has dtype {query_start_loc.dtype}: expected an integer dtype")
    batch = query_start_loc.shape[0] - 1
    _check_index_vector(cache_indices, "cache_indices", batch)
    _check_index_vector(has_initial_state, "has_initial_state", batch, _INT_DTYPES + (torch.bool,))
    check_conv_states(conv_states, "conv_states", dim, width)
    if has_initial_state is not None:
        _need(conv_states is not None, "has_initial_state is given but conv_states is None: "
              "expected conv_states to read the initial states from")
    return width


def check_query_start_loc_values(query_start_loc: torch.Tensor, total_tokens: int) -> None:
    qsl = query_start_loc.detach().to("cpu", torch.int64)
    if qsl.numel() and (int(qsl[0]) < 0 or bool((qsl[1:] < qsl[:-1]).any()) or int(qsl[-1]) > total_tokens):
        raise ValueError(f"query_start_loc={qsl.tolist()}: expected non-decreasing offsets in "
                         f"[0, {total_tokens}] (x has {total_tokens} tokens)")


def check_fn_values(query_start_loc: torch.Tensor, cache_indices: Optional[torch.Tensor],
                    conv_states: Optional[torch.Tensor], total_tokens: int, pad_slot_id: int) -> None:
    """Every value rule of ``causal_conv1d_fn`` (host reads): offsets, slot range, no slot
    shared by two non-empty sequences."""
    check_query_start_loc_values(query_start_loc, total_tokens)
    if conv_states is not None and cache_indices is not None:
        lens = (query_start_loc[1:] - query_start_loc[:-1]).to(cache_indices.device) > 0
        check_slot_values(cache_indices, "cache_indices", conv_states.shape[0], pad_slot_id, lens)


def check_update_inputs(x, conv_state, weight, bias, conv_state_indices) -> int:
    _need(isinstance(x, torch.Tensor) and x.dim() in (2, 3),
          f"x has shape {tuple(getattr(x, 'shape', ()))}: expected (batch, dim) or (batch, dim, seqlen)")
    _need(x.is_floating_point(), f"x has dtype {x.dtype}: expected a floating dtype")
    batch, dim = x.shape[0], x.shape[1]
    width = check_weight(weight, bias, dim)
    check_conv_states(conv_state, "conv_state", dim, width)
    _need(conv_state is not None, "conv_state is None: expected (slots, dim, state_len)")
    _check_index_vector(conv_state_indices, "conv_state_indices", batch)
    if conv_state_indices is None:
        _need(conv_state.shape[0] >= batch,
              f"conv_state has {conv_state.shape[0]} slots: expected >= batch ({batch}) "
              "when conv_state_indices is None")
    return width


# --------------------------------------------------------------------------- math


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def scatter_states(conv_states: torch.Tensor, slots: torch.Tensor, new: torch.Tensor,
                   write: torch.Tensor, state_len: int) -> None:
    """``conv_states[slots[i], :, :state_len] = new[i]`` for the rows where ``write`` holds,
    with fixed shapes and no host sync (graph-capture safe: no ``nonzero``, no ``.item()``).

    Rows that must not write are sent to the slot of the first writing row with that row's
    value (an identical duplicate write); when no row writes, every row rewrites slot 0 with
    its own current content, bit for bit.  Either way no slot changes except those of
    writing rows."""
    batch = slots.shape[0]
    if batch == 0 or conv_states.shape[0] == 0:
        return
    new = new.to(conv_states.dtype)
    # (0-d tensor indices would be read on the host: index_select with 1-element indices only)
    first = torch.argmax(write.to(torch.int32)).reshape(1)      # first writing row (0 if none)
    any_write = write.any().reshape(1)
    first_slot = torch.where(any_write, slots.index_select(0, first), torch.zeros_like(first, dtype=slots.dtype))
    current = conv_states.index_select(0, first_slot.to(torch.int64))[:, :, :state_len]   # pool dtype
    fill = torch.where(any_write[:, None, None], new.index_select(0, first), current)
    target = torch.where(write, slots, first_slot)
    value = torch.where(write[:, None, None], new, fill)
    conv_states[target, :, :state_len] = value


def causal_conv1d_fn_torch(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    query_start_loc: Optional[torch.Tensor] = None,
    cache_indices: Optional[torch.Tensor] = None,
    has_initial_state: Optional[torch.Tensor] = None,
    conv_states: Optional[torch.Tensor] = None,
    activation=None,
    pad_slot_id: int = PAD_SLOT_ID,
    check_values: bool = True,
) -> torch.Tensor:
    """Varlen prefill: ``x [dim, T]`` -> ``out [dim, T]``; ``conv_states`` updated in place.

    ``check_values`` reads offsets and slot indices on the host (a sync) and raises
    ``ValueError`` before anything is written; the plugin's ladder checks once before it
    picks a rung and calls this with ``check_values=False``."""
    width = check_fn_inputs(x, weight, bias, query_start_loc, cache_indices,
                            has_initial_state, conv_states)
    silu = activation_is_silu(activation)
    dim, total = x.shape
    if conv_states is not None and cache_indices is None:
        _need(conv_states.shape[0] >= query_start_loc.shape[0] - 1,
              f"conv_states has {conv_states.shape[0]} slots: expected >= batch "
              f"({query_start_loc.shape[0] - 1}) when cache_indices is None")
    if check_values:
        check_fn_values(query_start_loc, cache_indices, conv_states, total, pad_slot_id)

    s = width - 1
    batch = query_start_loc.shape[0] - 1
    dev = x.device
    cd = _compute_dtype(x.dtype)
    qsl = query_start_loc.to(device=dev, dtype=torch.int64)
    xc = x.to(cd)
    w = weight.to(device=dev, dtype=cd)
    slots = (cache_indices.to(device=dev, dtype=torch.int64) if cache_indices is not None
             else torch.arange(batch, device=dev))
    valid = slots != pad_slot_id

    # Segments: [0, qsl[0]) (normally empty), the batch's sequences, [qsl[-1], T).
    # Every segment starts from its own s state columns ("virtual" history):
    # the cached state where has_initial_state says so, else zeros.
    starts = torch.cat([qsl.new_zeros(1), qsl])                        # [batch + 2]
    ends = torch.cat([qsl, qsl.new_full((1,), total)])                  # [batch + 2]
    lens = ends - starts
    init = torch.zeros(batch + 2, dim, s, dtype=cd, device=dev)
    if conv_states is not None and has_initial_state is not None and batch > 0:
        safe = torch.where(valid, slots, torch.zeros_like(slots))
        use = (has_initial_state.to(dev).bool() & valid)[:, None, None]
        cached = conv_states.index_select(0, safe.to(conv_states.device))[:, :, :s].to(device=dev, dtype=cd)
        init[1:batch + 1] = torch.where(use, cached, torch.zeros((), dtype=cd, device=dev))
    init_cols = init.permute(1, 0, 2).reshape(dim, (batch + 2) * s)    # column seg * s + j

    # out[:, t] = b + w[:, s] x[:, t] + sum_k w[:, s - k] x[:, t - k]: one in-place shifted
    # multiply-add per tap over the whole packed batch, then a small correction at the
    # first k tokens of every segment, which must read the segment's history instead of
    # the previous segment's last tokens.
    if bias is not None:
        out = torch.addcmul(bias.to(device=dev, dtype=cd)[:, None], xc, w[:, s:s + 1])
    else:
        out = xc * w[:, s:s + 1]
    for k in range(1, min(s, total - 1) + 1):
        out[:, k:].addcmul_(xc[:, :total - k], w[:, s - k:s - k + 1])
    # Correction entries for every (segment, tap k, position r < k): token starts + r
    # reads history column s - k + r of its segment, not x[:, starts + r - k].
    r = torch.arange(s, device=dev)
    seg_ids = torch.arange(batch + 2, device=dev)
    kk = torch.arange(1, s + 1, device=dev)
    grid_r = r[None, None, :].expand(batch + 2, s, s)                   # [seg, k - 1, r]
    keep = (grid_r < kk[None, :, None]) & (grid_r < lens[:, None, None])
    t_pos = (starts[:, None, None] + grid_r)[keep]
    k_of = kk[None, :, None].expand_as(grid_r)[keep]
    src = (seg_ids[:, None, None] * s + s - kk[None, :, None] + grid_r)[keep]
    if t_pos.numel():
        shifted = t_pos - k_of                     # what the in-place shift added (nothing if < 0)
        wrong = xc.index_select(1, shifted.clamp(min=0)) * (shifted >= 0).to(cd)
        wk = w.index_select(1, s - k_of)
        out.index_add_(1, t_pos, (init_cols.index_select(1, src) - wrong) * wk)
    if silu:
        out = F.silu(out)

    if conv_states is not None and batch > 0 and total > 0:   # T == 0: no sequence has a token
        # New state of sequence b: the last s columns of [history_b, x_b].
        virt = lens[1:batch + 1, None] + r[None, :]                       # index into [history, x]
        from_hist = virt < s
        x_col = (starts[1:batch + 1, None] + virt - s).clamp(min=0)
        hist_col = (seg_ids[1:batch + 1, None] * s + virt).clamp(max=(batch + 2) * s - 1)
        new = torch.where(from_hist[None], init_cols.index_select(1, hist_col.reshape(-1)).view(dim, batch, s),
                          xc.index_select(1, x_col.reshape(-1)).view(dim, batch, s))
        scatter_states(conv_states, slots.to(conv_states.device), new.permute(1, 0, 2).to(conv_states.device),
                       (valid & (lens[1:batch + 1] > 0)).to(conv_states.device), s)
    return out.to(x.dtype)


def causal_conv1d_update_torch(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    activation=None,
    conv_state_indices: Optional[torch.Tensor] = None,
    pad_slot_id: int = PAD_SLOT_ID,
    check_values: bool = True,
) -> torch.Tensor:
    """Decode step: ``x [B, dim]`` or ``[B, dim, L]``; ``conv_state`` updated in place.

    With ``check_values=False`` this is graph-capture safe: no host sync, no value-dependent
    shapes (states are written by :func:`scatter_states`)."""
    width = check_update_inputs(x, conv_state, weight, bias, conv_state_indices)
    silu = activation_is_silu(activation)
    if check_values:
        check_slot_values(conv_state_indices, "conv_state_indices", conv_state.shape[0], pad_slot_id)

    squeeze = x.dim() == 2
    x3 = x.unsqueeze(-1) if squeeze else x
    batch, dim, _ = x3.shape
    s = width - 1
    dev = x.device
    cd = _compute_dtype(x.dtype)
    slots = (conv_state_indices.to(device=dev, dtype=torch.int64)
             if conv_state_indices is not None else torch.arange(batch, device=dev))
    valid = slots != pad_slot_id
    safe = torch.where(valid, slots, torch.zeros_like(slots))
    state = conv_state.index_select(0, safe.to(conv_state.device))[:, :, :s].to(device=dev, dtype=cd)
    full = torch.cat([state, x3.to(cd)], dim=-1)  # [B, dim, s + L]
    w = weight.to(device=dev, dtype=cd).unsqueeze(1)
    b = bias.to(device=dev, dtype=cd) if bias is not None else None
    out = F.conv1d(full, w, b, groups=dim)
    if silu:
        out = F.silu(out)
    if x3.shape[-1] > 0:   # a zero-token step leaves every state as it is
        scatter_states(conv_state, slots.to(conv_state.device), full[:, :, -s:].to(conv_state.device),
                       valid.to(conv_state.device), s)
    out = out.to(x.dtype)
    return out.squeeze(-1) if squeeze else out
