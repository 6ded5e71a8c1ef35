"""The short-conv kernel ladders: which kernel serves a ``causal_conv1d_fn`` /
``causal_conv1d_update`` call the public ops (:mod:`sglang_ascend_hybrid.ops.conv.api`) have
already validated.

Dispatch (a :class:`~sglang_ascend_hybrid.ops.ladder.Ladder` per op, device kernels only
through :mod:`~sglang_ascend_hybrid.ops.seam`; contracts in
:mod:`sglang_ascend_hybrid.ops.conv.contract`, written from sgl-kernel-npu f425bdf1):

``npu_v2`` (both ops)
    ``causal_conv1d_fn_v2`` / ``causal_conv1d_update_npu_v2`` of an unmerged sgl-kernel-npu
    branch (no release has them): only when present, on a contiguous window-major pool of
    exactly ``W - 1`` rows, one shared fp16 / bf16 dtype; zero-length sequences are turned
    into pad rows first (their behaviour on that branch is unknown).
``npu_aclnn`` (both ops)
    ``torch.ops.npu.causal_conv1d`` (sgl-kernel-npu; absent on Ascend 950 builds), run mode 0
    (prefill, varlen ``[T, dim]``) or 1 (decode, batch ``[B, L, dim]``).  Its host accepts
    exactly: x, weight and conv_states of one dtype, fp16 or bf16, contiguous, width 2-4 (no
    ``dim`` rule).  It reads and writes rows ``[0, W-1)`` of each slot of the contiguous
    ``conv_states`` it is given, so the rung passes the pool itself and runs only when that is
    the state: the model's view transposed is contiguous, i.e. the pool has no draft rows
    (SGLang's NPU pool with speculative decoding is ``[slots, (W-1) + (draft-1), dim]`` and
    the view holds its LAST ``W-1`` rows: the op would compute on the wrong rows, so the
    predicate skips it; copying those rows to a scratch pool and back would cost two gathers
    per layer and step).  Its tiling cache omits the dtype, so this rung never calls one
    shape in a second dtype in a process (:data:`_TILING_SEEN`; such calls go to the next
    rung).  Bias is passed in x's dtype (the kernel reads it as x's dtype, unchecked).
``npu_update_v2`` (decode only)
    the released ``sgl_kernel_npu.mamba.causal_conv1d.causal_conv1d_update_v2`` (Triton):
    token-major x, any-strided ``[slots, state_len, dim]`` state (so draft-window pools work:
    the rung passes the model's view), rows ``[0, W-1)`` of it.  It overwrites its x in place,
    so the rung passes a private copy.  It casts history and tokens to fp16 inside, so the
    rung takes fp16 only (bf16 values beyond the fp16 range would become inf).
``torch``
    the vectorised pure-torch implementation (the CPU path); its decode is graph-capture
    safe (no host sync, fixed shapes).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from sglang_ascend_hybrid.envs import ENV
from sglang_ascend_hybrid.logutil import log_once
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.conv.contract import (
    DEVICE_OPS,
    MAX_CAPTURE_NUM,
    NPU_DTYPES,
    OP_ACLNN,
    OP_FN_V2,
    OP_UPDATE_V2,
    OP_UPDATE_V2_MAIN,
    SPEC_WIDTH,
    WIDTHS,
    is_refusal,
)
from sglang_ascend_hybrid.ops.conv.inputs import activation_is_silu
from sglang_ascend_hybrid.ops.conv.signature import ConvSignature, is_window_major
from sglang_ascend_hybrid.ops.conv.torch_impl import causal_conv1d_fn_torch, update_rows_torch, verify_rows_torch
from sglang_ascend_hybrid.ops.conv.weights import taps_major
from sglang_ascend_hybrid.ops.decisions import Decisions, changed, key_of
from sglang_ascend_hybrid.ops.ladder import Absent, Ladder, Rung, env_forced_rung
from sglang_ascend_hybrid.ops.signature import dtype_name

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------- layout facts


def _pool_reason(state: Optional[torch.Tensor], width: int, exact: bool) -> Optional[str]:
    """None when the model's view transposed is a contiguous window-major pool whose rows ``[0, W-1)``
    are the view's state columns (``exact``: the pool has exactly ``W-1`` rows), else why not."""
    if state is None or state.dim() != 3:
        return "the call has no 3-D conv state"
    pool = state.transpose(1, 2)
    if not pool.is_contiguous():
        return "the state is not a contiguous window-major pool (a pool with draft rows, or channel-major)"
    if exact and pool.shape[1] != width - 1:
        return f"the pool has {pool.shape[1]} rows per slot; it takes exactly width - 1 = {width - 1}"
    if pool.shape[1] < width - 1:
        return f"the pool has {pool.shape[1]} rows per slot, fewer than width - 1 = {width - 1}"
    return None


def _width_refused(width: int) -> str:
    return f"width {width}; the NPU conv kernels take 2-4"


def _device_reason(width: int, *tensors) -> Optional[str]:
    """The rule every NPU conv rung shares: width 2-4, the tensors of one dtype fp16 or bf16."""
    if width not in WIDTHS:
        return _width_refused(width)
    dtypes = {t.dtype for t in tensors if t is not None}
    if not (len(dtypes) == 1 and dtypes.pop() in NPU_DTYPES):
        return "x, weight and the state are not of one dtype fp16 or bf16"
    return None


def device_possible(x: torch.Tensor) -> bool:
    return x.device.type == "npu" or any(seam.is_emulated(n) for n in DEVICE_OPS)


def _skip_empty(idx: torch.Tensor, qsl: torch.Tensor, pad_slot_id: int) -> torch.Tensor:
    """Zero-length sequences become pad rows (device op, no sync)."""
    lens = (qsl[1:] - qsl[:-1]).to(idx.device)
    return torch.where(lens > 0, idx, torch.full_like(idx, pad_slot_id))


# torch.ops.npu.causal_conv1d caches its tiling per key without the dtype (contract module doc):
# key -> dtype of the first call in this process.
_TILING_SEEN: dict[tuple, torch.dtype] = {}
_TILING_LOCK = threading.Lock()
_TILING_CAPACITY = MAX_CAPTURE_NUM


def _tiling_reason(key: tuple, dtype: torch.dtype) -> Optional[str]:
    with _TILING_LOCK:
        seen = _TILING_SEEN.get(key)
    if seen is None or seen == dtype:
        return None
    return (f"its tiling cache holds this shape for {dtype_name(seen)} already (the cache key "
            "omits the dtype)")


def _tiling_record(key: tuple, dtype: torch.dtype) -> None:
    if key in _TILING_SEEN:  # the common case, read without the lock (a dict is read whole)
        return
    with _TILING_LOCK:
        if key in _TILING_SEEN or len(_TILING_SEEN) >= _TILING_CAPACITY:
            return
        _TILING_SEEN[key] = dtype
    changed()  # a predicate reads the record: kept decisions are decided again


def reset_state() -> None:
    """Forget call-time refusals, the tiling-key record and the signatures whose torch-path verdict
    was asked (tests; a reloaded kernel)."""
    _TORCH_PATH_ASKED.clear()
    FN_LADDER.forget_refusals()
    UPDATE_LADDER.forget_refusals()
    VERIFY_LADDER.forget_refusals()
    with _TILING_LOCK:
        _TILING_SEEN.clear()
    changed()


# --------------------------------------------------------------------------- prefill ladder


@dataclass
class FnCall:
    x: torch.Tensor
    weight: torch.Tensor
    bias: Optional[torch.Tensor]
    query_start_loc: torch.Tensor
    cache_indices: Optional[torch.Tensor]
    has_initial_state: Optional[torch.Tensor]
    conv_states: Optional[torch.Tensor]
    activation: object
    pad_slot_id: int
    _signature: Optional[ConvSignature] = None

    @property
    def width(self) -> int:
        return int(self.weight.shape[1])

    def signature(self) -> ConvSignature:
        if self._signature is None:
            self._signature = ConvSignature.of("fn", self.x, self.weight, self.conv_states, dim=self.x.shape[0])
        return self._signature

    def aclnn_key(self) -> tuple:
        """``CausalConv1dTilingKey`` of the call :func:`_fn_aclnn` makes (varlen, run mode 0)."""
        pool = self.conv_states.transpose(1, 2)
        return (self.x.shape[0], self.x.shape[1], 0, self.query_start_loc.shape[0] - 1, 0, self.width,
                pool.shape[1], pool.shape[0], int(activation_is_silu(self.activation)), self.pad_slot_id, 0,
                int(self.bias is not None), int(self.cache_indices is not None),
                int(self.has_initial_state is not None), 0)


def _fn_device_reason(c: FnCall) -> Optional[str]:
    if c.conv_states is None:
        return "the call has no conv state pool"
    return _device_reason(c.width, c.x, c.weight, c.conv_states)


# The capability predicates ask the seam first: off the NPU (no emulator) that answers no at
# once, before any shape or layout work (the decode step pays these predicates every call).
def _fn_v2_ok(c: FnCall) -> Optional[str]:
    if not seam.serves(OP_FN_V2, c.x, c.conv_states):
        return Absent(f"{OP_FN_V2} is not installed for these tensors")
    return _fn_device_reason(c) or _pool_reason(c.conv_states, c.width, exact=True)


def _fn_v2(c: FnCall) -> torch.Tensor:
    pool = c.conv_states.transpose(1, 2)  # [slots, W-1, dim]: the pool's own layout
    batch = c.query_start_loc.shape[0] - 1
    idx = (c.cache_indices if c.cache_indices is not None
           else torch.arange(batch, device=c.x.device)).to(torch.int32)
    idx = _skip_empty(idx, c.query_start_loc, c.pad_slot_id)
    act = "silu" if activation_is_silu(c.activation) else None
    bias = c.bias.to(c.x.dtype) if c.bias is not None else None
    return seam.call(OP_FN_V2, c.x, c.weight, bias, c.query_start_loc, idx,
                     c.has_initial_state, pool, act, c.pad_slot_id)


def _fn_aclnn_ok(c: FnCall) -> Optional[str]:
    if not seam.serves(OP_ACLNN, c.x, c.conv_states):
        return Absent(f"torch.ops.npu.{OP_ACLNN} is not installed for these tensors")
    return (_fn_device_reason(c) or _pool_reason(c.conv_states, c.width, exact=False)
            or _tiling_reason(c.aclnn_key(), c.x.dtype))


def _fn_aclnn(c: FnCall) -> torch.Tensor:
    key = c.aclnn_key()
    out = seam.call(
        OP_ACLNN, c.x.t().contiguous(), taps_major(c.weight), c.conv_states.transpose(1, 2),
        bias=c.bias.to(c.x.dtype) if c.bias is not None else None,
        query_start_loc=c.query_start_loc, cache_indices=c.cache_indices,
        has_initial_state=c.has_initial_state, activation_mode=int(activation_is_silu(c.activation)),
        pad_slot_id=c.pad_slot_id, run_mode=0)
    _tiling_record(key, c.x.dtype)
    return out.t()


def _fn_torch(c: FnCall) -> torch.Tensor:
    return causal_conv1d_fn_torch(c.x, c.weight, c.bias, c.query_start_loc, c.cache_indices,
                                  c.has_initial_state, c.conv_states, c.activation, c.pad_slot_id,
                                  check_values=False)



FN_LADDER = Ladder("causal_conv1d_fn", [
    Rung("npu_v2", lambda sig, c: _fn_v2_ok(c), _fn_v2, is_refusal, device=True,
         ops=(OP_FN_V2,)),
    Rung("npu_aclnn", lambda sig, c: _fn_aclnn_ok(c), _fn_aclnn, is_refusal, device=True, ops=(OP_ACLNN,)),
    Rung("torch", lambda sig, c: None, _fn_torch),
])


# --------------------------------------------------------------------------- decode ladder


@dataclass
class UpdateCall:
    x: torch.Tensor
    conv_state: torch.Tensor
    weight: torch.Tensor
    bias: Optional[torch.Tensor]
    activation: object
    conv_state_indices: Optional[torch.Tensor]
    pad_slot_id: int
    _signature: Optional[ConvSignature] = None

    @property
    def width(self) -> int:
        return int(self.weight.shape[1])

    def signature(self) -> ConvSignature:
        if self._signature is None:
            self._signature = ConvSignature.of("update", self.x, self.weight, self.conv_state, dim=self.x.shape[1])
        return self._signature

    def tokens_major(self, private: bool = True) -> torch.Tensor:
        """x as a contiguous ``[B, L, dim]`` tensor: a private copy (never a view of the caller's x, for
        a kernel that overwrites its x), or with ``private=False`` x itself where its memory already
        has that layout (one token per request: ``[B, dim]`` is ``[B, 1, dim]``)."""
        x3 = (self.x.unsqueeze(-1) if self.x.dim() == 2 else self.x).transpose(1, 2)
        return x3.clone(memory_format=torch.contiguous_format) if private else x3.contiguous()

    def aclnn_key(self) -> tuple:
        """``CausalConv1dTilingKey`` of :func:`_update_aclnn`'s call (batch mode, run mode 1)."""
        pool = self.conv_state.transpose(1, 2)
        b, dim = self.x.shape[0], self.x.shape[1]
        length = 1 if self.x.dim() == 2 else self.x.shape[2]
        return (dim, b * length, length, b, 1, self.width, pool.shape[1], pool.shape[0],
                int(activation_is_silu(self.activation)), self.pad_slot_id, 1, int(self.bias is not None),
                int(self.conv_state_indices is not None), 0, 0)


def _update_v2_ok(c: UpdateCall) -> Optional[str]:
    if not seam.serves(OP_UPDATE_V2, c.x, c.conv_state):
        return Absent(f"{OP_UPDATE_V2} is not installed for these tensors")
    return (_device_reason(c.width, c.x, c.weight, c.conv_state)
            or _pool_reason(c.conv_state, c.width, exact=True))


def _indices(c: UpdateCall) -> torch.Tensor:
    if c.conv_state_indices is not None:
        return c.conv_state_indices.to(torch.int32)
    return torch.arange(c.x.shape[0], dtype=torch.int32, device=c.x.device)


def _update_v2(c: UpdateCall) -> torch.Tensor:
    act = "silu" if activation_is_silu(c.activation) else None
    bias = c.bias.to(c.x.dtype) if c.bias is not None else None
    return seam.call(OP_UPDATE_V2, c.x, c.conv_state.transpose(1, 2), c.weight, bias, act,
                     _indices(c), c.pad_slot_id)


def _update_aclnn_ok(c: UpdateCall) -> Optional[str]:
    if not seam.serves(OP_ACLNN, c.x, c.conv_state):
        return Absent(f"torch.ops.npu.{OP_ACLNN} is not installed for these tensors")
    return (_device_reason(c.width, c.x, c.weight, c.conv_state)
            or _pool_reason(c.conv_state, c.width, exact=False) or _tiling_reason(c.aclnn_key(), c.x.dtype))


def _update_aclnn(c: UpdateCall) -> torch.Tensor:
    key = c.aclnn_key()
    out = seam.call(
        OP_ACLNN, c.tokens_major(private=False), taps_major(c.weight), c.conv_state.transpose(1, 2),
        bias=c.bias.to(c.x.dtype) if c.bias is not None else None,
        cache_indices=c.conv_state_indices, activation_mode=int(activation_is_silu(c.activation)),
        pad_slot_id=c.pad_slot_id, run_mode=1)
    _tiling_record(key, c.x.dtype)
    out = out.transpose(1, 2)
    return out[..., 0] if c.x.dim() == 2 else out


def _update_v2_main_reason(x: torch.Tensor, state: torch.Tensor, width: int) -> Optional[str]:
    """The released ``causal_conv1d_update_v2``'s rule, for decode and verify: installed for these
    tensors, width 2-4, fp16 x and state (it casts to fp16 inside)."""
    if not seam.serves(OP_UPDATE_V2_MAIN, x, state):
        return Absent(f"{OP_UPDATE_V2_MAIN} is not installed for these tensors")
    if width not in WIDTHS:
        return _width_refused(width)
    if not (x.dtype == torch.float16 and state.dtype == torch.float16):
        return "it casts to fp16 inside: it takes fp16 x and state only"
    return None


def _update_v2_main_ok(c: UpdateCall) -> Optional[str]:
    reason = _update_v2_main_reason(c.x, c.conv_state, c.width)
    if reason is not None:
        return reason
    if not is_window_major(c.conv_state):
        return "the state is not a window-major pool"
    return None


def _update_v2_main(c: UpdateCall) -> torch.Tensor:
    act = "silu" if activation_is_silu(c.activation) else None
    x_private = c.tokens_major() if c.x.dim() == 3 else c.x.clone()   # the op overwrites its x
    out = seam.call(OP_UPDATE_V2_MAIN, x_private, c.conv_state.transpose(1, 2), c.weight.t(),
                    bias=c.bias, activation=act, conv_state_indices=_indices(c),
                    pad_slot_id=c.pad_slot_id)
    return out.transpose(1, 2) if c.x.dim() == 3 else out


def _update_torch(c: UpdateCall) -> torch.Tensor:
    # the public op checked the inputs already: the rung's body without its checks
    return update_rows_torch(c.x, c.conv_state, c.weight, c.bias, activation_is_silu(c.activation),
                             c.conv_state_indices, c.pad_slot_id, c.width)


UPDATE_LADDER = Ladder("causal_conv1d_update", [
    Rung("npu_v2", lambda sig, c: _update_v2_ok(c), _update_v2, is_refusal, device=True,
         ops=(OP_UPDATE_V2,)),
    Rung("npu_aclnn", lambda sig, c: _update_aclnn_ok(c), _update_aclnn, is_refusal, device=True, ops=(OP_ACLNN,)),
    Rung("npu_update_v2", lambda sig, c: _update_v2_main_ok(c), _update_v2_main, is_refusal, device=True,
         ops=(OP_UPDATE_V2_MAIN,)),
    Rung("torch", lambda sig, c: None, _update_torch),
])


# --------------------------------------------------------------------------- speculative verify ladder


@dataclass
class VerifyCall:
    """One TARGET_VERIFY conv: ``x [B * d, dim]``, ``conv_window [slots, (W-1) + (d-1), dim]``
    (window major, the whole draft window), ``weight [dim, W]`` (SGLang's layout)."""
    x: torch.Tensor
    conv_window: torch.Tensor
    weight: torch.Tensor
    bias: Optional[torch.Tensor]
    activation: object
    cache_indices: torch.Tensor
    pad_slot_id: int
    draft_token_num: int
    _signature: Optional[ConvSignature] = None

    @property
    def width(self) -> int:
        return int(self.weight.shape[1])

    @property
    def batch(self) -> int:
        return int(self.cache_indices.shape[0])

    def signature(self) -> ConvSignature:
        """Keyed by the ``[slots, dim, R]`` view of the draft window, like the other conv ops' states."""
        if self._signature is None:
            self._signature = ConvSignature.of("verify", self.x, self.weight, self.conv_window.transpose(1, 2),
                                               dim=self.x.shape[1])
        return self._signature

    def accepted(self) -> torch.Tensor:
        """``num_accepted_tokens``: every request's whole block (the live state is the window's last
        ``W-1`` rows after SGLang's rollback, at row offset ``d - 1``)."""
        return torch.full((self.batch,), self.draft_token_num, dtype=torch.int32, device=self.x.device)

    def aclnn_key(self) -> tuple:
        """``CausalConv1dTilingKey`` of :func:`_verify_aclnn`'s call (varlen, run mode 1, accepted counts)."""
        return (self.x.shape[1], self.x.shape[0], 0, self.batch, 0, self.width, self.conv_window.shape[1],
                self.conv_window.shape[0], int(activation_is_silu(self.activation)), self.pad_slot_id, 1,
                int(self.bias is not None), 1, 0, 1)


def _verify_aclnn_ok(c: VerifyCall) -> Optional[str]:
    if not seam.serves(OP_ACLNN, c.x, c.conv_window):
        return Absent(f"torch.ops.npu.{OP_ACLNN} is not installed for these tensors")
    if c.width != SPEC_WIDTH:
        return (f"width {c.width}; its speculative mode (run mode 1 with num_accepted_tokens, "
                f"IsUpdateSpecDecodingEnabled) takes width {SPEC_WIDTH} only")
    return (_device_reason(c.width, c.x, c.weight, c.conv_window)
            or (None if c.conv_window.is_contiguous() else "the draft window is not contiguous")
            or _tiling_reason(c.aclnn_key(), c.x.dtype))


def _verify_aclnn(c: VerifyCall) -> torch.Tensor:
    key = c.aclnn_key()
    qsl = torch.arange(c.batch + 1, dtype=torch.int32, device=c.x.device) * c.draft_token_num
    out = seam.call(
        OP_ACLNN, c.x.contiguous(), taps_major(c.weight), c.conv_window,
        bias=c.bias.to(c.x.dtype) if c.bias is not None else None, query_start_loc=qsl,
        cache_indices=c.cache_indices, num_accepted_tokens=c.accepted(),
        activation_mode=int(activation_is_silu(c.activation)), pad_slot_id=c.pad_slot_id, run_mode=1)
    _tiling_record(key, c.x.dtype)
    return out


def _verify_update_v2_ok(c: VerifyCall) -> Optional[str]:
    return _update_v2_main_reason(c.x, c.conv_window, c.width)


def _verify_update_v2(c: VerifyCall) -> torch.Tensor:
    act = "silu" if activation_is_silu(c.activation) else None
    x_private = c.x.reshape(c.batch, c.draft_token_num, -1).clone()   # the op overwrites its x
    out = seam.call(OP_UPDATE_V2_MAIN, x_private, c.conv_window, c.weight.t(), bias=c.bias, activation=act,
                    conv_state_indices=c.cache_indices.to(torch.int32), num_accepted_tokens=c.accepted(),
                    pad_slot_id=c.pad_slot_id)
    return out.reshape(c.batch * c.draft_token_num, -1)


def _verify_torch(c: VerifyCall) -> torch.Tensor:
    return verify_rows_torch(c.x, c.conv_window, c.weight, c.bias, activation_is_silu(c.activation),
                             c.cache_indices, c.pad_slot_id, c.draft_token_num)



VERIFY_LADDER = Ladder("causal_conv1d_verify", [
    Rung("npu_aclnn", lambda sig, c: _verify_aclnn_ok(c), _verify_aclnn, is_refusal, device=True, ops=(OP_ACLNN,)),
    Rung("npu_update_v2", lambda sig, c: _verify_update_v2_ok(c), _verify_update_v2, is_refusal, device=True,
         ops=(OP_UPDATE_V2_MAIN,)),
    Rung("torch", lambda sig, c: None, _verify_torch),
])


# Signatures whose torch-path verdict has been asked (the line below is said at most once per
# signature; asking the ladder on every call would run every rung's predicate twice per call).
_TORCH_PATH_ASKED: set[ConvSignature] = set()


def _say_torch_path(ladder: Ladder, sig: ConvSignature, call) -> None:
    """The first NPU call of a signature that only the torch path admits is said once, with every
    NPU rung's reason."""
    if sig in _TORCH_PATH_ASKED or not device_possible(call.x):
        return
    _TORCH_PATH_ASKED.add(sig)
    if ladder.choose(sig, call).name == "torch":
        def reasons() -> str:  # the predicates' own words, computed only when the line is said
            why = "; ".join(f"{r.name}: {ladder.why_not(r, sig, call)}" for r in ladder.rungs if r.device)
            return (f"sglang-ascend-hybrid: {ladder.op} {sig} is outside every installed NPU conv kernel's "
                    f"contract or no kernel is installed ({why}); using the torch path for this shape")

        log_once(logger, ("conv-torch-path", sig), reasons)


@dataclass(frozen=True)
class Decision:
    """What a conv call's metadata decides (:func:`decide_call`): its inputs passed the checks; an empty
    call (nothing to compute) has no signature and no rung."""

    backend: str
    signature: Optional[ConvSignature]
    first: Optional[int]


_DECIDED = {ladder.op: Decisions(ladder.op) for ladder in (FN_LADDER, UPDATE_LADDER, VERIFY_LADDER)}


def decide_call(ladder: Ladder, call: FnCall | UpdateCall | VerifyCall, check: Callable[[], bool]) -> Decision:
    """Run ``check`` (the call's shape / dtype checks; True: the call is empty) and choose the call's
    first rung (the forced rung, else the first whose contract admits it), kept per metadata key
    (:mod:`~sglang_ascend_hybrid.ops.decisions`)."""
    backend = env_forced_rung(ENV.CONV_BACKEND, ladder.names, "conv", ladder.op)

    def decide() -> Decision:
        if check():
            return Decision(backend, None, None)
        sig = call.signature()
        if backend == "auto":
            _say_torch_path(ladder, sig, call)
        return Decision(backend, sig, ladder.first(sig, call, backend=backend))

    return _DECIDED[ladder.op].decide((backend, key_of(call)), decide)


def run_decided(ladder: Ladder, call: FnCall | UpdateCall | VerifyCall, decision: Decision):
    """Serve a non-empty ``call`` on ``ladder`` as decided (a call-time refusal is said by the ladder)."""
    return ladder(decision.signature, call, backend=decision.backend, first=decision.first)
