"""GDN kernel ladders: fastest kernel that serves the call, visible fallback otherwise.

Prefill (chunk) ladder, fastest first:

``npu_chunk``  ``torch.ops.npu.chunk_gated_delta_rule`` (SGLang 0.5.23's Ascend path)
``mega``       sgl-kernel-npu ``run_mega_chunk_gdn``, through a head plan
               (native / split / pad) when the head pair is outside its table
``triton``     sgl-kernel-npu ``fla.chunk.chunk_gated_delta_rule_npu``
``torch``      :func:`.reference.chunk_gdn_torch`, always available (the CPU path)

Decode ladder: ``npu_recurrent`` (``torch.ops.npu.recurrent_gated_delta_rule``) -> ``torch``.

Every rung takes already l2-normalised q / k, never writes its inputs (the
initial states handed to a kernel are fresh copies) and returns new tensors;
the public ops copy final states into a pool only after a rung succeeded, so a
refused call leaves the SSM pool untouched.
"""

from __future__ import annotations

import contextvars
import logging
from dataclasses import dataclass
from typing import Optional

import torch

from sglang_ascend_hybrid.logutil import log_once
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.gdn import capabilities as caps
from sglang_ascend_hybrid.ops.gdn import planner
from sglang_ascend_hybrid.ops.gdn.plan_exec import execute_plan
from sglang_ascend_hybrid.ops.gdn.reference import CHUNK_SIZE, chunk_gdn_torch, recurrent_step
from sglang_ascend_hybrid.ops.ladder import Ladder, Rung

logger = logging.getLogger(__name__)

OP_NPU_CHUNK = "chunk_gated_delta_rule"
OP_MEGA = "sgl_kernel_npu.fla.mega_chunk_gdn:run_mega_chunk_gdn"
OP_TRITON = "sgl_kernel_npu.fla.chunk:chunk_gated_delta_rule_npu"
OP_NPU_RECURRENT = "recurrent_gated_delta_rule"

# Attribute a wrapped kernel entry may carry, pointing at the original.
ORIGINAL_ATTR = "__sglang_ascend_hybrid_original__"
# True while a ladder rung calls a kernel entry that an integration hook wraps:
# the hook then passes straight through (no second ladder walk).
IN_LADDER: contextvars.ContextVar[bool] = contextvars.ContextVar("gdn_in_ladder", default=False)


@dataclass(frozen=True)
class GdnSignature:
    """Shape facts a kernel's acceptance depends on (hashable; names the head pair in logs)."""

    value_heads: int
    key_heads: int
    head_dim_k: int
    head_dim_v: int
    dtype: torch.dtype
    chunk_states: bool = False

    def __str__(self) -> str:
        dt = str(self.dtype).replace("torch.", "")
        extra = " +chunk_states" if self.chunk_states else ""
        return (f"(NumValueHeads, NumKeyHeads)=({self.value_heads}, {self.key_heads}) "
                f"K={self.head_dim_k} V={self.head_dim_v} {dt}{extra}")


@dataclass
class ChunkCall:
    """One prefill call, q / k already l2-normalised.  States value-first [N, Hv, V, K]."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    g: torch.Tensor
    beta: torch.Tensor
    cu_seqlens: torch.Tensor
    initial_state: Optional[torch.Tensor]
    scale: float
    chunk_states: bool = False  # also return the state at the start of every 64-token chunk

    @property
    def num_sequences(self) -> int:
        return self.cu_seqlens.numel() - 1

    def signature(self) -> GdnSignature:
        return GdnSignature(self.v.shape[2], self.q.shape[2], self.q.shape[3], self.v.shape[3],
                            self.q.dtype, self.chunk_states)

    def key_first_state(self) -> Optional[torch.Tensor]:
        """Fresh key-first [N, Hv, K, V] fp32 copy of the initial state (FLA-layout kernels)."""
        if self.initial_state is None:
            return None
        return self.initial_state.float().transpose(-1, -2).contiguous()

    def num_chunks(self, chunk: int = CHUNK_SIZE) -> int:
        lens = (self.cu_seqlens[1:] - self.cu_seqlens[:-1]).tolist()
        return sum((int(x) + chunk - 1) // chunk for x in lens)


# ---------------------------------------------------------------- refusals

def _npu_op_refusal(exc: BaseException) -> bool:
    text = str(exc)
    return isinstance(exc, RuntimeError) and any(
        s in text for s in ("161002", "unsupported", "not supported", "not support"))


def _mega_refusal(exc: BaseException) -> bool:
    return isinstance(exc, RuntimeError) and "GDN_ATTN_BACKEND_TRITON" in str(exc)


def _triton_refusal(exc: BaseException) -> bool:
    return isinstance(exc, (AssertionError, ValueError)) and any(
        s in str(exc) for s in ("does not support", "must be of shape", "is expected to be"))


def _resolve(name: str):
    fn = seam.lookup(name)
    return getattr(fn, ORIGINAL_ATTR, fn)


def _logged(op: str, rung: str, sig: GdnSignature, detail: str = "") -> None:
    log_once(logger, ("gdn-path", op, rung, sig),
             "sglang-ascend-hybrid: GDN %s %s runs on the %s kernel%s", op, sig, rung, detail)


# ---------------------------------------------------------------- prefill rungs

def _npu_chunk_supports(sig: GdnSignature, call: ChunkCall) -> bool:
    return (seam.serves(OP_NPU_CHUNK, call.q) and call.q.shape[0] == 1
            and caps.npu_op_supports(sig.value_heads, sig.key_heads, sig.head_dim_k, sig.head_dim_v, sig.dtype))


def _npu_chunk_run(call: ChunkCall):
    q, k, v = call.q[0], call.k[0], call.v[0]
    T, Hv, V, K = q.shape[0], v.shape[1], v.shape[2], q.shape[2]
    n = call.num_sequences
    state = (call.initial_state.float().clone() if call.initial_state is not None
             else q.new_zeros(n, Hv, V, K, dtype=torch.float32))
    lens = (call.cu_seqlens[1:] - call.cu_seqlens[:-1]).to(torch.int32)
    h = k.new_empty(call.num_chunks(), Hv, V, K)
    o, final = seam.call(OP_NPU_CHUNK, q.contiguous(), k.contiguous(), v.contiguous(),
                         beta=call.beta.reshape(1, T, Hv), initial_state=state, actual_seq_lengths=lens,
                         scale=call.scale, chunk_state=h, g=call.g.reshape(1, T, Hv).float())
    _logged("prefill", "npu_chunk", call.signature())
    return o.reshape(1, T, Hv, V).to(call.q.dtype), final.float(), (h.float() if call.chunk_states else None)


def plan_for_layout(value_heads: int, key_heads: int, head_dim_k: int, head_dim_v: int, dtype: torch.dtype,
                    *, predicate=None) -> planner.Plan:
    """The mega-kernel head plan the runtime uses for a layout (shared with the ``plan`` CLI)."""
    if head_dim_k != head_dim_v:
        return planner.Plan("none", (), float("inf"), value_heads, key_heads)
    return planner.plan_for(value_heads, key_heads, head_dim_k, dtype, predicate=predicate)


def _plan(sig: GdnSignature) -> planner.Plan:
    return plan_for_layout(sig.value_heads, sig.key_heads, sig.head_dim_k, sig.head_dim_v, sig.dtype)


def _mega_supports(sig: GdnSignature, call: ChunkCall) -> bool:
    # The mega kernel's per-chunk states are per 128 tokens: no 64-token chunk states.
    return (not sig.chunk_states and seam.serves(OP_MEGA, call.q) and call.q.shape[0] == 1
            and _plan(sig).strategy != "none")


def _mega_run(call: ChunkCall):
    sig = call.signature()
    plan = _plan(sig)
    kernel = _resolve(OP_MEGA)
    cu32 = call.cu_seqlens.to(torch.int32)

    def launch(q, k, v, g, beta, state):
        state_kf = None if state is None else state.float().transpose(-1, -2).contiguous()
        out = kernel(q.contiguous(), k.contiguous(), v.contiguous(), g.float().contiguous(),
                     beta.contiguous(), call.scale, state_kf, True, cu32)
        return out[1], out[3].transpose(-1, -2)

    o, final = execute_plan(plan, launch, call.q, call.k, call.v, call.g, call.beta, call.initial_state,
                            num_sequences=call.num_sequences)
    _logged("prefill", "mega", sig, f" via {plan.strategy} plan launches={list(plan.launches)} "
                                    f"overhead={plan.overhead:.2f}")
    return o.to(call.q.dtype), final.float().contiguous(), None


def _triton_supports(sig: GdnSignature, call: ChunkCall) -> bool:
    return (seam.serves(OP_TRITON, call.q) and call.q.shape[0] == 1
            and caps.triton_supports(sig.value_heads, sig.key_heads, sig.dtype))


def _triton_run(call: ChunkCall):
    fn = _resolve(OP_TRITON)
    token = IN_LADDER.set(True)
    try:
        o, final, h = fn(call.q, call.k, call.v, call.g.float(), call.beta, scale=call.scale,
                         initial_state=call.key_first_state(), output_final_state=True,
                         cu_seqlens=call.cu_seqlens, head_first=False, use_qk_l2norm_in_kernel=False)
    finally:
        IN_LADDER.reset(token)
    Hv, V, K = call.v.shape[2], call.v.shape[3], call.q.shape[3]
    h_out = None
    if call.chunk_states:
        h_out = h.reshape(-1, Hv, K, V).transpose(-1, -2).float().contiguous()
    _logged("prefill", "triton", call.signature())
    return o.to(call.q.dtype), final.float().transpose(-1, -2).contiguous(), h_out


def _torch_run(call: ChunkCall):
    o, final, h = chunk_gdn_torch(call.q, call.k, call.v, call.g, call.beta, cu_seqlens=call.cu_seqlens,
                                  initial_state=call.initial_state, scale=call.scale,
                                  chunk_states=call.chunk_states)
    _logged("prefill", "torch", call.signature())
    return o, final, h


PREFILL = Ladder("gdn_prefill", [
    Rung("npu_chunk", lambda sig, call: _npu_chunk_supports(sig, call), _npu_chunk_run, _npu_op_refusal),
    Rung("mega", lambda sig, call: _mega_supports(sig, call), _mega_run, _mega_refusal),
    Rung("triton", lambda sig, call: _triton_supports(sig, call), _triton_run, _triton_refusal),
    Rung("torch", lambda sig, call: True, _torch_run),
])


# ---------------------------------------------------------------- decode rungs

@dataclass
class StepCall:
    """One decode step: one token per sequence; q / k l2-normalised; states gathered (fresh)."""

    q: torch.Tensor       # [B, Hk, K]
    k: torch.Tensor       # [B, Hk, K]
    v: torch.Tensor       # [B, Hv, V]
    g: torch.Tensor       # [B, Hv]
    beta: torch.Tensor    # [B, Hv]
    states: torch.Tensor  # [B, Hv, V, K] fresh copy, fp32
    scale: float

    def signature(self) -> GdnSignature:
        return GdnSignature(self.v.shape[1], self.q.shape[1], self.q.shape[2], self.v.shape[2], self.q.dtype)


def _npu_recurrent_supports(sig: GdnSignature, call: StepCall) -> bool:
    return seam.serves(OP_NPU_RECURRENT, call.q) and caps.npu_op_supports(
        sig.value_heads, sig.key_heads, sig.head_dim_k, sig.head_dim_v, sig.dtype)


def _npu_recurrent_run(call: StepCall):
    B, Hk, K = call.q.shape
    Hv, V = call.v.shape[1], call.v.shape[2]
    mix = torch.cat([call.q.reshape(B, 1, -1), call.k.reshape(B, 1, -1), call.v.reshape(B, 1, -1)], -1)
    states = call.states.clone()  # the kernel updates in place: never the caller's pool
    idx = torch.arange(B, dtype=torch.int32, device=call.q.device)
    ones = torch.ones(B, dtype=torch.int32, device=call.q.device)
    o = seam.call(OP_NPU_RECURRENT, mix.contiguous(), states, beta=call.beta.reshape(B, 1, Hv).to(torch.bfloat16),
                  scale=call.scale, actual_seq_lengths=ones, ssm_state_indices=idx.view(B, 1), nk=Hk, nv=Hv,
                  intermediate_state=None, cache_indices=idx, num_accepted_tokens=ones,
                  g=call.g.reshape(B, 1, Hv).float())
    _logged("decode", "npu_recurrent", call.signature())
    return o.reshape(B, Hv, V).float(), states.float()


def _torch_step_run(call: StepCall):
    _logged("decode", "torch", call.signature())
    return recurrent_step(call.q, call.k, call.v, call.g, call.beta, call.states, scale=call.scale)


DECODE = Ladder("gdn_decode", [
    Rung("npu_recurrent", lambda sig, call: _npu_recurrent_supports(sig, call), _npu_recurrent_run,
         _npu_op_refusal),
    Rung("torch", lambda sig, call: True, _torch_step_run),
])


def prefill_rungs() -> tuple[str, ...]:
    return PREFILL.names


def decode_rungs() -> tuple[str, ...]:
    return DECODE.names


def run_prefill(call: ChunkCall, backend: str = "auto", *, skip: tuple = ()):
    """Walk the prefill ladder (``skip``: rung names not to try, e.g. the caller's own kernel)."""
    sig = call.signature()
    if backend != "auto" or not skip:
        return PREFILL(sig, call, backend=backend)
    # Mark the skipped rungs as unsuitable for this call only, via the capability check.
    for name in skip:
        PREFILL.rung(name)  # validates the names
    sub = _SUBLADDERS.get(tuple(skip))
    if sub is None:
        sub = Ladder(PREFILL.op, [r for r in PREFILL.rungs if r.name not in skip])
        _SUBLADDERS[tuple(skip)] = sub
    return sub(sig, call)


_SUBLADDERS: dict[tuple, Ladder] = {}


def forget_refusals() -> None:
    """Forget every refusal the GDN ladders learnt (tests)."""
    for ladder in (PREFILL, DECODE, *_SUBLADDERS.values()):
        ladder.forget_refusals()


def run_decode(call: StepCall, backend: str = "auto"):
    return DECODE(call.signature(), call, backend=backend)
