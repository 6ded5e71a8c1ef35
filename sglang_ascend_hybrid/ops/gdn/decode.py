"""The serving GDN decode ladder: the plain decode step of SGLang's Ascend GDN backend.

SGLang hands ``TritonGDNKernel.decode`` raw q / k / v (not normalised), the gating inputs ``a`` /
``b`` with ``A_log`` / ``dt_bias``, the SSM pool (value-first ``[slots, Hv, V, K]``, any float
dtype) and per request its slot and ``query_start_loc``.  Rungs, fastest first:

``triton_decode``  the sgl-kernel-npu Triton decode kernel the installed SGLang imports
                   (:mod:`.decode_contract`), only where the probe (:mod:`.decode_probe`) found it
                   reads and writes the pool value first; it keeps fp32 and bf16 pools' precision
``npu_recurrent``  ``torch.ops.npu.recurrent_gated_delta_rule`` with one token per request, on a
                   gathered copy of the live rows (bf16 q / k / v and a bf16 pool; it takes the raw
                   ``b`` and applies the sigmoid itself, so no logit is computed)
``torch``          the plugin's decode step (:func:`.pool_step.step_on_pool`), any dtype

A request is live when its slot is ``>= 0`` and its ``query_start_loc`` length is not 0 (SGLang's
graph replay gives padded requests slot 0 and length 0): only live requests' slots change, and
padded requests' output rows are 0.  Everything is capture-safe: no host sync, static shapes, the
rung decided from shapes, dtypes and recorded probe verdicts (never from tensor values).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Optional

import torch

from sglang_ascend_hybrid.logutil import log_once
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.gdn import contract as caps
from sglang_ascend_hybrid.ops.gdn import decode_contract as dc
from sglang_ascend_hybrid.ops.gdn import decode_probe
from sglang_ascend_hybrid.ops.gdn.contract import OP_NPU_RECURRENT
from sglang_ascend_hybrid.ops.gdn.dispatch import GdnSignature, rejection_line
from sglang_ascend_hybrid.ops.gdn.pool_step import step_on_pool
from sglang_ascend_hybrid.ops.gdn.recurrent_rows import recurrent_on_rows
from sglang_ascend_hybrid.ops.gdn.torch_impl import l2norm
from sglang_ascend_hybrid.ops.index_dtype import index_dtype_problem
from sglang_ascend_hybrid.ops.ladder import Absent, Ladder, Rung

logger = logging.getLogger(__name__)

SOFTPLUS_BETA = 1.0       # what SGLang's TritonGDNKernel.decode passes
SOFTPLUS_THRESHOLD = 20.0


@dataclass
class GatedDecodeCall:
    """One decode step as SGLang's ``TritonGDNKernel.decode`` receives it."""

    q: torch.Tensor                 # [1, B, Hk, K] raw
    k: torch.Tensor                 # [1, B, Hk, K] raw
    v: torch.Tensor                 # [1, B, Hv, V]
    a: torch.Tensor                 # B * Hv gating inputs (any shape)
    b: torch.Tensor                 # B * Hv beta logits (any shape)
    A_log: torch.Tensor             # [Hv]
    dt_bias: torch.Tensor           # [Hv]
    pool: torch.Tensor              # [slots, Hv, V, K] value-first
    cache_indices: torch.Tensor     # [B] slot per request, -1 = padding
    query_start_loc: Optional[torch.Tensor] = None   # [B + 1] (SGLang always passes it)
    entry: Optional[str] = None     # the decode entry the installed SGLang imports (decode_contract)
    _gates: Optional[tuple] = None
    _rows: Optional[tuple] = None

    @property
    def batch(self) -> int:
        return self.q.shape[1]

    @property
    def heads(self) -> tuple[int, int, int, int]:
        """(Hk, K, Hv, V)."""
        return self.q.shape[2], self.q.shape[3], self.v.shape[2], self.v.shape[3]

    def signature(self) -> GdnSignature:
        Hk, K, Hv, V = self.heads
        return GdnSignature(Hv, Hk, K, V, self.q.dtype, state_dtype=self.pool.dtype)

    def slots_and_live(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(slots clamped to >= 0 as int64, live mask), tensor ops only."""
        if self._rows is None:
            idx = self.cache_indices.reshape(-1).long()
            live = idx >= 0
            if self.query_start_loc is not None:
                qsl = self.query_start_loc.reshape(-1)
                live = live & ((qsl[1:] - qsl[:-1]) > 0)
            self._rows = (idx.clamp(min=0), live)
        return self._rows

    def gates(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(g, beta) fp32 ``[B, Hv]``: ``g = -exp(A_log) softplus(a + dt_bias)``, ``beta = sigmoid(b)``."""
        if self._gates is None:
            B, Hv = self.batch, self.heads[2]
            x = self.a.reshape(B, Hv).float() + self.dt_bias.float()
            sp = torch.nn.functional.softplus(x, beta=SOFTPLUS_BETA, threshold=SOFTPLUS_THRESHOLD)
            self._gates = (-self.A_log.float().exp() * sp, torch.sigmoid(self.b.reshape(B, Hv).float()))
        return self._gates




def _ran(rung: str, sig) -> None:
    log_once(logger, ("gdn-serving-decode", rung, sig), "sglang-ascend-hybrid: GDN decode %s runs on the %s kernel",
             sig, rung)


# ---------------------------------------------------------------- triton_decode

def _triton_supports(sig, call: GatedDecodeCall) -> Optional[str]:
    if call.entry is None:
        return Absent("no sgl-kernel-npu Triton decode entry is installed")
    op = dc.DECODE_ENTRIES[call.entry]
    if not seam.serves(op, call.q):
        return Absent(f"{op} is not installed for these tensors")
    reason = dc.decode_refusal_reason(call.entry, sig.value_heads, call.pool.is_contiguous())
    if reason is not None:
        return reason
    verdict = decode_probe.layout_verdict(call.entry, call.q.dtype, call.pool.dtype, sig.head_dim_k, sig.head_dim_v,
                                          call.q.device)
    if verdict is None or not verdict.usable:
        return ("its state layout is not proven value-first" if verdict is None
                else f"the probe found it {verdict.verdict}: {dc.LAYOUT_VERDICTS.get(verdict.verdict, '')}")
    return None


def _triton_run(call: GatedDecodeCall) -> torch.Tensor:
    _, _, Hv, V = call.heads
    o = seam.call(dc.DECODE_ENTRIES[call.entry], A_log=call.A_log, a=call.a, dt_bias=call.dt_bias,
                  softplus_beta=SOFTPLUS_BETA, softplus_threshold=SOFTPLUS_THRESHOLD, q=call.q, k=call.k, v=call.v,
                  b=call.b, initial_state_source=call.pool, initial_state_indices=call.cache_indices,
                  cu_seqlens=call.query_start_loc, use_qk_l2norm_in_kernel=True)
    _ran("triton_decode", call.signature())
    return o.reshape(call.batch, Hv, V)


# ---------------------------------------------------------------- npu_recurrent

def _recurrent_supports(sig, call: GatedDecodeCall) -> Optional[str]:
    if not seam.serves(OP_NPU_RECURRENT, call.q):
        return Absent(f"torch.ops.npu.{OP_NPU_RECURRENT} is not installed for these tensors")
    return caps.recurrent_refusal_reason(sig.value_heads, sig.key_heads, sig.head_dim_k, sig.head_dim_v, 1,
                                         (call.q.dtype, call.k.dtype, call.v.dtype, call.b.dtype, call.pool.dtype))


def _recurrent_run(call: GatedDecodeCall) -> torch.Tensor:
    slots, live = call.slots_and_live()
    g, _ = call.gates()
    Hk, K, Hv, V = call.heads
    o = recurrent_on_rows(call.q[0], call.k[0], call.v[0], call.b.reshape(call.batch, Hv), g, call.pool, slots, live,
                          K ** -0.5)
    _ran("npu_recurrent", call.signature())
    return o


# ---------------------------------------------------------------- torch

def _torch_run(call: GatedDecodeCall) -> torch.Tensor:
    slots, live = call.slots_and_live()
    g, beta = call.gates()
    K = call.heads[1]
    # normalised in fp32, as the device kernels do (a bf16 round of the unit vectors costs ~2e-3)
    o = step_on_pool(l2norm(call.q[0].float()), l2norm(call.k[0].float()), call.v[0], g, beta, call.pool, slots, live,
                     scale=K ** -0.5)
    _ran("torch", call.signature())
    return o


SERVING_DECODE = Ladder("gdn_serving_decode", [
    Rung("triton_decode", _triton_supports, _triton_run, dc.is_decode_refusal, device=True,
         ops=tuple(dc.DECODE_ENTRIES.values()),
         needs="the installed sgl-kernel-npu Triton decode kernel, probed value-first on this pool dtype, "
               "a contiguous pool (and an even value-head count for the generic entry)"),
    Rung("npu_recurrent", _recurrent_supports, _recurrent_run, caps.is_recurrent_refusal, device=True,
         ops=(OP_NPU_RECURRENT,),
         needs="sgl-kernel-npu's torch.ops.npu.recurrent_gated_delta_rule, bf16 q/k/v/b and a bf16 pool, "
               "head dims within its on-chip memory"),
    Rung("torch", lambda sig, call: None, _torch_run),
], rejection=rejection_line("decode"), log=logger)


def serving_rungs() -> tuple[str, ...]:
    return SERVING_DECODE.names


def run_serving_decode(call: GatedDecodeCall, backend: str = "auto") -> torch.Tensor:
    """Advance the live requests' pool rows by one token; return ``o [1, B, Hv, V]`` in q's dtype
    (padded requests' rows 0).  Index dtypes are checked (metadata only: no host sync)."""
    for name, t in (("cache_indices", call.cache_indices), ("query_start_loc", call.query_start_loc)):
        problem = None if t is None else index_dtype_problem(name, t)
        if problem:
            raise ValueError(f"GDN decode: {problem}")
    o = SERVING_DECODE(call.signature(), call, backend=backend)
    _, live = call.slots_and_live()
    B = call.batch
    Hv, V = call.heads[2], call.heads[3]
    o = torch.where(live.view(B, 1, 1), o.to(call.q.dtype), torch.zeros((), dtype=call.q.dtype, device=o.device))
    return o.reshape(1, B, Hv, V)


def probe_before_serving(entry: Optional[str], q_dtype: torch.dtype, pool_dtype: torch.dtype, head_dim_k: int,
                         head_dim_v: int, device) -> Optional[object]:
    """Run the decode-layout probe for a model's signature at backend construction (never in a
    capture); None when the installed kernel is not reachable here."""
    if entry is None or not seam.available(dc.DECODE_ENTRIES[entry]):
        return None
    return decode_probe.layout_verdict(entry, q_dtype, pool_dtype, head_dim_k, head_dim_v, device,
                                       before_serving=True)
