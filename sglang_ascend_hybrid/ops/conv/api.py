"""Short-conv ``causal_conv1d_fn`` / ``causal_conv1d_update`` for Ascend.

Same signatures and semantics as
``sglang.srt.layers.attention.mamba.causal_conv1d`` (see
:mod:`~sglang_ascend_hybrid.ops.conv.torch_impl` for those semantics), plus a keyword
``check_values``.  Conv states may be any strided ``[slots, dim, state_len]`` tensor, in
particular the transposed view of a window-major NPU pool that
:mod:`sglang_ascend_hybrid.integration.conv_state_layout` hands to the model; the state is its
columns ``[0, W-1)``.

Kernels: :mod:`~sglang_ascend_hybrid.ops.conv.dispatch` (the ladders),
:mod:`~sglang_ascend_hybrid.ops.conv.contract` (the NPU ops' contracts),
:mod:`~sglang_ascend_hybrid.ops.conv.naive` (the fp64 oracle).

Inputs (the project's policy): shape, dtype and layout checks always (no sync); value checks
(offsets, slot ranges, duplicate slots) when ``check_values`` is true -- the default for a
direct call -- once, before any rung runs, identical for every rung, raising ``ValueError``
with the pool untouched.  The SGLang hooks pass ``check_values=ENV.DEBUG_CHECKS.get()``:
decode under graph capture never reads tensor values on the host.  Empty batches and
``T == 0`` return an empty result without calling any kernel.  ``SGLANG_ASCEND_HYBRID_CONV_BACKEND``
forces a rung.

The SGLang hooks that route LFM2's calls here live in
:mod:`sglang_ascend_hybrid.integration.conv_hooks`.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang_ascend_hybrid.ops.conv.dispatch import (
    FN_LADDER,
    UPDATE_LADDER,
    VERIFY_LADDER,
    FnCall,
    UpdateCall,
    VerifyCall,
    decide_call,
    run_decided,
)
from sglang_ascend_hybrid.ops.conv.inputs import (
    FN,
    PAD_SLOT_ID,
    UPDATE,
    VERIFY,
    activation_is_silu,
    check_fn_inputs,
    check_fn_values,
    check_slot_values,
    check_update_inputs,
    check_verify_inputs,
)
from sglang_ascend_hybrid.ops.errors import bad_input

# --------------------------------------------------------------------------- public ops


def _resolve_check(check_values: Optional[bool]) -> bool:
    return True if check_values is None else bool(check_values)


def causal_conv1d_fn(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    query_start_loc: Optional[torch.Tensor] = None,
    cache_indices: Optional[torch.Tensor] = None,
    has_initial_state: Optional[torch.Tensor] = None,
    conv_states: Optional[torch.Tensor] = None,
    activation: Optional[str] = "silu",
    pad_slot_id: int = PAD_SLOT_ID,
    *,
    check_values: Optional[bool] = None,
    **kwargs,
) -> torch.Tensor:
    """Varlen causal conv1d: ``x [dim, T]`` packed by ``query_start_loc`` (or
    ``[batch, dim, L]`` without it) -> same shape; ``conv_states`` updated in place.
    ``check_values`` (None: True) checks offsets and slot indices on the host first.
    ``seq_lens_cpu`` / ``validate_data`` keyword arguments are accepted and unused."""
    if kwargs.get("block_table") is not None:
        raise bad_input("block_table", kwargs["block_table"], "None (chunk block tables are not supported by "
                        "the Ascend short-conv path)", op=FN)
    unknown = set(kwargs) - {"seq_lens_cpu", "validate_data", "block_table"}
    if unknown:
        raise bad_input("**kwargs", sorted(unknown), "seq_lens_cpu / validate_data / block_table only", op=FN)
    batched = None
    if query_start_loc is None:
        if not isinstance(x, torch.Tensor) or x.dim() not in (2, 3):
            raise bad_input("x", x, "shape (dim, T) or (batch, dim, seqlen) when query_start_loc is None", op=FN)
        if x.dim() == 3:
            batched = x.shape
            b, d, length = x.shape
            x = x.transpose(0, 1).reshape(d, b * length)
            query_start_loc = torch.arange(b + 1, device=x.device, dtype=torch.int32) * length
        else:
            query_start_loc = torch.tensor([0, x.shape[1]], dtype=torch.int32, device=x.device)
    call = FnCall(x, weight, bias, query_start_loc, cache_indices, has_initial_state, conv_states, activation,
                  pad_slot_id)

    def check() -> bool:
        check_fn_inputs(x, weight, bias, query_start_loc, cache_indices, has_initial_state, conv_states)
        activation_is_silu(activation, FN)
        batch = query_start_loc.shape[0] - 1
        if conv_states is not None and cache_indices is None and conv_states.shape[0] < batch:
            raise bad_input("conv_states", conv_states, f"at least batch ({batch}) slots when cache_indices is None",
                            op=FN)
        return batch == 0 or x.shape[1] == 0   # nothing to compute, no state to touch (shapes only)

    decision = decide_call(FN_LADDER, call, check)
    if _resolve_check(check_values):
        check_fn_values(query_start_loc, cache_indices, conv_states, x.shape[1], pad_slot_id)
    out = torch.empty_like(x) if decision.signature is None else run_decided(FN_LADDER, call, decision)
    if batched is not None:
        b, d, length = batched
        out = out.reshape(d, b, length).transpose(0, 1)
    return out


def causal_conv1d_update(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    activation: Optional[str] = None,
    cache_seqlens: Optional[torch.Tensor] = None,
    conv_state_indices: Optional[torch.Tensor] = None,
    pad_slot_id: int = PAD_SLOT_ID,
    *,
    check_values: Optional[bool] = None,
) -> torch.Tensor:
    """Decode step: ``x [batch, dim]`` or ``[batch, dim, L]``; ``conv_state``
    (``[slots, dim, >= width-1]``, any strides) updated in place.  ``check_values``
    (None: True) checks the slot indices on the host first; with False nothing reads tensor
    values on the host (graph capture)."""
    if cache_seqlens is not None:
        raise bad_input("cache_seqlens", cache_seqlens, "None (circular-buffer conv states are not supported; "
                        "SGLang's Triton kernel ignores it as well)", op=UPDATE)
    call = UpdateCall(x, conv_state, weight, bias, activation, conv_state_indices, pad_slot_id)

    def check() -> bool:
        check_update_inputs(x, conv_state, weight, bias, conv_state_indices)
        activation_is_silu(activation, UPDATE)
        return x.shape[0] == 0 or (x.dim() == 3 and x.shape[2] == 0)

    decision = decide_call(UPDATE_LADDER, call, check)
    if _resolve_check(check_values):
        check_slot_values(conv_state_indices, "conv_state_indices", conv_state.shape[0], pad_slot_id, op=UPDATE)
    return torch.empty_like(x) if decision.signature is None else run_decided(UPDATE_LADDER, call, decision)


def causal_conv1d_verify(
    x: torch.Tensor,
    conv_window: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    activation: Optional[str] = None,
    cache_indices: Optional[torch.Tensor] = None,
    draft_token_num: int = 1,
    pad_slot_id: int = PAD_SLOT_ID,
    *,
    check_values: Optional[bool] = None,
) -> torch.Tensor:
    """Speculative verify (TARGET_VERIFY) of a depthwise short conv on SGLang's NPU draft pool.

    ``x [B * d, dim]`` token major (``d = draft_token_num`` tokens per request, the root and the
    drafts of a linear chain), ``conv_window [slots, R, dim]`` window major with
    ``R = (W-1) + (d-1)`` rows (one layer of ``_init_npu_conv_state``'s pool), ``weight [dim, W]``,
    ``cache_indices [B]`` (``pad_slot_id`` rows are skipped).  Per request: the history is the
    slot's last ``W-1`` rows; output token t convolves history and tokens up to t; afterwards the
    slot holds the last ``R`` rows of ``[history, tokens]``.  SGLang's NPU commit
    (``conv_state_rollback`` by ``(d-1) - accepted_step`` rows) then leaves the state after the
    last accepted token in the last ``W-1`` rows -- the same windows SGLang's CUDA path records in
    its ``intermediate_conv_window`` tape.  Returns ``[B * d, dim]``.

    Shape / dtype checks always; slot values (range, no slot twice) when ``check_values`` (None:
    True).  With ``check_values=False`` nothing reads tensor values on the host (graph capture)."""
    if cache_indices is None:
        raise bad_input("cache_indices", None, "a tensor of shape (batch,): the slots of the draft pool", op=VERIFY)
    call = VerifyCall(x, conv_window, weight, bias, activation, cache_indices, pad_slot_id, draft_token_num)

    def check() -> bool:
        check_verify_inputs(x, conv_window, weight, bias, cache_indices, draft_token_num)
        activation_is_silu(activation, VERIFY)
        return cache_indices.shape[0] == 0

    decision = decide_call(VERIFY_LADDER, call, check)
    if _resolve_check(check_values):
        check_slot_values(cache_indices, "cache_indices", conv_window.shape[0], pad_slot_id, op=VERIFY)
    return torch.empty_like(x) if decision.signature is None else run_decided(VERIFY_LADDER, call, decision)
