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

Inputs: shapes and dtypes are checked on every call (:func:`check_serving_inputs`, metadata only);
slot ranges, duplicate live slots and the offsets (:func:`check_serving_values`, read on the host)
only with ``SGLANG_ASCEND_HYBRID_DEBUG_CHECKS=1`` or ``check_values=True``, since decode runs under
NPU graph capture.  Both raise ``ValueError`` naming the argument, its value and what was expected.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Optional

import torch

from sglang_ascend_hybrid.envs import ENV
from sglang_ascend_hybrid.logutil import log_once
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.host import host_list
from sglang_ascend_hybrid.ops.gdn import contract as caps
from sglang_ascend_hybrid.ops.gdn import decode_contract as dc
from sglang_ascend_hybrid.ops.gdn import decode_probe
from sglang_ascend_hybrid.ops.gdn.api import _fail as _api_fail
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




# ---------------------------------------------------------------- input checks


def _fail(name: str, value, expected: str):
    _api_fail(f"GDN decode: {name}", value, expected)


def _desc(t) -> str:
    return f"shape {tuple(t.shape)} {str(t.dtype).replace('torch.', '')}" if isinstance(t, torch.Tensor) else repr(t)


def check_serving_inputs(call: GatedDecodeCall) -> None:
    """Shapes and dtypes (tensor metadata only: no host sync; run on every call, also in a capture)."""
    for name in ("q", "k", "v", "a", "b", "A_log", "dt_bias", "pool", "cache_indices"):
        if not isinstance(getattr(call, name), torch.Tensor):
            _fail(name, repr(getattr(call, name)), "a torch.Tensor")
    q, k, v, pool = call.q, call.k, call.v, call.pool
    for name in ("q", "k", "v", "a", "b", "A_log", "dt_bias"):
        t = getattr(call, name)
        if not t.dtype.is_floating_point:
            _fail(f"{name}.dtype", t.dtype, "a floating-point dtype")
    if q.dim() != 4 or q.shape[0] != 1:
        _fail("q", _desc(q), "[1, B, Hk, K] (one token per request)")
    if k.shape != q.shape:
        _fail("k", _desc(k), f"the shape of q {tuple(q.shape)}")
    B, Hk, K = q.shape[1], q.shape[2], q.shape[3]
    if v.dim() != 4 or tuple(v.shape[:2]) != (1, B):
        _fail("v", _desc(v), f"[1, {B}, Hv, V]")
    Hv, V = v.shape[2], v.shape[3]
    if Hk == 0 or Hv % Hk:
        _fail("v", _desc(v), f"a value-head count that is a multiple of the {Hk} key heads")
    for name in ("a", "b"):
        t = getattr(call, name)
        if t.numel() != B * Hv:
            _fail(name, _desc(t), f"{B} x {Hv} = {B * Hv} entries (one per request and value head)")
    for name in ("A_log", "dt_bias"):
        t = getattr(call, name)
        if t.numel() != Hv:
            _fail(name, _desc(t), f"{Hv} entries (one per value head)")
    if pool.dim() != 4 or tuple(pool.shape[1:]) != (Hv, V, K):
        _fail("pool (ssm_states)", _desc(pool), f"[slots, {Hv}, {V}, {K}] (value-first, the heads of v)")
    if not pool.dtype.is_floating_point:
        _fail("pool (ssm_states).dtype", pool.dtype,
              "a floating-point dtype (the state is stored in the pool's dtype: an integer pool truncates it)")
    for name, t, n in (("cache_indices", call.cache_indices, B), ("query_start_loc", call.query_start_loc, B + 1)):
        if t is None:
            continue
        problem = index_dtype_problem(name, t)
        if problem:
            raise ValueError(f"GDN decode: {problem}")
        if t.dim() != 1 or t.numel() != n:
            _fail(name, _desc(t), f"[{n}] ({'one slot per request' if n == B else 'B + 1 offsets'}, B = {B})")


def check_serving_values(call: GatedDecodeCall) -> None:
    """Value checks, read on the host (``SGLANG_ASCEND_HYBRID_DEBUG_CHECKS=1`` or ``check_values=True``
    only: a device-to-host sync, which breaks NPU graph capture).  Offsets: at most one token per
    request, request n's token in q row n (so length-0 padding only after the last live request, as
    SGLang's graph replay pads); slots: ``-1`` or in ``[0, slots)``, each live slot once."""
    B, slots = call.batch, call.pool.shape[0]
    lengths = [1] * B
    if call.query_start_loc is not None:
        offsets = host_list(call.query_start_loc)
        lengths = [b - a for a, b in zip(offsets, offsets[1:])]
        if any(n not in (0, 1) for n in lengths) or any(
                n == 1 and offsets[i] != i for i, n in enumerate(lengths)):
            _fail("query_start_loc", offsets if B <= 16 else f"{offsets[:8]}...",
                  "offsets from 0 with lengths 0 or 1, request n's token in q row n (padding of length 0 "
                  "only after the last live request)")
    idx = host_list(call.cache_indices)
    shown = idx if B <= 16 else f"{idx[:8]}..."
    bad = [x for x in idx if not (x == -1 or 0 <= x < slots)]
    if bad:
        _fail("cache_indices", shown, f"slots in [0, {slots}) or -1 (padding); out of range: {bad[:4]}")
    live = [x for x, n in zip(idx, lengths) if x >= 0 and n > 0]
    if len(set(live)) != len(live):
        dup = sorted({x for x in live if live.count(x) > 1})
        _fail("cache_indices", shown, f"each live request's slot once per step (repeated: {dup[:8]}; they would race)")


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
    cu = call.query_start_loc
    if cu is None:  # one token per request; without offsets the kernels take the batch as one sequence
        cu = torch.arange(call.batch + 1, dtype=torch.int32, device=call.q.device)
    o = seam.call(dc.DECODE_ENTRIES[call.entry], A_log=call.A_log, a=call.a, dt_bias=call.dt_bias,
                  softplus_beta=SOFTPLUS_BETA, softplus_threshold=SOFTPLUS_THRESHOLD, q=call.q, k=call.k, v=call.v,
                  b=call.b, initial_state_source=call.pool, initial_state_indices=call.cache_indices,
                  cu_seqlens=cu, use_qk_l2norm_in_kernel=True)
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


def run_serving_decode(call: GatedDecodeCall, backend: str = "auto", *,
                       check_values: Optional[bool] = None) -> torch.Tensor:
    """Advance the live requests' pool rows by one token; return ``o [1, B, Hv, V]`` in q's dtype
    (padded requests' rows 0).  Shapes and dtypes are checked (metadata only: no host sync);
    ``check_values`` (None: ``SGLANG_ASCEND_HYBRID_DEBUG_CHECKS``) also reads the offsets and slots
    on the host first (:func:`check_serving_values`)."""
    check_serving_inputs(call)
    if ENV.DEBUG_CHECKS.get() if check_values is None else check_values:
        check_serving_values(call)
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
