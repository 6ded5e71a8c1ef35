"""The gates of a GDN target-verify step: the ``gdn_verify_gates`` ladder.

SGLang's Ascend GDN backend (0.5.20 .. 0.5.23, ``forward_extend``'s target-verify branch) computes a verify
step's gates with sgl-kernel-npu's ``fused_gdn_gating_kernel_without_sigmoid(A_log, a, b, dt_bias)`` over
the batch's ``B * draft`` tokens: ``g = -exp(A_log) * softplus(a + dt_bias)`` (fp32 ``[1, T, H]``) and b as
given (the verify op applies the sigmoid).  That kernel's tiling raises for most token counts that are not
a power-of-two multiple of its per-program share (:func:`..contract.without_sigmoid_tiling_reason`), so a
server with MTP on fails at those batch sizes, in a graph capture too.  Rungs for g (b is returned as given
by each):

``without_sigmoid``  the caller's kernel (the hooked ``fused_gdn_gating_kernel_without_sigmoid``), where its
                     tiling serves the token count (a build that still raises the tiling error is marked
                     refused for the signature and the next rung serves)
``npu_gating``       sgl-kernel-npu's ``fused_gdn_gating_npu`` (contract: ``gating_refusal_reason``), on
                     contiguous a / b: the same g, its batch tiled in powers of two (every token count);
                     its ``beta_output`` (post-sigmoid) is not used
``torch``            the same formula in torch, fp32

Capture-safe: metadata only, no host read; decided once per metadata (:mod:`...ops.decisions`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.decisions import Decisions, checked_first
from sglang_ascend_hybrid.ops.errors import bad_input
from sglang_ascend_hybrid.ops.gdn import contract as caps
from sglang_ascend_hybrid.ops.gdn.contract import OP_GATING, OP_GATING_WITHOUT_SIGMOID
from sglang_ascend_hybrid.ops.gdn.gating import decay_in_torch, decay_on_kernel
from sglang_ascend_hybrid.ops.gdn.signature import log_path
from sglang_ascend_hybrid.ops.ladder import Absent, Ladder, Rung
from sglang_ascend_hybrid.ops.signature import Signature, dtype_name
from sglang_ascend_hybrid.ops.tensors import as_shape

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class GatesSignature(Signature):
    """What the gating kernels' acceptance depends on besides the token count (which the without-sigmoid
    kernel's predicate reads from the call): ``(heads=6, bfloat16)``."""

    heads: int
    dtype: torch.dtype

    def __str__(self) -> str:
        return f"(heads={self.heads}, {dtype_name(self.dtype)})"


@dataclass
class VerifyGatesCall:
    """One verify step's gating inputs: a / b ``[T, H]`` (T = requests x draft tokens), A_log / dt_bias
    ``[H]``; ``kernel``: the without-sigmoid kernel SGLang called (None: no such rung)."""

    A_log: torch.Tensor
    a: torch.Tensor
    b: torch.Tensor
    dt_bias: torch.Tensor
    softplus_beta: float = 1.0
    threshold: float = 20.0
    kernel: Optional[Callable] = None
    _signature: Optional[GatesSignature] = None   # the kept decision's (metadata only)

    @property
    def tokens(self) -> int:
        return self.a.shape[0]

    @property
    def heads(self) -> int:
        return self.a.shape[1]

    def signature(self) -> GatesSignature:
        if self._signature is None:
            self._signature = GatesSignature(self.heads, self.a.dtype)
        return self._signature


def _fail(name: str, value, expected: str):
    raise bad_input(name, value, expected, op="GDN verify gates")


def check_gates_inputs(call: VerifyGatesCall) -> None:
    """Shapes and dtypes (metadata only): what the kernels' hosts unpack and read."""
    for name in ("A_log", "a", "b", "dt_bias"):
        t = getattr(call, name)
        if not isinstance(t, torch.Tensor):
            _fail(name, repr(t), "a torch.Tensor")
        if not t.dtype.is_floating_point:
            _fail(f"{name}.dtype", t.dtype, "a floating-point dtype")
    if call.a.dim() != 2:
        _fail("a", f"shape {tuple(call.a.shape)}", "[T, H] (the kernels' hosts unpack batch, num_heads = a.shape)")
    T, H = call.a.shape
    if call.b.numel() != T * H:
        _fail("b", f"shape {tuple(call.b.shape)}", f"{T} x {H} = {T * H} entries, as a")
    for name in ("A_log", "dt_bias"):
        if getattr(call, name).numel() != H:
            _fail(name, f"shape {tuple(getattr(call, name).shape)}", f"{H} entries (one per head)")


# ---------------------------------------------------------------- rungs

def _without_sigmoid_supports(sig: GatesSignature, call: VerifyGatesCall) -> Optional[str]:
    if call.kernel is None:
        return Absent("no without-sigmoid kernel was handed to this call")
    return caps.without_sigmoid_tiling_reason(call.tokens, call.heads)


def _without_sigmoid_prepare(call: VerifyGatesCall):
    """The without-sigmoid rung for every call of ``call``'s metadata (its signature read once)."""
    sig = call.signature()

    def run(c: VerifyGatesCall) -> tuple[torch.Tensor, torch.Tensor]:
        out = c.kernel(c.A_log, c.a, c.b, c.dt_bias, c.softplus_beta, c.threshold)
        log_path("verify gates", "without_sigmoid", sig)
        return out

    return run


def _npu_supports(sig: GatesSignature, call: VerifyGatesCall) -> Optional[str]:
    if not seam.serves(OP_GATING, call.a, call.b, call.A_log, call.dt_bias):
        return Absent(f"{OP_GATING} is not installed for these tensors")
    if call.tokens == 0:   # a grid of 0 programs: what the NPU does then was not read
        return "an empty batch (it would launch a grid of 0 programs)"
    return caps.gating_refusal_reason(call.heads, call.A_log, call.dt_bias)


def _npu_prepare(call: VerifyGatesCall):
    """The npu_gating rung for every call of ``call``'s metadata (tokens, heads and signature read once)."""
    sig, T, H = call.signature(), call.tokens, call.heads

    def run(c: VerifyGatesCall) -> tuple[torch.Tensor, torch.Tensor]:
        g = decay_on_kernel(c.A_log, c.a, c.b, c.dt_bias, T, H, c.softplus_beta, c.threshold)
        log_path("verify gates", "npu_gating", sig)
        return as_shape(g, (1, T, H)), c.b

    return run


def _torch_run(call: VerifyGatesCall) -> tuple[torch.Tensor, torch.Tensor]:
    T, H = call.tokens, call.heads
    g = decay_in_torch(call.A_log, call.a, call.dt_bias, T, H, call.softplus_beta, call.threshold)
    log_path("verify gates", "torch", call.signature())
    return g.reshape(1, T, H), call.b


def _rejection(rung: str, sig: GatesSignature, reason) -> str:
    return f"sglang-ascend-hybrid: GDN verify gates {sig} cannot use the {rung} kernel: {reason}"


VERIFY_GATES = Ladder("gdn_verify_gates", [
    # runs the kernel the hook is handed (the op's name would resolve to the hook once it is applied)
    Rung("without_sigmoid", _without_sigmoid_supports, is_refusal=caps.is_gating_tiling_refusal,
         device=True, ops=(OP_GATING_WITHOUT_SIGMOID,), prepare=_without_sigmoid_prepare),
    Rung("npu_gating", _npu_supports, device=True, ops=(OP_GATING,), prepare=_npu_prepare),
    Rung("torch", lambda sig, call: None, _torch_run),
], rejection=_rejection, log=logger)

_DECIDED = Decisions("gdn verify gates")


def verify_gates(A_log: torch.Tensor, a: torch.Tensor, b: torch.Tensor, dt_bias: torch.Tensor,
                 softplus_beta: float = 1.0, threshold: float = 20.0, *,
                 kernel: Optional[Callable] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """A verify step's ``(g fp32 [1, T, H], b as given)`` through :data:`VERIFY_GATES`: ``kernel`` (SGLang's
    ``fused_gdn_gating_kernel_without_sigmoid``) where its tiling serves ``T``, else ``fused_gdn_gating_npu``,
    else torch.  a / b ``[T, H]``; A_log / dt_bias ``[H]``."""
    call = VerifyGatesCall(A_log, a, b, dt_bias, float(softplus_beta), float(threshold), kernel)
    call._signature, first, runner = checked_first(_DECIDED, VERIFY_GATES, call, "auto", check_gates_inputs,
                                                   VERIFY_GATES.runner)
    return VERIFY_GATES(call._signature, call, first=first, runner=runner)


def untiled_batches(heads: int, draft_tokens: int, max_batch: int) -> list[tuple[int, int]]:
    """The batch sizes up to ``max_batch`` whose verify step (``batch * draft_tokens`` tokens of ``heads`` value
    heads) the without-sigmoid kernel cannot tile, as ``(first, last)`` ranges: the steps the ladder's next rung
    serves (the ``plan`` CLI)."""
    ranges: list[tuple[int, int]] = []
    for batch in range(1, max_batch + 1):
        if caps.without_sigmoid_tiling_reason(batch * draft_tokens, heads) is None:
            continue
        if ranges and ranges[-1][1] == batch - 1:
            ranges[-1] = (ranges[-1][0], batch)
        else:
            ranges.append((batch, batch))
    return ranges
