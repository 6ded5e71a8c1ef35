"""Input validation of the short-conv ops (SGLang's ``causal_conv1d_fn`` / ``causal_conv1d_update``
contract): shape, dtype and layout checks never read tensor values (no host sync); the value
checks (offsets, slot ranges, duplicate slots) read them on the host and are skipped on the
serving decode path.  Every check raises :func:`~sglang_ascend_hybrid.ops.errors.bad_input` (``ValueError``,
``"<op>: <argument>=<value>: expected <what>"``, the op being the public function called) before
anything is written."""

from __future__ import annotations

from typing import Optional

import torch

from sglang_ascend_hybrid.ops.errors import bad_input
from sglang_ascend_hybrid.ops.index_dtype import INDEX_DTYPES, INDEX_EXPECTED, check_index_dtype

PAD_SLOT_ID = -1
FN, UPDATE, VERIFY = "causal_conv1d_fn", "causal_conv1d_update", "causal_conv1d_verify"
FLOAT = "a floating-point dtype"


def activation_is_silu(activation, op: str = "") -> bool:
    """``None`` / False -> identity, ``"silu"`` / ``"swish"`` / True -> SiLU."""
    if activation is None or activation is False:
        return False
    if activation is True or activation in ("silu", "swish"):
        return True
    raise bad_input("activation", repr(activation), "None, 'silu' or 'swish'", op=op)


def need(cond: bool, op: str, name: str, value, expected: str) -> None:
    """:func:`bad_input` unless ``cond`` (``value`` as given to it: pass tensors, not their shapes)."""
    if not cond:
        raise bad_input(name, value, expected, op=op)


def _check_index_vector(t, name: str, length: int, op: str, allow_bool: bool = False) -> None:
    if t is None:
        return
    need(isinstance(t, torch.Tensor) and t.dim() == 1 and t.shape[0] == length, op, name, t,
         f"a tensor of shape ({length},)")
    if allow_bool:
        need(t.dtype in INDEX_DTYPES + (torch.bool,), op, f"{name}.dtype", t.dtype, f"{INDEX_EXPECTED} or bool")
    else:
        check_index_dtype(name, t, op=op)


def check_weight(weight, bias, dim: int, op: str) -> int:
    """Validate ``weight [dim, width]`` / ``bias [dim]``; return the width."""
    need(isinstance(weight, torch.Tensor) and weight.dim() == 2 and weight.shape[0] == dim, op, "weight", weight,
         f"shape ({dim}, width): one filter per channel of x")
    need(weight.shape[1] >= 2, op, "weight", weight, f"a filter width >= 2 (shape ({dim}, width))")
    need(weight.is_floating_point(), op, "weight.dtype", weight.dtype, FLOAT)
    if bias is not None:
        need(isinstance(bias, torch.Tensor) and bias.dim() == 1 and bias.shape[0] == dim, op, "bias", bias,
             f"shape ({dim},)")
    return int(weight.shape[1])


def check_conv_states(conv_states, name: str, dim: int, width: int, op: str) -> None:
    if conv_states is None:
        return
    need(isinstance(conv_states, torch.Tensor) and conv_states.dim() == 3 and conv_states.shape[1] == dim
         and conv_states.shape[2] >= width - 1, op, name, conv_states,
         f"shape (slots, dim={dim}, state_len>={width - 1})")
    need(conv_states.is_floating_point(), op, f"{name}.dtype", conv_states.dtype, FLOAT)


def check_slot_values(indices: Optional[torch.Tensor], name: str, num_slots: int, pad_slot_id: int,
                      active: Optional[torch.Tensor] = None, *, op: str) -> None:
    """Value check (reads the values on the host: never on the serving decode path): every
    index is ``pad_slot_id`` or in ``[0, num_slots)``, and no slot repeats among the rows that
    write a state (``active``: rows that would write, e.g. non-empty sequences)."""
    if indices is None or indices.numel() == 0:
        return
    idx = indices.detach().to("cpu", torch.int64)
    bad = (idx != pad_slot_id) & ((idx < 0) | (idx >= num_slots))
    if bool(bad.any()):
        raise bad_input(name, idx.tolist(), f"slots in [0, {num_slots}) or pad_slot_id ({pad_slot_id}); "
                        f"{int(idx[bad][0])} is neither", op=op)
    live = idx != pad_slot_id
    if active is not None:
        live = live & active.detach().to("cpu").bool()
    same = (idx[:, None] == idx[None, :]) & live[:, None] & live[None, :]
    same.fill_diagonal_(False)
    if bool(same.any()):
        raise bad_input(name, idx.tolist(), f"distinct slots (or pad_slot_id {pad_slot_id}); slot "
                        f"{int(idx[same.any(1)][0])} is given to more than one sequence of the batch", op=op)


def check_fn_inputs(x, weight, bias, query_start_loc, cache_indices, has_initial_state,
                    conv_states, op: str = FN) -> int:
    """Shape / dtype checks of ``causal_conv1d_fn`` (no host sync); returns the width."""
    need(isinstance(x, torch.Tensor) and x.dim() == 2, op, "x", x, "shape (dim, total_tokens)")
    need(x.is_floating_point(), op, "x.dtype", x.dtype, FLOAT)
    dim = x.shape[0]
    width = check_weight(weight, bias, dim, op)
    need(isinstance(query_start_loc, torch.Tensor) and query_start_loc.dim() == 1 and query_start_loc.shape[0] >= 1,
         op, "query_start_loc", query_start_loc, "a tensor of shape (batch + 1,)")
    check_index_dtype("query_start_loc", query_start_loc, op=op)
    batch = query_start_loc.shape[0] - 1
    _check_index_vector(cache_indices, "cache_indices", batch, op)
    _check_index_vector(has_initial_state, "has_initial_state", batch, op, allow_bool=True)
    check_conv_states(conv_states, "conv_states", dim, width, op)
    need(has_initial_state is None or conv_states is not None, op, "conv_states", None,
         "the states to read the initial states from (has_initial_state is given)")
    return width


def check_query_start_loc_values(query_start_loc: torch.Tensor, total_tokens: int, op: str) -> None:
    qsl = query_start_loc.detach().to("cpu", torch.int64)
    if qsl.numel() and (int(qsl[0]) < 0 or bool((qsl[1:] < qsl[:-1]).any()) or int(qsl[-1]) > total_tokens):
        raise bad_input("query_start_loc", qsl.tolist(), f"non-decreasing offsets in [0, {total_tokens}] "
                        f"(x has {total_tokens} tokens)", op=op)


def check_fn_values(query_start_loc: torch.Tensor, cache_indices: Optional[torch.Tensor],
                    conv_states: Optional[torch.Tensor], total_tokens: int, pad_slot_id: int, op: str = FN) -> None:
    """Every value rule of ``causal_conv1d_fn`` (host reads): offsets, slot range, no slot
    shared by two non-empty sequences."""
    check_query_start_loc_values(query_start_loc, total_tokens, op)
    if conv_states is not None and cache_indices is not None:
        lens = (query_start_loc[1:] - query_start_loc[:-1]).to(cache_indices.device) > 0
        check_slot_values(cache_indices, "cache_indices", conv_states.shape[0], pad_slot_id, lens, op=op)


def check_update_inputs(x, conv_state, weight, bias, conv_state_indices, op: str = UPDATE) -> int:
    need(isinstance(x, torch.Tensor) and x.dim() in (2, 3), op, "x", x, "shape (batch, dim) or (batch, dim, seqlen)")
    need(x.is_floating_point(), op, "x.dtype", x.dtype, FLOAT)
    batch, dim = x.shape[0], x.shape[1]
    width = check_weight(weight, bias, dim, op)
    check_conv_states(conv_state, "conv_state", dim, width, op)
    need(conv_state is not None, op, "conv_state", None, f"shape (slots, dim={dim}, state_len>={width - 1})")
    _check_index_vector(conv_state_indices, "conv_state_indices", batch, op)
    need(conv_state_indices is not None or conv_state.shape[0] >= batch, op, "conv_state", conv_state,
         f"at least batch ({batch}) slots when conv_state_indices is None")
    return width


def check_verify_inputs(x, conv_window, weight, bias, cache_indices, draft_token_num, op: str = VERIFY) -> int:
    """Shapes / dtypes of :func:`sglang_ascend_hybrid.ops.conv.api.causal_conv1d_verify` (no host
    read of tensor values); returns the filter width."""
    need(isinstance(draft_token_num, int) and not isinstance(draft_token_num, bool) and draft_token_num >= 1,
         op, "draft_token_num", repr(draft_token_num), "an int >= 1")
    need(isinstance(x, torch.Tensor) and x.dim() == 2, op, "x", x, "shape (batch * draft_token_num, dim)")
    need(x.is_floating_point(), op, "x.dtype", x.dtype, FLOAT)
    need(isinstance(cache_indices, torch.Tensor) and cache_indices.dim() == 1, op, "cache_indices", cache_indices,
         "a tensor of shape (batch,)")
    _check_index_vector(cache_indices, "cache_indices", cache_indices.shape[0], op)
    batch, dim = cache_indices.shape[0], x.shape[1]
    need(x.shape[0] == batch * draft_token_num, op, "x", x,
         f"batch ({batch}) * draft_token_num ({draft_token_num}) = {batch * draft_token_num} tokens")
    width = check_weight(weight, bias, dim, op)
    rows = (width - 1) + (draft_token_num - 1)
    need(isinstance(conv_window, torch.Tensor) and conv_window.dim() == 3
         and tuple(conv_window.shape[1:]) == (rows, dim), op, "conv_window", conv_window,
         f"shape (slots, {rows}, {dim}) (window major, (W-1) + (draft_token_num-1) rows)")
    need(conv_window.is_floating_point(), op, "conv_window.dtype", conv_window.dtype, FLOAT)
    return width
