"""The GDN decode ladder (SGLang's ``decode`` verb): one token per request on the SSM state pool.

One ladder, ``gdn_serving_decode``, serves SGLang's ``TritonGDNKernel.decode`` (through the serving
hook) and the public op :func:`sglang_ascend_hybrid.ops.gdn.api.recurrent_gated_delta_rule` (a
:class:`.call.DecodeCall` of precomputed gates).  Rungs, fastest first:

``triton_decode``  the sgl-kernel-npu Triton decode kernel the installed SGLang imports
                   (:mod:`.contract`), only where the probe (:mod:`.probe`) found it reads and
                   writes the pool value first, and only for SGLang's gating inputs (it computes
                   the gates itself); it keeps fp32 and bf16 pools' precision
``npu_recurrent``  ``torch.ops.npu.recurrent_gated_delta_rule`` with one token per request, on the
                   pool in place, padded requests given length 0 so their rows are never written
                   (a pool it cannot address in place: on a gathered copy of the rows); bf16
                   q / k / v and a bf16 pool; it takes beta
                   before its sigmoid: SGLang's ``b``, or the logit of a precomputed beta; it always
                   l2-normalises q and k, so not for ``use_qk_l2norm=False``)
``torch``          the plugin's decode step (:func:`sglang_ascend_hybrid.ops.gdn.pool_step.step_on_pool`),
                   any dtype

Only live requests' slots change, and padded requests' output rows are 0.  Everything is
capture-safe: no host sync, static shapes, the rung decided from shapes, dtypes and recorded probe
verdicts (never from tensor values); value checks only when asked (:func:`run_decode`).
"""

from __future__ import annotations

import logging
from typing import Optional

import torch

from sglang_ascend_hybrid.envs import ENV
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.decisions import Decisions, checked_first
from sglang_ascend_hybrid.ops.gdn import contract as caps
from sglang_ascend_hybrid.ops.gdn.contract import OP_NPU_RECURRENT
from sglang_ascend_hybrid.ops.gdn.decode import contract as dc
from sglang_ascend_hybrid.ops.gdn.decode import gates, probe
from sglang_ascend_hybrid.ops.gdn.decode.call import (
    SOFTPLUS_BETA,
    SOFTPLUS_THRESHOLD,
    DecodeCall,
    check_decode_inputs,
    check_decode_values,
)
from sglang_ascend_hybrid.ops.gdn.pool_step import step_on_pool
from sglang_ascend_hybrid.ops.gdn.recurrent_rows import recurrent_on_rows
from sglang_ascend_hybrid.ops.gdn.signature import GdnSignature, log_path, rejection_line
from sglang_ascend_hybrid.ops.ladder import Absent, Ladder, Rung
from sglang_ascend_hybrid.ops.tensors import as_dtype

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------- triton_decode

def triton_decode_reason(entry: Optional[str], sig: GdnSignature, pool_contiguous: bool = True) -> Optional[str]:
    """Why the triton_decode rung cannot serve SGLang's decode steps of ``sig`` with the installed SGLang's
    decode ``entry`` (None: it can, once its layout probe found it value-first).  The rung's predicate
    asks this; so does the ``plan`` CLI."""
    if entry is None:
        return Absent("the installed SGLang imports no sgl-kernel-npu Triton decode entry the plugin knows")
    return dc.decode_refusal_reason(entry, sig.value_heads, pool_contiguous)


def _triton_supports(sig, call: DecodeCall) -> Optional[str]:
    if call.precomputed_gates is not None:
        return Absent("it takes SGLang's gating inputs (a, b, A_log, dt_bias), not precomputed gates")
    if call.entry is not None and not seam.serves(dc.DECODE_ENTRIES[call.entry], call.q):
        return Absent(f"{dc.DECODE_ENTRIES[call.entry]} is not installed for these tensors")
    reason = triton_decode_reason(call.entry, sig, call.pool.is_contiguous())
    if reason is not None:
        return reason
    verdict = probe.layout_verdict(call.entry, call.q.dtype, call.pool.dtype, sig.head_dim_k, sig.head_dim_v,
                                   call.q.device)
    if verdict is None or not verdict.usable:
        return ("its state layout is not proven value-first" if verdict is None
                else f"the probe found it {verdict.verdict}: {dc.LAYOUT_VERDICTS.get(verdict.verdict, '')}")
    return None


def _triton_run(call: DecodeCall) -> torch.Tensor:
    _, _, Hv, V = call.heads
    cu = call.query_start_loc
    if cu is None:  # one token per request; without offsets the kernels take the batch as one sequence
        cu = torch.arange(call.batch + 1, dtype=torch.int32, device=call.q.device)
    o = seam.call(dc.DECODE_ENTRIES[call.entry], A_log=call.A_log, a=call.a, dt_bias=call.dt_bias,
                  softplus_beta=SOFTPLUS_BETA, softplus_threshold=SOFTPLUS_THRESHOLD, q=call.q, k=call.k, v=call.v,
                  b=call.b, initial_state_source=call.pool, initial_state_indices=call.cache_indices,
                  cu_seqlens=cu, use_qk_l2norm_in_kernel=True)
    log_path("decode", "triton_decode", call.signature())
    return o.reshape(call.batch, Hv, V)


# ---------------------------------------------------------------- npu_recurrent

def npu_recurrent_reason(sig: GdnSignature, input_dtypes: Optional[tuple] = None) -> Optional[str]:
    """Why the npu_recurrent rung cannot serve decode steps of ``sig`` (None: it can);
    ``input_dtypes``: the dtypes of q, k, v (and SGLang's b) when they differ from ``sig.dtype``.
    The rung's predicate asks this; so does the ``plan`` CLI."""
    dtypes = (sig.dtype,) * 4 if input_dtypes is None else input_dtypes
    return caps.recurrent_refusal_reason(sig.value_heads, sig.key_heads, sig.head_dim_k, sig.head_dim_v, 1,
                                         (*dtypes, sig.state_dtype))


def _recurrent_supports(sig, call: DecodeCall) -> Optional[str]:
    if not seam.serves(OP_NPU_RECURRENT, call.q):
        return Absent(f"torch.ops.npu.{OP_NPU_RECURRENT} is not installed for these tensors")
    if not call.qk_l2norm:  # the op always l2-normalises q and k: only right when that was asked for
        return "it always l2-normalises q and k (use_qk_l2norm=False here)"
    # a precomputed beta reaches the op as a bf16 logit (:meth:`DecodeCall.beta_logits`), SGLang's b as given
    beta = () if call.precomputed_gates is not None else (call.b.dtype,)
    return npu_recurrent_reason(sig, (call.q.dtype, call.k.dtype, call.v.dtype, *beta))


def _recurrent_prepare(call: DecodeCall):
    """The npu_recurrent rung for every call of ``call``'s metadata: its signature, scale and the gates
    ladder's rung and runner decided once."""
    sig, scale = call.signature(), call.step_scale
    gates_ladder = gates.GATES
    if call.precomputed_gates is None:
        gates_first = gates_ladder.first(sig, call)
        gates_runner = gates_ladder.runner(call, gates_first)

    def run(c: DecodeCall) -> torch.Tensor:
        rows = c.rows()
        g = (c.decay() if c.precomputed_gates is not None
             else gates_ladder(sig, c, first=gates_first, runner=gates_runner))
        o = recurrent_on_rows(c.q, c.k, c.v, c.beta_logits(), g, c.pool, rows.slots, rows.live, scale,
                              lengths=rows.lengths, slot_rows=rows.slot_rows)
        log_path("decode", "npu_recurrent", sig)
        return o

    return run


# ---------------------------------------------------------------- torch

def _torch_run(call: DecodeCall) -> torch.Tensor:
    slots, live = call.slots_and_live()
    g, beta = call.gates()
    q, k = call.step_qk()
    o = step_on_pool(q, k, call.v[0], g, beta, call.pool, slots, live, scale=call.step_scale)
    log_path("decode", "torch", call.signature())
    return o


DECODE = Ladder("gdn_serving_decode", [
    Rung("triton_decode", _triton_supports, _triton_run, dc.is_decode_refusal, device=True,
         ops=tuple(dc.DECODE_ENTRIES.values())),
    Rung("npu_recurrent", _recurrent_supports, is_refusal=caps.is_recurrent_refusal, device=True,
         ops=(OP_NPU_RECURRENT,), prepare=_recurrent_prepare),
    Rung("torch", lambda sig, call: None, _torch_run),
], rejection=rejection_line("decode"), log=logger)


def decode_rungs() -> tuple[str, ...]:
    return DECODE.names


def decode_static_reasons(sig: GdnSignature, entry: Optional[str]) -> list[tuple[str, Optional[str], bool]]:
    """The decode ladder's verdict on SGLang's decode steps of ``sig`` from the signature alone, with every
    device kernel installed and the installed SGLang's Triton decode ``entry``: ``(rung, why it cannot
    serve them or None, whether the layout probe at startup decides)`` per rung, fastest first.  The
    same rules as the rungs' predicates (which add: tensors on the NPU, a contiguous pool, the probe's
    verdict).  Used by the ``plan`` CLI."""
    out: list[tuple[str, Optional[str], bool]] = []
    for name in DECODE.names:
        probe = False
        if name == "triton_decode":
            reason = triton_decode_reason(entry, sig)
            probe = reason is None
        elif name == "npu_recurrent":
            reason = npu_recurrent_reason(sig)
        elif name == "torch":
            reason = None
        else:  # a rung added to DECODE without a rule here
            raise AssertionError(f"decode_static_reasons has no rule for the decode rung {name!r}")
        out.append((name, None if reason is None else str(reason), probe))
    return out


_DECIDED = Decisions("gdn decode")


def run_decode(call: DecodeCall, backend: str = "auto", *, check_values: Optional[bool] = None) -> torch.Tensor:
    """Advance the live requests' pool rows by one token; return ``o [1, B, Hv, V]`` in q's dtype
    (padded requests' rows 0).  Shapes and dtypes are checked (metadata only: no host sync);
    ``check_values`` (None: ``SGLANG_ASCEND_HYBRID_DEBUG_CHECKS``) also reads the offsets and slots
    on the host first (:func:`check_decode_values`)."""
    call._signature, first, runner = checked_first(_DECIDED, DECODE, call, backend, check_decode_inputs,
                                                   DECODE.runner)
    if ENV.DEBUG_CHECKS.get() if check_values is None else check_values:
        check_decode_values(call)
    o = DECODE(call._signature, call, backend=backend, first=first, runner=runner)   # B x Hv x V, a new tensor
    o = as_dtype(o, call.q.dtype).reshape(*call.v.shape)   # ints: a torch.Size argument costs twice
    o.masked_fill_(call.rows().padding, 0.0)   # whatever a rung left in padded requests' rows
    return o


def probe_before_serving(entry: Optional[str], q_dtype: torch.dtype, pool_dtype: torch.dtype, head_dim_k: int,
                         head_dim_v: int, device) -> Optional[object]:
    """Run the decode-layout probe for a model's signature at backend construction (never in a
    capture); None when the installed kernel is not reachable here."""
    if entry is None or not seam.available(dc.DECODE_ENTRIES[entry]):
        return None
    return probe.layout_verdict(entry, q_dtype, pool_dtype, head_dim_k, head_dim_v, device, before_serving=True)
