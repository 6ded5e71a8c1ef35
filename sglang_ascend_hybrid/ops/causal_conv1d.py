"""Short-conv ``causal_conv1d_fn`` / ``causal_conv1d_update`` for Ascend.

Same signatures and semantics as
``sglang.srt.layers.attention.mamba.causal_conv1d`` (see
:mod:`~sglang_ascend_hybrid.ops.causal_conv1d_reference` for the contract).
Conv states may be any strided ``[slots, dim, state_len]`` tensor, in
particular the transposed view of a window-major NPU pool that
:mod:`sglang_ascend_hybrid.backends.conv_state_layout` hands to the model.

Dispatch (a :class:`~sglang_ascend_hybrid.ops.ladder.Ladder` per op, device
kernels only through :mod:`~sglang_ascend_hybrid.ops.seam`):

``npu_v2``
    sgl-kernel-npu's window-major ops ``causal_conv1d_fn_v2`` /
    ``causal_conv1d_update_npu_v2`` (``sgl_kernel_npu.mamba.causal_conv1d``).
    Their pad rows write the reserved pool slot 0 (SGLang's padding slot).
``npu_aclnn``
    ``torch.ops.npu.causal_conv1d`` (run_mode 0 prefill, 1 single-token
    decode); needs the window-major state to be contiguous.
``torch``
    the vectorised pure-torch implementation (the CPU path).

Device rungs take width 2-4, ``dim % 16 == 0``, fp16 / bf16 and a window-major
state whose window is exactly ``width - 1``; anything else goes to ``torch``
with one INFO line per distinct shape.  Zero-length sequences are turned into
pad rows before a device rung sees them, so their state is never touched.
``SGLANG_ASCEND_HYBRID_CONV_BACKEND`` forces a rung.

Hooks: SGLang's LFM2 imports ``causal_conv1d_fn`` / ``causal_conv1d_update``
into its own module.  :func:`causal_conv1d_fn_around` /
:func:`causal_conv1d_update_around` are AROUND hooks for the two names in
``sglang.srt.layers.attention.mamba.causal_conv1d`` (HookRegistry rebinds the
from-import copies).  They route to this module when the input lives on an NPU,
when a conv emulator is installed in the seam (CPU self-test), or when the conv
state is a window-major view (only the NPU pool is laid out that way); every
other call (CUDA, ROCm, CPU with a CUDA-layout pool) runs the original.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Optional

import torch

from sglang_ascend_hybrid.emulators.causal_conv1d import OP_ACLNN, OP_FN_V2, OP_UPDATE_V2
from sglang_ascend_hybrid.envs import ENV
from sglang_ascend_hybrid.logutil import log_once
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.causal_conv1d_reference import (
    PAD_SLOT_ID,
    activation_is_silu,
    causal_conv1d_fn_torch,
    causal_conv1d_update_torch,
    check_fn_inputs,
    check_update_inputs,
)
from sglang_ascend_hybrid.ops.ladder import Ladder, Rung

logger = logging.getLogger(__name__)

DEVICE_OPS = (OP_FN_V2, OP_UPDATE_V2, OP_ACLNN)
_NPU_DTYPES = (torch.float16, torch.bfloat16)


# --------------------------------------------------------------------------- layout facts


def is_window_major(conv_states: Optional[torch.Tensor]) -> bool:
    """``[slots, dim, S]`` whose channel axis is the unit-stride one: a transposed
    view of a ``[slots, S, dim]`` (window-major) pool."""
    return (conv_states is not None and conv_states.dim() == 3
            and conv_states.stride(1) == 1 and conv_states.stride(2) >= max(conv_states.shape[1], 2))


def layout_tag(conv_states: Optional[torch.Tensor]) -> str:
    if conv_states is None:
        return "none"
    if is_window_major(conv_states):
        return "window-major" if conv_states.transpose(1, 2).is_contiguous() else "window-major-strided"
    return "channel-major"


def npu_conv_supports(width: int, dim: int, dtype: torch.dtype) -> bool:
    """The NPU conv ops' documented limits (shared with the ``plan`` CLI)."""
    return 2 <= width <= 4 and dim % 16 == 0 and dtype in _NPU_DTYPES


def _in_npu_limits(width: int, dim: int, x: torch.Tensor, state: Optional[torch.Tensor]) -> bool:
    return (npu_conv_supports(width, dim, x.dtype)
            and state is not None and state.dtype == x.dtype
            and is_window_major(state) and state.shape[2] == width - 1)


def _device_possible(x: torch.Tensor) -> bool:
    return x.device.type == "npu" or any(seam.is_emulated(n) for n in DEVICE_OPS)


def _refusal(exc: BaseException) -> bool:
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and any(
        k in text for k in ("not support", "unsupported", "check failed", "161002"))


def _skip_empty(idx: torch.Tensor, qsl: torch.Tensor, pad_slot_id: int) -> torch.Tensor:
    """Zero-length sequences become pad rows (device ops may rewrite their state)."""
    lens = (qsl[1:] - qsl[:-1]).to(idx.device)
    return torch.where(lens > 0, idx, torch.full_like(idx, pad_slot_id))


# --------------------------------------------------------------------------- prefill ladder


@dataclass
class _FnCall:
    x: torch.Tensor
    weight: torch.Tensor
    bias: Optional[torch.Tensor]
    query_start_loc: torch.Tensor
    cache_indices: Optional[torch.Tensor]
    has_initial_state: Optional[torch.Tensor]
    conv_states: Optional[torch.Tensor]
    activation: object
    pad_slot_id: int


def _fn_device_ok(c: _FnCall) -> bool:
    return (c.cache_indices is not None
            and _in_npu_limits(c.weight.shape[1], c.x.shape[0], c.x, c.conv_states))


def _fn_v2(c: _FnCall) -> torch.Tensor:
    pool = c.conv_states.transpose(1, 2)  # [slots, W-1, dim]: the pool's own layout
    idx = _skip_empty(c.cache_indices.to(torch.int32), c.query_start_loc, c.pad_slot_id)
    act = "silu" if activation_is_silu(c.activation) else None
    return seam.call(OP_FN_V2, c.x, c.weight, c.bias, c.query_start_loc, idx,
                     c.has_initial_state, pool, act, c.pad_slot_id)


def _fn_aclnn(c: _FnCall) -> torch.Tensor:
    pool = c.conv_states.transpose(1, 2)
    idx = _skip_empty(c.cache_indices.to(torch.int32), c.query_start_loc, c.pad_slot_id)
    his = c.has_initial_state
    if his is None:
        his = torch.zeros(idx.shape[0], dtype=torch.bool, device=idx.device)
    out = seam.call(
        OP_ACLNN, c.x.t().contiguous(), c.weight.t().contiguous(), conv_states=pool, bias=c.bias,
        query_start_loc=c.query_start_loc.to(torch.int32), cache_indices=idx,
        has_initial_state=his.bool(), activation_mode=int(activation_is_silu(c.activation)),
        pad_slot_id=c.pad_slot_id, run_mode=0)
    return out.t()


def _fn_torch(c: _FnCall) -> torch.Tensor:
    return causal_conv1d_fn_torch(c.x, c.weight, c.bias, c.query_start_loc, c.cache_indices,
                                  c.has_initial_state, c.conv_states, c.activation, c.pad_slot_id)


FN_LADDER = Ladder("causal_conv1d_fn", [
    Rung("npu_v2", lambda sig, c: _fn_device_ok(c) and seam.serves(OP_FN_V2, c.x, c.conv_states),
         _fn_v2, _refusal),
    Rung("npu_aclnn", lambda sig, c: (_fn_device_ok(c) and c.conv_states.transpose(1, 2).is_contiguous()
                                      and seam.serves(OP_ACLNN, c.x, c.conv_states)),
         _fn_aclnn, _refusal),
    Rung("torch", lambda sig, c: True, _fn_torch),
])


# --------------------------------------------------------------------------- decode ladder


@dataclass
class _UpdateCall:
    x: torch.Tensor
    conv_state: torch.Tensor
    weight: torch.Tensor
    bias: Optional[torch.Tensor]
    activation: object
    conv_state_indices: Optional[torch.Tensor]
    pad_slot_id: int


def _update_device_ok(c: _UpdateCall) -> bool:
    return (c.conv_state_indices is not None
            and _in_npu_limits(c.weight.shape[1], c.x.shape[1], c.x, c.conv_state))


def _update_v2(c: _UpdateCall) -> torch.Tensor:
    act = "silu" if activation_is_silu(c.activation) else None
    return seam.call(OP_UPDATE_V2, c.x, c.conv_state.transpose(1, 2), c.weight, c.bias, act,
                     c.conv_state_indices.to(torch.int32), c.pad_slot_id)


def _update_aclnn(c: _UpdateCall) -> torch.Tensor:
    x2 = c.x if c.x.dim() == 2 else c.x[..., 0]
    batch = x2.shape[0]
    qsl = torch.arange(batch + 1, dtype=torch.int32, device=x2.device)
    out = seam.call(
        OP_ACLNN, x2.contiguous(), c.weight.t().contiguous(), conv_states=c.conv_state.transpose(1, 2),
        bias=c.bias, query_start_loc=qsl, cache_indices=c.conv_state_indices.to(torch.int32),
        activation_mode=int(activation_is_silu(c.activation)), pad_slot_id=c.pad_slot_id, run_mode=1)
    return out if c.x.dim() == 2 else out.unsqueeze(-1)


def _update_torch(c: _UpdateCall) -> torch.Tensor:
    return causal_conv1d_update_torch(c.x, c.conv_state, c.weight, c.bias, c.activation,
                                      c.conv_state_indices, c.pad_slot_id)


UPDATE_LADDER = Ladder("causal_conv1d_update", [
    Rung("npu_v2", lambda sig, c: _update_device_ok(c) and seam.serves(OP_UPDATE_V2, c.x, c.conv_state),
         _update_v2, _refusal),
    Rung("npu_aclnn", lambda sig, c: (_update_device_ok(c) and (c.x.dim() == 2 or c.x.shape[-1] == 1)
                                      and c.conv_state.transpose(1, 2).is_contiguous()
                                      and seam.serves(OP_ACLNN, c.x, c.conv_state)),
         _update_aclnn, _refusal),
    Rung("torch", lambda sig, c: True, _update_torch),
])


def _dispatch(ladder: Ladder, sig: tuple, call, x: torch.Tensor):
    backend = ENV.CONV_BACKEND.get()
    if backend == "auto" and _device_possible(x) and ladder.choose(sig, call).name == "torch":
        log_once(logger, ("conv-torch-path", sig),
                 "sglang-ascend-hybrid: %s %s is outside the NPU conv kernels' limits (width 2-4, "
                 "dim %% 16 == 0, fp16/bf16, window-major state of width-1 rows) or no kernel is "
                 "installed; using the torch path for this shape", ladder.op, sig)
    return ladder(sig, call, backend=backend)


# --------------------------------------------------------------------------- public ops


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
    **kwargs,
) -> torch.Tensor:
    """Varlen causal conv1d: ``x [dim, T]`` packed by ``query_start_loc`` (or
    ``[batch, dim, L]`` without it) -> same shape; ``conv_states`` updated in place.
    ``seq_lens_cpu`` / ``validate_data`` keyword arguments are accepted and unused."""
    if kwargs.get("block_table") is not None:
        raise ValueError("block_table is not None: expected None (chunk block tables are "
                         "not supported by the Ascend short-conv path)")
    unknown = set(kwargs) - {"seq_lens_cpu", "validate_data", "block_table"}
    if unknown:
        raise ValueError(f"unexpected keyword arguments {sorted(unknown)}: expected "
                         "seq_lens_cpu / validate_data only")
    batched = None
    if query_start_loc is None:
        if not isinstance(x, torch.Tensor) or x.dim() not in (2, 3):
            raise ValueError(f"x has shape {tuple(getattr(x, 'shape', ()))}: expected (dim, T) "
                             "or (batch, dim, seqlen) when query_start_loc is None")
        if x.dim() == 3:
            batched = x.shape
            b, d, length = x.shape
            x = x.transpose(0, 1).reshape(d, b * length)
            query_start_loc = torch.arange(0, b * length + 1, max(length, 1), device=x.device,
                                           dtype=torch.int32)[: b + 1]
        else:
            query_start_loc = torch.tensor([0, x.shape[1]], dtype=torch.int32, device=x.device)
    width = check_fn_inputs(x, weight, bias, query_start_loc, cache_indices, has_initial_state,
                            conv_states)
    activation_is_silu(activation)
    call = _FnCall(x, weight, bias, query_start_loc, cache_indices, has_initial_state, conv_states,
                   activation, pad_slot_id)
    sig = ("fn", width, x.shape[0], str(x.dtype).replace("torch.", ""), layout_tag(conv_states))
    out = _dispatch(FN_LADDER, sig, call, x)
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
) -> torch.Tensor:
    """Decode step: ``x [batch, dim]`` or ``[batch, dim, L]``; ``conv_state``
    (``[slots, dim, >= width-1]``, any strides) updated in place."""
    if cache_seqlens is not None:
        raise ValueError("cache_seqlens is not None: expected None (circular-buffer conv states "
                         "are not supported; SGLang's Triton kernel ignores it as well)")
    width = check_update_inputs(x, conv_state, weight, bias, conv_state_indices)
    activation_is_silu(activation)
    call = _UpdateCall(x, conv_state, weight, bias, activation, conv_state_indices, pad_slot_id)
    sig = ("update", width, x.shape[1], str(x.dtype).replace("torch.", ""), layout_tag(conv_state))
    return _dispatch(UPDATE_LADDER, sig, call, x)


# --------------------------------------------------------------------------- hooks


def routes_to_plugin(x, conv_state) -> bool:
    """Whether an upstream conv call belongs to this plugin (see module docstring)."""
    if not isinstance(x, torch.Tensor):
        return False
    return _device_possible(x) or (isinstance(conv_state, torch.Tensor) and is_window_major(conv_state))


def causal_conv1d_fn_around(original, *args, **kwargs):
    """AROUND hook for ``sglang.srt.layers.attention.mamba.causal_conv1d.causal_conv1d_fn``."""
    x = args[0] if args else kwargs.get("x")
    state = args[6] if len(args) > 6 else kwargs.get("conv_states")
    if routes_to_plugin(x, state):
        return causal_conv1d_fn(*args, **kwargs)
    return original(*args, **kwargs)


def causal_conv1d_update_around(original, *args, **kwargs):
    """AROUND hook for ``sglang.srt.layers.attention.mamba.causal_conv1d.causal_conv1d_update``."""
    x = args[0] if args else kwargs.get("x")
    state = args[1] if len(args) > 1 else kwargs.get("conv_state")
    if routes_to_plugin(x, state):
        return causal_conv1d_update(*args, **kwargs)
    return original(*args, **kwargs)
