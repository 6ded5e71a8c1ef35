"""The GDN prefill ladder (SGLang's ``extend``): fastest kernel that serves the call, visible fallback otherwise.

Rungs, fastest first:

``npu_chunk``  ``torch.ops.npu.chunk_gated_delta_rule`` (SGLang 0.5.23's Ascend path)
``mega``       sgl-kernel-npu ``run_mega_chunk_gdn``, through a head plan (:mod:`.planner`;
               native / split / pad) when the head pair is outside its table; only
               where ``torch.ops.npu.mega_chunk_gdn`` is registered (not on Ascend 950
               builds) and, per call, where every input and the initial state fit fp16's
               range (its wrapper casts them to fp16); a call whose outputs come back
               non-finite goes to the next rung
``triton``     sgl-kernel-npu ``fla.chunk.chunk_gated_delta_rule_npu`` (:mod:`.entries`); when that
               entry runs the mega kernel itself (``GDN_USE_MEGA_GDN=1``; by default in
               releases before 2026.6.1), the rung takes the mega kernel's contract, and where its
               mode decides silently the installed entry is probed (:mod:`.chunk_stride_probe`)
``torch``      :func:`sglang_ascend_hybrid.ops.gdn.torch_impl.chunk_gdn_torch`, always available (the CPU path)

Capability predicates come from :mod:`sglang_ascend_hybrid.ops.gdn.contract` (the contracts) and the
device facts of the seam (chip generation, installed kernels).  A rung never lowers the precision of
the SSM state pool: the npu_chunk op keeps bf16 states on A2/A3 (fp32 only on Ascend 950) and the
mega kernel fp16 states, so an fp32 pool's prefill runs on triton / torch there.

The mega and triton rungs are handed the call's non-empty sequences only and the empty ones'
results are put back (:func:`.call.without_empty_sequences`: both kernels mishandle an empty
sequence); the npu_chunk op refuses empty sequences itself.

Every rung takes already l2-normalised q / k, never writes its inputs (the npu_chunk op
only reads its initial state; the other kernels are handed fresh copies) and returns new
tensors: final and chunk states in fp32 or in a state dtype that keeps the pool's precision;
the public ops copy final states into a pool only after a rung succeeded, so a
refused call leaves the SSM pool untouched.
"""

from __future__ import annotations

import itertools
import logging
import os
from typing import Optional

import torch

from sglang_ascend_hybrid.logutil import log_once
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.gdn import contract as caps
from sglang_ascend_hybrid.ops.gdn.contract import OP_MEGA, OP_NPU_CHUNK, OP_TRITON
from sglang_ascend_hybrid.ops.gdn.prefill import chunk_stride_probe, planner
from sglang_ascend_hybrid.ops.gdn.prefill.call import ChunkCall, chunk_offsets, on_batched, without_empty_sequences
from sglang_ascend_hybrid.ops.gdn.prefill.entries import call_triton_entry, resolve_entry
from sglang_ascend_hybrid.ops.gdn.prefill.plan_exec import execute_plan
from sglang_ascend_hybrid.ops.gdn.signature import GdnSignature, keeps_precision, log_path, rejection_line
from sglang_ascend_hybrid.ops.gdn.torch_impl import chunk_gdn_torch
from sglang_ascend_hybrid.ops.ladder import Absent, DeclinedCall, Ladder, Rung
from sglang_ascend_hybrid.ops.signature import dtype_name
from sglang_ascend_hybrid.ops.step_cache import StepValue
from sglang_ascend_hybrid.ops.tensors import as_dtype

logger = logging.getLogger(__name__)


def is_triton_entry_refusal(exc: BaseException) -> bool:
    """A refusal of sgl-kernel-npu's Triton chunk entry, by its own checks or by the mega kernel it may run
    inside (the texts of :mod:`sglang_ascend_hybrid.ops.gdn.contract`)."""
    return caps.is_mega_refusal(exc) or caps.is_triton_refusal(exc)


# ---------------------------------------------------------------- prefill rungs

def npu_chunk_state_dtype(pool_dtype: Optional[torch.dtype], chip: Optional[str]) -> Optional[torch.dtype]:
    """The state dtype the npu_chunk rung hands the op for a pool of ``pool_dtype`` on ``chip``,
    or None when no accepted dtype keeps the pool's precision (fp32 pools on A2/A3)."""
    for dtype in caps.npu_chunk_state_dtypes(chip):
        if pool_dtype is None or dtype == pool_dtype or (
                keeps_precision(dtype, pool_dtype) and pool_dtype != torch.float16):
            return dtype
    return None


def npu_chunk_reason(sig: GdnSignature, chip: Optional[str]) -> Optional[str]:
    """Why the npu_chunk rung cannot serve any call of ``sig`` on ``chip`` (None: it can, given
    non-empty sequences).  The rung's predicate asks this; so does the ``plan`` CLI."""
    state_dtype = npu_chunk_state_dtype(sig.state_dtype, chip)
    if state_dtype is None and sig.state_dtype == torch.float32:
        return (f"it keeps {dtype_name(sig.state_dtype)} states only on Ascend 950 (chip: {chip or 'unknown'}); "
                "using a kernel that keeps the pool's precision")
    if state_dtype is None:
        accepted = " or ".join(dtype_name(d) for d in caps.npu_chunk_state_dtypes(chip))
        return f"it keeps {accepted} states on chip {chip or 'unknown'}, not the pool's {dtype_name(sig.state_dtype)}"
    return caps.npu_chunk_refusal_reason(sig.value_heads, sig.key_heads, sig.head_dim_k, sig.head_dim_v,
                                         sig.dtype, state_dtype, chip)


def _npu_chunk_supports(sig: GdnSignature, call: ChunkCall) -> Optional[str]:
    if not (seam.serves(OP_NPU_CHUNK, call.q) and (call.packed or call.q.shape[0] == 1)):
        return Absent(f"torch.ops.npu.{OP_NPU_CHUNK} is not installed for these tensors")
    chip = seam.chip_generation()
    reason = npu_chunk_reason(sig, chip)
    if reason is not None:
        return reason
    state_dtype = npu_chunk_state_dtype(sig.state_dtype, chip)
    reason = caps.npu_chunk_refusal_reason(sig.value_heads, sig.key_heads, sig.head_dim_k, sig.head_dim_v,
                                           sig.dtype, state_dtype, chip, call.lengths)  # this call's lengths
    return None if reason is None else Absent(reason)  # a value of this call, not of the signature: not said


# The op's actual_seq_lengths, the chunk count and the chunk_state rows: the same for every layer of a step
# (derived from its offsets tensor, whose values the call's lengths were read from)
_STEP_LENGTHS = StepValue("gdn npu_chunk lengths")


def _npu_chunk_prepare(call: ChunkCall):
    """The npu_chunk rung for every call of ``call``'s metadata and lengths: shapes, the state dtype it hands
    the op (and whether the caller's rows go in as they are) and the signature decided once."""
    T, Hv, V, K = call.q.shape[-3], call.v.shape[-2], call.v.shape[-1], call.q.shape[-1]
    n, sig, out_dtype, packed = call.num_sequences, call.signature(), call.q.dtype, call.packed
    state_dtype = npu_chunk_state_dtype(sig.state_dtype, seam.chip_generation())
    # the op reads the initial state and returns the final one apart (SKN-747 host: final_state is its
    # own output), so the caller's rows go in as they are when their dtype and layout are the op's
    initial = call.initial_state
    state_as_given = initial is not None and initial.dtype == state_dtype and initial.is_contiguous()

    def run(c: ChunkCall):
        q, k, v, g, beta = (c.q, c.k, c.v, c.g, c.beta) if packed else (c.q[0], c.k[0], c.v[0], c.g[0], c.beta[0])
        state = (c.initial_state if state_as_given else
                 c.initial_state.to(state_dtype).contiguous() if c.initial_state is not None
                 else q.new_zeros(n, Hv, V, K, dtype=state_dtype))
        lens, num_chunks, rows = _STEP_LENGTHS.get((c.cu_seqlens,), (T, q.device), lambda: (
            torch.tensor(c.lengths, dtype=torch.int32, device=q.device), c.num_chunks(),
            max(c.num_chunks(), caps.npu_chunk_min_chunk_states(T, n))))
        h = q.new_empty(rows, Hv, V, K, dtype=state_dtype)
        o, final = seam.call(OP_NPU_CHUNK, q.contiguous(), k.contiguous(), v.contiguous(),
                             beta=as_dtype(beta, torch.bfloat16).contiguous(), initial_state=state,
                             actual_seq_lengths=lens, scale=c.scale, chunk_state=h,
                             g=as_dtype(g, torch.float32).contiguous())
        log_path("prefill", "npu_chunk", sig)
        # final and h in the op's state dtype, which keeps the pool's precision (no fp32 round trip)
        return (as_dtype(o if packed else o.reshape(1, T, Hv, V), out_dtype), final,
                h[:num_chunks] if c.chunk_states else None)

    return run


def plan_for_layout(value_heads: int, key_heads: int, head_dim_k: int, head_dim_v: int, dtype: torch.dtype,
                    *, predicate=None) -> planner.Plan:
    """The mega-kernel head plan the runtime uses for a layout (shared with the ``plan`` CLI)."""
    if head_dim_k != head_dim_v:
        return planner.Plan("none", (), float("inf"), value_heads, key_heads)
    return planner.plan_for(value_heads, key_heads, head_dim_k, dtype, predicate=predicate)


def _plan(sig: GdnSignature) -> planner.Plan:
    return plan_for_layout(sig.value_heads, sig.key_heads, sig.head_dim_k, sig.head_dim_v, sig.dtype)


def _mega_state_reason(rung: str, sig: GdnSignature) -> Optional[str]:
    """The mega kernel keeps the state in fp16: never for a pool of higher precision (fp32)."""
    if keeps_precision(caps.MEGA_STATE_DTYPE, sig.state_dtype):
        return None
    hint = ""
    if rung == "triton":  # the entry runs the mega kernel inside: its own Triton path would keep fp32
        hint = (f"; without {caps.TRITON_MEGA_ENV}=1 (sgl-kernel-npu 2026.6.1 and later) its Triton path keeps the "
                "pool's precision")
    return (f"it keeps the state in {dtype_name(caps.MEGA_STATE_DTYPE)}, below the pool's "
            f"{dtype_name(sig.state_dtype)}{hint}")


def _fits_fp16(rung: str, sig: GdnSignature, call: ChunkCall) -> Optional[str]:
    """The mega wrapper casts q / k / v / beta and the initial state to fp16 (``t.half()``): a call
    with a value beyond fp16's range (or a non-finite one) is not handed to it.  Asked last, for
    this call only (values, not shapes: the rung stays available for the signature)."""
    worst = call.max_abs()
    if caps.fits_mega_range(worst):
        return None
    # a value of this call (said in its own words, once per signature), not a fact of the signature
    log_once(logger, ("gdn-range", rung, sig),
             "sglang-ascend-hybrid: GDN prefill %s skips the %s kernel for calls whose inputs or initial "
             "state exceed fp16's range (max |x| = %s > %s; its fp16 casts would give inf / NaN where the "
             "other kernels stay finite)", sig, rung, worst, caps.MEGA_MAX_ABS)
    return Absent(f"this call's inputs or initial state exceed fp16's range (max |x| = {worst} > {caps.MEGA_MAX_ABS})")


def _finite_or_decline(rung: str, *tensors) -> None:
    """Outputs of a 16-bit-range kernel that came back non-finite from finite inputs (fp16 overflow
    inside it): this call goes to the next rung, nothing was written (one host read)."""
    present = [t for t in tensors if t is not None and t.numel()]
    if present and not bool(torch.stack([torch.isfinite(t).all() for t in present]).all()):
        raise DeclinedCall(f"the {rung} kernel returned non-finite outputs from inputs within fp16's range "
                           f"(an fp16 overflow inside the kernel)")


def mega_reason(sig: GdnSignature, predicate=None) -> Optional[str]:
    """Why the mega rung cannot serve any call of ``sig`` (None: it can, given inputs within fp16's
    range).  ``predicate``: the kernel's accepted head pairs (default: the installed kernel's).  The
    rung's predicate asks this; so does the ``plan`` CLI."""
    if sig.chunk_states:  # its per-chunk states are per 128 tokens
        return "its per-chunk states are per 128 tokens, and 64-token chunk states were asked for"
    reason = _mega_state_reason("mega", sig)
    if reason is not None:
        return reason
    if not caps.mega_supports_layout(sig.head_dim_k, sig.head_dim_v, sig.dtype):
        return f"it takes head dim {caps.MEGA_HEAD_DIM} and fp16 / bf16 inputs only"
    if plan_for_layout(sig.value_heads, sig.key_heads, sig.head_dim_k, sig.head_dim_v, sig.dtype,
                       predicate=predicate).strategy == "none":
        return "no head plan of launches it accepts within the overhead limit (SGLANG_ASCEND_HYBRID_GDN_MAX_OVERHEAD)"
    return None


def _mega_supports(sig: GdnSignature, call: ChunkCall) -> Optional[str]:
    if not seam.serves(OP_MEGA, call.q) or call.q.shape[0] != 1:
        return Absent("sgl-kernel-npu's run_mega_chunk_gdn is not installed for these tensors")
    return mega_reason(sig) or _fits_fp16("mega", sig, call)


def _mega_run(call: ChunkCall):
    sig = call.signature()
    plan = _plan(sig)
    kernel = resolve_entry(OP_MEGA)
    cu32 = call.cu_seqlens.to(torch.int32)

    def launch(q, k, v, g, beta, state):
        state_kf = None if state is None else state.float().transpose(-1, -2).contiguous()
        out = kernel(q.contiguous(), k.contiguous(), v.contiguous(), g.float().contiguous(),
                     beta.contiguous(), call.scale, state_kf, True, cu32)
        return out[1], out[3].transpose(-1, -2)

    o, final = execute_plan(plan, launch, call.q, call.k, call.v, call.g, call.beta, call.initial_state,
                            num_sequences=call.num_sequences)
    _finite_or_decline("mega", o, final)
    log_path("prefill", "mega", sig, f" via {plan.strategy} plan launches={list(plan.launches)} "
                                    f"overhead={plan.overhead:.2f}")
    return o.to(call.q.dtype), final.float().contiguous(), None


def triton_runs_mega(sig: GdnSignature, environ=None, mega_present: Optional[bool] = None) -> bool:
    """Whether sgl-kernel-npu's Triton entry, as installed, runs the mega kernel for this signature
    now (its release and the environment decide, read at every call as the entry reads them:
    :func:`caps.triton_mega_mode`; ``mega_present`` None: whether the seam has the mega wrapper).
    The plugin never changes the environment for a call (it is process-wide: another thread's call
    would see it); it takes the mega kernel's contract instead."""
    mode = caps.triton_mega_mode(mega_present=seam.available(OP_MEGA) if mega_present is None else mega_present)
    return caps.triton_runs_mega(mode, os.environ if environ is None else environ, sig.value_heads,
                                 sig.key_heads, sig.head_dim_k, sig.head_dim_v)


def triton_reason(sig: GdnSignature, runs_mega: bool, mega_present: bool) -> Optional[str]:
    """Why the triton rung cannot serve any call of ``sig`` (None: it can, given inputs within fp16's
    range when ``runs_mega``), the entry running the mega kernel inside or not (``runs_mega``) and
    ``torch.ops.npu.mega_chunk_gdn`` present or not.  The rung's predicate asks this (after the
    stride probe where :func:`triton_needs_probe`); so does the ``plan`` CLI."""
    if not caps.triton_supports(sig.value_heads, sig.key_heads, sig.dtype, sig.head_dim_k, sig.head_dim_v):
        return (f"it takes fp16 / bf16 inputs, value heads a multiple of the key heads and head dims <= "
                f"{caps.TRITON_MAX_HEAD_DIM}")
    if not runs_mega:
        return None
    why = None
    if not mega_present:
        why = "this sgl-kernel-npu build has no torch.ops.npu.mega_chunk_gdn (Ascend 950 builds leave it out)"
    elif sig.chunk_states:
        why = "its per-chunk states are per 128 tokens, and 64-token chunk states were asked for"
    elif not caps.mega_supports_layout(sig.head_dim_k, sig.head_dim_v, sig.dtype):
        why = f"the mega kernel takes head dim {caps.MEGA_HEAD_DIM} only"
    elif not caps.mega_variant().supports(sig.value_heads, sig.key_heads):
        why = "the installed mega kernel refuses this head pair (the Triton entry does not plan heads)"
    if why is not None:
        return (f"sgl-kernel-npu's Triton entry runs the mega kernel here ({caps.TRITON_MEGA_ENV}=1 or its "
                f"release's default) and {why}")
    return _mega_state_reason("triton", sig)


def triton_rounds_chunk_states(sig: GdnSignature) -> bool:
    """The entry's Triton path stores its per-chunk states in k's dtype: ``chunk_gated_delta_rule_fwd_h_npu``
    allocates ``h = k.new_empty(B, NT, H, K, V)`` and stores the fp32 running state into it
    (``b_h1_bv*.to(p_h1_bv*.dtype.element_ty)``; SKN f425bdf1 and 2749babc ``fla/chunk_delta_h.py``),
    while the running state and the final state stay fp32.  Below a pool of higher precision, h is a
    rounded state."""
    return sig.chunk_states and not keeps_precision(sig.dtype, sig.state_dtype)


def triton_needs_probe(sig: GdnSignature, runs_mega: bool) -> bool:
    """Where the entry's mode decides silently between right and wrong (64- vs 128-token chunk states,
    fp32 vs fp16 states), the installed entry is probed instead of trusting the release and settings."""
    return not runs_mega and (sig.chunk_states or sig.state_dtype == torch.float32)


def probe_triton_entry_before_serving(value_heads: int, key_heads: int, head_dim_k: int, head_dim_v: int,
                                      dtype: torch.dtype, device):
    """The chunk-stride probe of the Triton entry for a model's signature at backend construction
    (a prefill could run it too, but not in a process whose capture check cannot be answered);
    None when the entry cannot serve tensors on ``device`` or the signature is not one it takes."""
    if not (seam.serves(OP_TRITON, torch.empty(0, device=device))
            and caps.triton_supports(value_heads, key_heads, dtype, head_dim_k, head_dim_v)):
        return None
    return chunk_stride_probe.stride_verdict(value_heads, key_heads, head_dim_k, head_dim_v, dtype, device,
                                             before_serving=True)


def _triton_supports(sig: GdnSignature, call: ChunkCall) -> Optional[str]:
    if not (seam.serves(OP_TRITON, call.q) and call.q.shape[0] == 1):
        return Absent("sgl-kernel-npu's chunk_gated_delta_rule_npu is not installed for these tensors")
    if not caps.triton_supports(sig.value_heads, sig.key_heads, sig.dtype, sig.head_dim_k, sig.head_dim_v):
        return Absent("it takes fp16 / bf16 inputs and head dims <= 128")  # not said before either
    if triton_rounds_chunk_states(sig) and call.exact_chunks is None:  # no probe needed to know
        return (f"its per-chunk states are stored in the inputs' {dtype_name(sig.dtype)}, "
                f"below the pool's {dtype_name(sig.state_dtype)}, and the call names no chunks whose states "
                "it needs exact (exact_chunks)")
    runs_mega = triton_runs_mega(sig)
    if triton_needs_probe(sig, runs_mega):
        verdict = chunk_stride_probe.stride_verdict(sig.value_heads, sig.key_heads, sig.head_dim_k,
                                                    sig.head_dim_v, sig.dtype, call.q.device)
        if verdict is None or verdict.verdict not in (chunk_stride_probe.STRIDE_64, chunk_stride_probe.STRIDE_128):
            return ("the probe of its chunk-state stride has no usable verdict "
                    f"({'not run yet' if verdict is None else verdict.verdict})")
        runs_mega = verdict.verdict == chunk_stride_probe.STRIDE_128   # what the installed entry does now
    reason = triton_reason(sig, runs_mega, seam.serves(OP_MEGA, call.q))
    if reason is not None:
        return reason
    return _fits_fp16("triton", sig, call) if runs_mega else None


def _triton_run(call: ChunkCall):
    o, final, h = call_triton_entry(call.q, call.k, call.v, call.g, call.beta, scale=call.scale,
                                    initial_state=call.key_first_state(), cu_seqlens=call.cu_seqlens)
    Hv, V, K = call.v.shape[2], call.v.shape[3], call.q.shape[3]
    h_out = None
    if call.chunk_states:
        expected = call.num_chunks(caps.TRITON_CHUNK)
        if h.dim() != 5 or h.shape[1] != expected:  # e.g. the mega kernel's 128-token states
            raise RuntimeError(f"the Triton entry returned h of shape {tuple(h.shape)}; expected {expected} "
                               f"{caps.TRITON_CHUNK}-token chunk states [1, {expected}, {Hv}, {K}, {V}]")
        h_out = h.reshape(-1, Hv, K, V).transpose(-1, -2).float().contiguous()
        if triton_rounds_chunk_states(call.signature()):
            _exact_chunk_states(call, h_out)
    if triton_runs_mega(call.signature()):
        _finite_or_decline("triton", o, final)
    log_path("prefill", "triton", call.signature())
    return o.to(call.q.dtype), final.float().transpose(-1, -2).contiguous(), h_out


def _exact_chunk_states(call: ChunkCall, h_out: torch.Tensor) -> None:
    """Overwrite ``h_out``'s entries ``call.exact_chunks`` with unrounded states: the state at the start
    of chunk c of sequence i is the final state of the same entry run on that sequence's first 64 c
    tokens from the same initial state (the entry's running state is fp32 and per sequence, so it is
    the state the full run carried there).  One more launch, on the tracked prefixes only."""
    starts = [0, *itertools.accumulate(call.lengths)]
    offsets = chunk_offsets(call.lengths, caps.TRITON_CHUNK)
    initial = call.initial_state
    at_start = [(i, c) for i, c in call.exact_chunks if c == 0]
    for i, _ in at_start:  # the state the sequence enters with
        h_out[offsets[i]] = 0 if initial is None else initial[i].float()
    later = [(i, c) for i, c in call.exact_chunks if c > 0]
    if not later:
        return
    dev = call.q.device
    index = torch.cat([torch.arange(starts[i], starts[i] + c * caps.TRITON_CHUNK, device=dev) for i, c in later])
    cu = torch.tensor([0] + [c * caps.TRITON_CHUNK for _, c in later], device=dev).cumsum(0)
    rows = torch.tensor([i for i, _ in later], device=dev)
    pick = lambda t: t.index_select(1, index)  # noqa: E731
    state = call.key_first_state()
    _, final, _ = call_triton_entry(pick(call.q), pick(call.k), pick(call.v), pick(call.g), pick(call.beta),
                                    scale=call.scale, initial_state=None if state is None else state[rows],
                                    cu_seqlens=cu)
    h_out[torch.tensor([offsets[i] + c for i, c in later], device=dev)] = final.float().transpose(-1, -2)


def _torch_run(call: ChunkCall):
    o, final, h = chunk_gdn_torch(call.q, call.k, call.v, call.g, call.beta, cu_seqlens=call.cu_seqlens,
                                  initial_state=call.initial_state, scale=call.scale,
                                  chunk_states=call.chunk_states)
    log_path("prefill", "torch", call.signature())
    return o, final, h


PREFILL = Ladder("gdn_prefill", [
    Rung("npu_chunk", lambda sig, call: _npu_chunk_supports(sig, call), is_refusal=caps.is_npu_chunk_refusal,
         device=True, ops=(OP_NPU_CHUNK,), prepare=_npu_chunk_prepare),
    # the rungs after npu_chunk take batched calls: a packed one is handed as its batched views
    Rung("mega", lambda sig, call: _mega_supports(sig, call.batched()),
         on_batched(without_empty_sequences(_mega_run)), caps.is_mega_refusal, device=True, ops=(OP_MEGA,)),
    Rung("triton", lambda sig, call: _triton_supports(sig, call.batched()),
         on_batched(without_empty_sequences(_triton_run)), caps.is_triton_refusal, device=True, ops=(OP_TRITON,)),
    Rung("torch", lambda sig, call: None, on_batched(_torch_run)),
], rejection=rejection_line("prefill"), log=logger)



def prefill_rungs() -> tuple[str, ...]:
    return PREFILL.names


def prefill_static_reasons(sig: GdnSignature, *, chip: Optional[str] = None, mega_present: bool = True,
                           environ=None, predicate=None) -> list[tuple[str, Optional[str], bool]]:
    """The prefill ladder's verdict on calls of ``sig`` from the signature alone, with every device
    kernel installed: ``(rung, why it cannot serve them or None, whether the stride probe at
    startup decides)`` per rung, fastest first; the first None is the rung that runs.  The same
    rules as the rungs' predicates (which add the per-call checks: tensors on the NPU, packed
    B == 1, non-empty sequences, inputs within fp16's range for the mega kernel).  ``environ``:
    the settings the Triton entry reads (default ``os.environ``); ``predicate``: the mega kernel's
    accepted head pairs (default: the installed kernel's).  Used by the ``plan`` CLI."""
    out: list[tuple[str, Optional[str], bool]] = []
    for name in PREFILL.names:
        probe = False
        if name == "npu_chunk":
            reason = npu_chunk_reason(sig, chip)
        elif name == "mega":
            reason = mega_reason(sig, predicate)
        elif name == "triton":
            runs_mega = triton_runs_mega(sig, environ, mega_present)
            probe = triton_needs_probe(sig, runs_mega)
            reason = triton_reason(sig, runs_mega, mega_present)
        elif name == "torch":
            reason = None
        else:  # a rung added to PREFILL without a rule here
            raise AssertionError(f"prefill_static_reasons has no rule for the prefill rung {name!r}")
        out.append((name, reason, probe))
    return out


def first_without_values(call: ChunkCall, skip: tuple = ()) -> Optional[int]:
    """The rung a prefill call runs first, where that is decided from metadata, the call's lengths (read on
    the host already) and the serving state alone, so a caller may keep it per metadata and lengths: the
    npu_chunk rung when its predicate admits the call; None otherwise (the mega rung's predicate reads the
    inputs' magnitudes: those calls decide per call), and None when ``skip`` names rungs."""
    if skip:
        return None
    return 0 if PREFILL.why_not(PREFILL.rungs[0], call.signature(), call) is None else None


def run_prefill(call: ChunkCall, backend: str = "auto", *, skip: tuple = (), first: Optional[int] = None,
                runner=None):
    """Walk the prefill ladder (``skip``: rung names not to try, e.g. the caller's own kernel; ``first``:
    :func:`first_without_values`'s answer for this call's metadata and lengths, kept by the caller, and
    ``runner`` what ``PREFILL.runner`` prepared for it)."""
    sig = call.signature()
    if backend != "auto" or not skip:
        return PREFILL(sig, call, backend=backend, first=first, runner=runner)
    # Mark the skipped rungs as unsuitable for this call only, via the capability check.
    for name in skip:
        PREFILL.rung(name)  # validates the names
    sub = _SUBLADDERS.get(tuple(skip))
    if sub is None:
        sub = Ladder(PREFILL.op, [r for r in PREFILL.rungs if r.name not in skip], rejection=PREFILL.rejection,
                     log=PREFILL.log)
        _SUBLADDERS[tuple(skip)] = sub
    return sub(sig, call)


_SUBLADDERS: dict[tuple, Ladder] = {}


def forget_refusals() -> None:
    """Forget every refusal the prefill ladder (and its sub-ladders) learnt (tests)."""
    for ladder in (PREFILL, *_SUBLADDERS.values()):
        ladder.forget_refusals()
