"""Vectorised pure-torch causal conv1d with SGLang's conv-state contract.

This is the CPU path and the last rung of the conv ladders in
:mod:`sglang_ascend_hybrid.ops.conv.dispatch`.  Semantics are those of
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

Prefill convolves the packed tokens as one stream, one block of channels at a time
(``W`` shifted multiply-adds that stay in cache), then overwrites the first ``W-1`` outputs
of every sequence, which must read the sequence's history instead of the previous
sequence's tokens, with values computed from small gathered windows; no Python loop over
tokens or sequences.  Decode works on the pool's rows in the window-major layout with fixed
shapes and no host sync (graph-capture safe).  Fp16 / bf16 accumulate in fp32 (as the
kernels do) and are rounded once, but only a channel block (prefill) or the small decode
window is ever widened: never the whole input or output.  Both are inference ops (no
autograd), like the kernels they stand in for.

Input checks (:mod:`~sglang_ascend_hybrid.ops.conv.inputs`) raise ``ValueError`` naming the
argument, the value and what was expected, before anything is written.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from sglang_ascend_hybrid.ops import cpu_workspace
from sglang_ascend_hybrid.ops.conv.inputs import (
    PAD_SLOT_ID,
    activation_is_silu,
    check_fn_inputs,
    check_fn_values,
    check_slot_values,
    check_update_inputs,
    need,
)
from sglang_ascend_hybrid.ops.row_copy import index_copy_rows_

# --------------------------------------------------------------------------- math


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


# Channels per block of the prefill stream: a block's x, its fp32 copy and its accumulator
# (block * tokens elements each) should stay in the core's cache between the W passes.
_BLOCK_ELEMS = 1 << 20


def _stream_taps(out: torch.Tensor, x: torch.Tensor, w: torch.Tensor, bias: Optional[torch.Tensor]) -> None:
    """``out[:, t] = bias + sum_k w[:, k] x[:, t - (W-1) + k]`` over ``x [C, T]`` as ONE sequence
    with zero history: ``W`` shifted multiply-adds (the ``width - 1`` first columns only see
    the taps that stay inside ``x``).  ``out``, ``x``, ``w`` and ``bias`` share one dtype."""
    s, total = w.shape[1] - 1, x.shape[1]
    torch.mul(x, w[:, s:s + 1], out=out)
    if bias is not None:     # (a separate add: addcmul with a broadcast bias is ~5x slower)
        out.add_(bias[:, None])
    for k in range(1, min(s, total - 1) + 1):
        out[:, k:].addcmul_(x[:, :total - k], w[:, s - k:s - k + 1])


def _window_taps(window: torch.Tensor, w: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    """``window [C, 2(W-1), n]`` (rows: W-1 history columns, then W-1 tokens, of n segments) ->
    the outputs of those tokens ``[C, W-1, n]``, in :func:`_stream_taps`' order of operations."""
    s = w.shape[1] - 1
    tap = w[:, :, None, None]                                       # [C, W, 1, 1]
    out = window[:, s:] * tap[:, s]
    if bias is not None:
        out.add_(bias[:, None, None])
    for k in range(1, s + 1):
        out.addcmul_(window[:, s - k:2 * s - k], tap[:, s - k])
    return out


@torch.no_grad()   # an inference op, like the kernels it stands in for
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
    picks a rung and calls this with ``check_values=False``.

    How: the packed tokens are convolved as one stream (:func:`_stream_taps`), one block of
    channels at a time, so that the ``W`` passes run in cache and fp16 / bf16 is widened to
    fp32 a block at a time (never the whole tensor) and rounded once.  The stream is right
    except at the first ``W-1`` tokens of every segment, which read the previous segment's
    tokens instead of their own history.  While a block is in cache, the ``W-1`` tokens on
    either side of every segment start are gathered: the ones after it, with the segment's
    history, give those first outputs (:func:`_window_taps`, written over the stream's);
    the ones before it are the last ``W-1`` tokens of the previous segment, i.e. its new
    state (left-filled from its history when it is shorter).  The states are written with
    one ``index_copy_`` for the sequences that have a slot and a token."""
    op = "causal_conv1d_fn_torch"
    width = check_fn_inputs(x, weight, bias, query_start_loc, cache_indices, has_initial_state, conv_states, op)
    silu = activation_is_silu(activation, op)
    dim, total = x.shape
    if conv_states is not None and cache_indices is None:
        need(conv_states.shape[0] >= query_start_loc.shape[0] - 1, op, "conv_states", conv_states,
             f"at least batch ({query_start_loc.shape[0] - 1}) slots when cache_indices is None")
    if check_values:
        check_fn_values(query_start_loc, cache_indices, conv_states, total, pad_slot_id, op)
    if total == 0:   # no token: nothing to compute, every sequence is empty, no state changes
        return torch.empty_like(x)

    s = width - 1
    batch = query_start_loc.shape[0] - 1
    dev = x.device
    cd = _compute_dtype(x.dtype)
    qsl = query_start_loc.to(device=dev, dtype=torch.int64)
    w = weight.to(device=dev, dtype=cd)
    b = bias.to(device=dev, dtype=cd) if bias is not None else None
    slots = (cache_indices.to(device=dev, dtype=torch.int64) if cache_indices is not None
             else torch.arange(batch, device=dev))
    valid = slots != pad_slot_id

    # Segments: [0, qsl[0]) (normally empty), the batch's sequences, [qsl[-1], T).
    nseg = batch + 2
    starts = torch.cat([qsl.new_zeros(1), qsl])                        # [nseg]
    lens = torch.cat([qsl, qsl.new_full((1,), total)]) - starts
    r = torch.arange(s, device=dev)
    # The data-dependent index sets (host reads; a prefill is never graph-captured):
    # head columns (token start + r of a segment, r < min(W-1, len)), sequences that get a
    # new state (a real slot and at least one token), sequences that resume a cached state.
    heads_at = (r[:, None] < lens[None, :]).reshape(-1).nonzero().squeeze(1)   # into [W-1, nseg]
    head_cols = (starts[None, :] + r[:, None]).reshape(-1).index_select(0, heads_at)
    writers = resumed = slots.new_empty(0)
    if conv_states is not None:
        writers = (valid & (lens[1:batch + 1] > 0)).nonzero().squeeze(1)
        if has_initial_state is not None:
            resumed = (valid & has_initial_state.to(dev).bool()).nonzero().squeeze(1)

    # History of every segment, [dim, W-1, nseg]: the cached state where resumed, else zeros.
    # (hist, new and the per-block fp32 buffers never leave the call: kept per thread on CPU)
    hist = cpu_workspace.kept("conv.hist", (dim, s, nseg), cd, dev).zero_()
    if resumed.numel():
        cached = conv_states[:, :, :s].index_select(0, slots.index_select(0, resumed).to(conv_states.device))
        hist.index_copy_(2, resumed + 1, cached.to(device=dev, dtype=cd).permute(1, 2, 0))

    # Per block, one gather builds a window of 3(W-1) rows per segment: the W-1 tokens
    # before its start, its history (gathered as placeholders, then overwritten), its first
    # W-1 tokens.  Rows [W-1, 3(W-1)) give the head outputs; the new state of sequence i
    # (segment g = i + 1) is column len + j of [history, tokens]: history row len + j while
    # that is < W-1, else token end - (W-1) + j, i.e. row j of window g + 1.
    offsets = torch.cat([r - s, r, r])                                  # [3(W-1)]
    around = (starts[None, :] + offsets[:, None]).clamp(0, total - 1).reshape(-1)
    g = writers[:, None] + 1
    virt = lens.index_select(0, writers.reshape(-1) + 1)[:, None] + r
    state_at = torch.where(virt < s, (s + virt) * nseg + g, r * nseg + g + 1).reshape(-1)
    new = cpu_workspace.kept("conv.new", (dim, writers.numel() * s), cd, dev)  # [dim, writer, W-1]

    out = torch.empty(dim, total, dtype=x.dtype, device=dev)
    step = max(1, min(dim, _BLOCK_ELEMS // total))
    widened = None if x.dtype == cd else cpu_workspace.kept("conv.widened", (step, total), cd, dev)
    acc = None if x.dtype == cd else cpu_workspace.kept("conv.acc", (step, total), cd, dev)
    for c0 in range(0, dim, step):
        c1 = min(c0 + step, dim)
        wb, bb = w[c0:c1], (b[c0:c1] if b is not None else None)
        xb = x[c0:c1] if widened is None else widened[:c1 - c0].copy_(x[c0:c1])
        ob = out[c0:c1] if acc is None else acc[:c1 - c0]
        _stream_taps(ob, xb, wb, bb)
        windows = xb.index_select(1, around).view(c1 - c0, 3 * s, nseg)
        windows[:, s:2 * s] = hist[c0:c1]
        heads = _window_taps(windows[:, s:], wb, bb).view(c1 - c0, s * nseg)
        ob.scatter_(1, head_cols.expand(c1 - c0, -1), heads.index_select(1, heads_at))
        if silu:
            F.silu(ob, inplace=True)
        if acc is not None:
            out[c0:c1].copy_(ob)                                        # the one rounding
        if writers.numel():
            torch.index_select(windows.view(c1 - c0, -1), 1, state_at, out=new[c0:c1])

    if writers.numel():
        target = slots.index_select(0, writers).to(conv_states.device)
        value = new.view(dim, writers.numel(), s).permute(1, 0, 2)
        conv_states[:, :, :s].index_copy_(0, target, value.to(device=conv_states.device,
                                                              dtype=conv_states.dtype))
    return out


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
    shapes, no Python decision on tensor values.

    How: the work happens in the window-major layout ``[slots, W-1, dim]`` (the NPU pool's
    own, so gathers and writes move whole rows): one gather of the batch's states, one window
    ``[B, W-1+L, dim]`` (the state rows, then the tokens) in the pool's dtype, ``W``
    multiply-adds over its rows by the fp32 weights (fp32 arithmetic and accumulation for
    fp16 / bf16, without an fp32 copy of the window), and the rolled state (window rows
    ``L .. L+W-2``) written back with one row copy (:func:`~sglang_ascend_hybrid.ops.row_copy.
    index_copy_rows_`).  Pad rows read and write the slot of the first real row with that
    row's values (an identical duplicate write); with no real row at all, every row rewrites
    that slot with its own old state (the roll's shift is then 0)."""
    op = "causal_conv1d_update_torch"
    width = check_update_inputs(x, conv_state, weight, bias, conv_state_indices, op)
    silu = activation_is_silu(activation, op)
    if check_values:
        check_slot_values(conv_state_indices, "conv_state_indices", conv_state.shape[0], pad_slot_id, op=op)
    return update_rows_torch(x, conv_state, weight, bias, silu, conv_state_indices, pad_slot_id, width)


def pad_redirect(slots: torch.Tensor, pad_slot_id: int, batch: int):
    """Graph-safe pad handling shared by decode and verify: ``(rows, gather, any_valid)`` where pad
    rows read and write the slot of the first real row with that row's values (an identical
    duplicate write); with no real row at all every row keeps its own slot (the caller then writes
    the old state back)."""
    valid = slots != pad_slot_id
    first = torch.argmax(valid.to(torch.int32)).reshape(1)             # first real row (0 if none)
    any_valid = valid.any().reshape(1)
    first_slot = torch.where(any_valid, slots.index_select(0, first), torch.zeros_like(first))
    rows = torch.where(valid, torch.arange(batch, device=slots.device), first)
    gather = torch.where(valid, slots, first_slot)
    return rows, gather, any_valid


def _taps(window: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], silu: bool,
          length: int, cd: torch.dtype) -> torch.Tensor:
    """Outputs ``[B, length, dim]`` (compute dtype) of a window ``[B, W-1+length, dim]``: output t is
    bias + sum_k w[:, k] row(t + k).  fp16 / bf16 rows times fp32 weights: PyTorch computes in fp32
    (exactly as widening first) and accumulates in fp32, without an fp32 copy of the window."""
    s = weight.shape[1] - 1
    wt = weight.t().contiguous().to(device=window.device, dtype=cd)    # [W, dim]
    out = window[:, s:] * wt[s]                                        # fp32 for fp16 / bf16
    if bias is not None:
        out.add_(bias.to(device=window.device, dtype=cd))
    for k in range(s):
        out.addcmul_(window[:, k:k + length], wt[k])
    if silu:
        F.silu(out, inplace=True)
    return out


def _window(state: torch.Tensor, tokens: torch.Tensor, cd: torch.dtype) -> torch.Tensor:
    """``[state rows, token rows]`` in the pool's dtype (with x and pool of different dtypes, in
    the compute dtype: exact for both)."""
    if state.dtype == tokens.dtype:
        return torch.cat([state, tokens], 1)
    return torch.cat([state.to(cd), tokens.to(cd)], 1)


@torch.no_grad()   # an inference op, like the kernels it stands in for
def update_rows_torch(x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor,
                      bias: Optional[torch.Tensor], silu: bool, conv_state_indices: Optional[torch.Tensor],
                      pad_slot_id: int, width: int) -> torch.Tensor:
    """:func:`causal_conv1d_update_torch` after its checks (inputs already validated by the
    caller, ``width`` the filter width, ``silu`` the resolved activation)."""
    x3 = x.unsqueeze(-1) if x.dim() == 2 else x
    batch, dim, length = x3.shape
    s = width - 1
    dev = x.device
    cd = _compute_dtype(x.dtype)
    if batch == 0 or length == 0 or conv_state.shape[0] == 0:
        return torch.empty_like(x)     # no token: nothing to compute, every state stays
    pool = conv_state.transpose(1, 2)[:, :s]                           # [slots, W-1, dim] view
    slots = (conv_state_indices.to(device=pool.device, dtype=torch.int64)
             if conv_state_indices is not None else torch.arange(batch, device=pool.device))
    rows, gather, any_valid = pad_redirect(slots, pad_slot_id, batch)

    state = pool.index_select(0, gather).to(dev)                       # [B, W-1, dim], pool dtype
    tokens = x3.index_select(0, rows.to(dev)).transpose(1, 2)          # [B, L, dim]
    window = _window(state, tokens, cd)                                # state rows, then tokens
    out = _taps(window, weight, bias, silu, length, cd)

    # Roll: the new state is window rows [L, L + W-1); with no real row in the batch the shift is
    # 0 and the old state is written back.
    shift = torch.arange(s, device=dev) + length * any_valid.to(dev)
    index_copy_rows_(pool, gather, window.index_select(1, shift).to(device=pool.device, dtype=pool.dtype))
    out = out.to(x.dtype).transpose(1, 2)                              # [B, dim, L]
    return out[..., 0] if x.dim() == 2 else out.contiguous()


@torch.no_grad()
def verify_rows_torch(x: torch.Tensor, conv_window: torch.Tensor, weight: torch.Tensor,
                      bias: Optional[torch.Tensor], silu: bool, cache_indices: torch.Tensor,
                      pad_slot_id: int, draft_token_num: int) -> torch.Tensor:
    """Speculative verify over a window-major draft pool (inputs already validated by the caller,
    :func:`sglang_ascend_hybrid.ops.conv.api.causal_conv1d_verify` states the contract).

    ``x [B * d, dim]`` token major, ``conv_window [slots, R, dim]`` with ``R = (W-1) + (d-1)``: the
    request's state is its last ``W-1`` rows; afterwards the slot holds the last ``R`` rows of
    ``[state, tokens]``, so that SGLang's ``conv_state_rollback`` by ``(d-1) - accepted_step`` rows
    leaves the state after the accepted token in the last ``W-1`` rows.  Graph-capture safe: no host
    sync, fixed shapes, pad rows as in :func:`update_rows_torch`."""
    d = int(draft_token_num)
    batch = cache_indices.shape[0]
    dim = x.shape[1]
    s = weight.shape[1] - 1
    cd = _compute_dtype(x.dtype)
    if batch == 0 or conv_window.shape[0] == 0:
        return torch.empty_like(x)
    slots = cache_indices.to(torch.int64)                              # one device: x's, the pool's
    rows, gather, any_valid = pad_redirect(slots, pad_slot_id, batch)
    old = conv_window.index_select(0, gather)                          # [B, R, dim], pool dtype
    tokens = x.reshape(batch, d, dim).index_select(0, rows)            # [B, d, dim]
    window = _window(old[:, old.shape[1] - s:], tokens, cd)            # [B, W-1+d, dim]
    out = _taps(window, weight, bias, silu, d, cd)
    # the new window is rows [1, W-1+d) of the stream; with no real row the old one is written back
    new = torch.where(any_valid.reshape(1, 1, 1), window[:, 1:].to(old.dtype), old)
    index_copy_rows_(conv_window, gather, new)
    return out.to(x.dtype).reshape(batch * d, dim)
