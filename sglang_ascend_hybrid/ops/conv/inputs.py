"""Input validation of the short-conv ops (SGLang's ``causal_conv1d_fn`` / ``causal_conv1d_update``
contract): shape, dtype and layout checks never read tensor values (no host sync); the value
checks (offsets, slot ranges, duplicate slots) read them on the host and are skipped on the
serving decode path.  Every check raises ``ValueError`` naming the argument, the value and what
was expected, before anything is written."""

from __future__ import annotations

from typing import Optional

import torch

from sglang_ascend_hybrid.ops.index_dtype import INDEX_DTYPES

PAD_SLOT_ID = -1


def activation_is_silu(activation) -> bool:
    """``None`` / False -> identity, ``"silu"`` / ``"swish"`` / True -> SiLU."""
    if activation is None or activation is False:
        return False
    if activation is True or activation in ("silu", "swish"):
        return True
    raise ValueError(f"activation={activation!r}: expected None, 'silu' or 'swish'")


def need(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


def _check_index_vector(t, name: str, length: int, dtypes=INDEX_DTYPES) -> None:
    if t is None:
        return
    need(isinstance(t, torch.Tensor), f"{name}={type(t).__name__}: expected a tensor")
    need(t.dim() == 1 and t.shape[0] == length,
          f"{name} has shape {tuple(t.shape)}: expected ({length},)")
    need(t.dtype in dtypes, f"{name} has dtype {t.dtype}: expected one of {list(dtypes)}")


def check_weight(weight, bias, dim: int) -> int:
    """Validate ``weight [dim, width]`` / ``bias [dim]``; return the width."""
    need(isinstance(weight, torch.Tensor) and weight.dim() == 2,
          f"weight has shape {tuple(getattr(weight, 'shape', ()))}: expected (dim={dim}, width)")
    need(weight.shape[0] == dim,
          f"weight has shape {tuple(weight.shape)}: expected first dim == x channels ({dim})")
    need(weight.shape[1] >= 2, f"weight has width {weight.shape[1]}: expected width >= 2")
    need(weight.is_floating_point(), f"weight has dtype {weight.dtype}: expected a floating dtype")
    if bias is not None:
        need(bias.dim() == 1 and bias.shape[0] == dim,
              f"bias has shape {tuple(bias.shape)}: expected ({dim},)")
    return int(weight.shape[1])


def check_conv_states(conv_states, name: str, dim: int, width: int) -> None:
    if conv_states is None:
        return
    need(isinstance(conv_states, torch.Tensor) and conv_states.dim() == 3,
          f"{name} has shape {tuple(getattr(conv_states, 'shape', ()))}: "
          f"expected (slots, dim={dim}, state_len>={width - 1})")
    need(conv_states.shape[1] == dim and conv_states.shape[2] >= width - 1,
          f"{name} has shape {tuple(conv_states.shape)}: expected (slots, {dim}, >= {width - 1})")
    need(conv_states.is_floating_point(),
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


def check_fn_inputs(x, weight, bias, query_start_loc, cache_indices, has_initial_state,
                    conv_states) -> int:
    """Shape / dtype checks of ``causal_conv1d_fn`` (no host sync); returns the width."""
    need(isinstance(x, torch.Tensor) and x.dim() == 2,
          f"x has shape {tuple(getattr(x, 'shape', ()))}: expected (dim, total_tokens)")
    need(x.is_floating_point(), f"x has dtype {x.dtype}: expected a floating dtype")
    dim = x.shape[0]
    width = check_weight(weight, bias, dim)
    need(query_start_loc is not None and query_start_loc.dim() == 1 and query_start_loc.shape[0] >= 1,
          f"query_start_loc has shape {tuple(getattr(query_start_loc, 'shape', ()))}: expected (batch + 1,)")
    need(query_start_loc.dtype in INDEX_DTYPES,
          f"query_start_loc has dtype {query_start_loc.dtype}: expected an integer dtype")
    batch = query_start_loc.shape[0] - 1
    _check_index_vector(cache_indices, "cache_indices", batch)
    _check_index_vector(has_initial_state, "has_initial_state", batch, INDEX_DTYPES + (torch.bool,))
    check_conv_states(conv_states, "conv_states", dim, width)
    if has_initial_state is not None:
        need(conv_states is not None, "has_initial_state is given but conv_states is None: "
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
    need(isinstance(x, torch.Tensor) and x.dim() in (2, 3),
          f"x has shape {tuple(getattr(x, 'shape', ()))}: expected (batch, dim) or (batch, dim, seqlen)")
    need(x.is_floating_point(), f"x has dtype {x.dtype}: expected a floating dtype")
    batch, dim = x.shape[0], x.shape[1]
    width = check_weight(weight, bias, dim)
    check_conv_states(conv_state, "conv_state", dim, width)
    need(conv_state is not None, "conv_state is None: expected (slots, dim, state_len)")
    _check_index_vector(conv_state_indices, "conv_state_indices", batch)
    if conv_state_indices is None:
        need(conv_state.shape[0] >= batch,
              f"conv_state has {conv_state.shape[0]} slots: expected >= batch ({batch}) "
              "when conv_state_indices is None")
    return width


def check_verify_inputs(x, conv_window, weight, bias, cache_indices, draft_token_num) -> int:
    """Shapes / dtypes of :func:`sglang_ascend_hybrid.ops.conv.api.causal_conv1d_verify` (no host
    read of tensor values); returns the filter width."""
    need(isinstance(draft_token_num, int) and not isinstance(draft_token_num, bool) and draft_token_num >= 1,
         f"draft_token_num={draft_token_num!r}: expected an int >= 1")
    need(isinstance(x, torch.Tensor) and x.dim() == 2,
         f"x has shape {tuple(getattr(x, 'shape', ()))}: expected (batch * draft_token_num, dim)")
    need(x.is_floating_point(), f"x has dtype {x.dtype}: expected a floating dtype")
    need(isinstance(cache_indices, torch.Tensor) and cache_indices.dim() == 1,
         f"cache_indices has shape {tuple(getattr(cache_indices, 'shape', ()))}: expected (batch,)")
    _check_index_vector(cache_indices, "cache_indices", cache_indices.shape[0])
    batch, dim = cache_indices.shape[0], x.shape[1]
    need(x.shape[0] == batch * draft_token_num,
         f"x has {x.shape[0]} tokens: expected batch ({batch}) * draft_token_num ({draft_token_num})")
    width = check_weight(weight, bias, dim)
    rows = (width - 1) + (draft_token_num - 1)
    need(isinstance(conv_window, torch.Tensor) and conv_window.dim() == 3
         and tuple(conv_window.shape[1:]) == (rows, dim),
         f"conv_window has shape {tuple(getattr(conv_window, 'shape', ()))}: expected (slots, {rows}, {dim}) "
         f"(window major, (W-1) + (draft_token_num-1) rows)")
    need(conv_window.is_floating_point(), f"conv_window has dtype {conv_window.dtype}: expected a floating dtype")
    return width
