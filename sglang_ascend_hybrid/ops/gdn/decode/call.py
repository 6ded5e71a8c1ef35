"""One GDN decode step as the decode ladder's rungs take it (:class:`DecodeCall`), and its input checks.

Two callers build it, with the gates given one of two ways:

* SGLang's ``TritonGDNKernel.decode`` (the serving hook): raw q / k (always l2-normalised, scale
  ``K ** -0.5``) and the gating inputs ``a`` / ``b`` with ``A_log`` / ``dt_bias``, from which
  ``g = -exp(A_log) softplus(a + dt_bias)`` and ``beta = sigmoid(b)`` (:meth:`DecodeCall.gates`);
* the public op :func:`sglang_ascend_hybrid.ops.gdn.api.recurrent_gated_delta_rule`
  (:meth:`DecodeCall.with_gates`): precomputed ``g`` (log-space decay) and ``beta`` (post-sigmoid),
  its own ``scale`` and ``use_qk_l2norm``.

A request is live when its slot is ``>= 0`` and its ``query_start_loc`` length is not 0 (SGLang's
graph replay gives padded requests slot 0 and length 0): only live requests' slots change.

Inputs: shapes and dtypes are checked on every call (:func:`check_decode_inputs`, metadata only);
slot ranges, duplicate live slots and the offsets (:func:`check_decode_values`, read on the host)
only when asked, since decode runs under NPU graph capture.  Both raise ``ValueError`` naming the
argument, its value and what was expected.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Optional

import torch

from sglang_ascend_hybrid.ops.errors import bad_input
from sglang_ascend_hybrid.ops.gdn.gating import decay_in_torch
from sglang_ascend_hybrid.ops.gdn.recurrent_rows import beta_logit
from sglang_ascend_hybrid.ops.gdn.signature import GdnSignature
from sglang_ascend_hybrid.ops.gdn.torch_impl import l2norm
from sglang_ascend_hybrid.ops.host import host_list
from sglang_ascend_hybrid.ops.index_dtype import check_index_dtype
from sglang_ascend_hybrid.ops.signature import dtype_name
from sglang_ascend_hybrid.ops.step_cache import StepValue

SOFTPLUS_BETA = 1.0       # what SGLang's TritonGDNKernel.decode passes
SOFTPLUS_THRESHOLD = 20.0


@dataclass
class DecodeCall:
    """One decode step: one token per request, advancing rows of the value-first pool in place."""

    q: torch.Tensor                 # [1, B, Hk, K] raw (normalised by every rung when qk_l2norm)
    k: torch.Tensor                 # [1, B, Hk, K] raw
    v: torch.Tensor                 # [1, B, Hv, V]
    a: Optional[torch.Tensor]       # B * Hv gating inputs (any shape); None with precomputed gates
    b: Optional[torch.Tensor]       # B * Hv beta logits (any shape); None with precomputed gates
    A_log: Optional[torch.Tensor]   # [Hv]; None with precomputed gates
    dt_bias: Optional[torch.Tensor]  # [Hv]; None with precomputed gates
    pool: torch.Tensor              # [slots, Hv, V, K] value-first, any float dtype (kept)
    cache_indices: torch.Tensor     # [B] slot per request, -1 = padding
    query_start_loc: Optional[torch.Tensor] = None   # [B + 1] (SGLang always passes it)
    entry: Optional[str] = None     # the Triton decode entry the installed SGLang imports (.contract)
    precomputed_gates: Optional[tuple] = None   # (g, beta post-sigmoid) [B, Hv], instead of a / b / A_log / dt_bias
    scale: Optional[float] = None   # None: K ** -0.5
    qk_l2norm: bool = True          # False (precomputed gates only): q / k are used as given
    _decay: Optional[torch.Tensor] = None
    _rows: Optional["StepRows"] = None
    _signature: Optional[GdnSignature] = None

    @classmethod
    def with_gates(cls, q, k, v, g, beta, pool, cache_indices, *, scale: Optional[float] = None,
                   qk_l2norm: bool = True) -> "DecodeCall":
        """A call of precomputed gates: ``g`` (log-space decay) and ``beta`` (post-sigmoid) ``[B, Hv]``."""
        return cls(q, k, v, None, None, None, None, pool, cache_indices, precomputed_gates=(g, beta), scale=scale,
                   qk_l2norm=qk_l2norm)

    @property
    def batch(self) -> int:
        return self.q.shape[1]

    @property
    def heads(self) -> tuple[int, int, int, int]:
        """(Hk, K, Hv, V)."""
        return self.q.shape[2], self.q.shape[3], self.v.shape[2], self.v.shape[3]

    @property
    def step_scale(self) -> float:
        return self.heads[1] ** -0.5 if self.scale is None else self.scale

    def signature(self) -> GdnSignature:
        if self._signature is None:
            Hk, K, Hv, V = self.heads
            self._signature = GdnSignature(Hv, Hk, K, V, self.q.dtype, state_dtype=self.pool.dtype)
        return self._signature

    def rows(self) -> "StepRows":
        """The step's request rows (tensor ops only; the same for every layer of a step: kept across
        them, :mod:`...ops.step_cache`)."""
        if self._rows is None:
            tensors = (self.cache_indices,) if self.query_start_loc is None else (
                self.cache_indices, self.query_start_loc)
            self._rows = _STEP_ROWS.get(tensors, (), lambda: _step_rows(*tensors))
        return self._rows

    def live(self) -> torch.Tensor:
        """``[B]`` bool: the slot is ``>= 0`` and the request's ``query_start_loc`` length is not 0."""
        return self.rows().live

    def slots_and_live(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(slots clamped to >= 0 as int64, live mask), tensor ops only."""
        rows = self.rows()
        return rows.slots, rows.live

    def decay(self) -> torch.Tensor:
        """g fp32 ``[B, Hv]``: the precomputed one, or ``g = -exp(A_log) softplus(a + dt_bias)``."""
        if self._decay is None:
            B, Hv = self.batch, self.heads[2]
            if self.precomputed_gates is not None:
                self._decay = self.precomputed_gates[0].reshape(B, Hv).float()
            else:
                self._decay = decay_in_torch(self.A_log, self.a, self.dt_bias, B, Hv, SOFTPLUS_BETA,
                                             SOFTPLUS_THRESHOLD)
        return self._decay

    def gates(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(g, beta) fp32 ``[B, Hv]``: :meth:`decay`, and the precomputed beta or ``beta = sigmoid(b)``."""
        B, Hv = self.batch, self.heads[2]
        beta = self.precomputed_gates[1] if self.precomputed_gates is not None else torch.sigmoid(self.b.float())
        return self.decay(), beta.reshape(B, Hv).float()

    def beta_logits(self) -> torch.Tensor:
        """Beta before its sigmoid (what the recurrent op takes), ``B * Hv`` elements in row order (any
        shape): SGLang's ``b`` as given, or the finite logit of a precomputed beta."""
        if self.precomputed_gates is not None:
            return beta_logit(self.precomputed_gates[1])
        return self.b

    def step_qk(self) -> tuple[torch.Tensor, torch.Tensor]:
        """q, k ``[B, Hk, K]`` as the step uses them: l2-normalised in fp32 (as the device kernels do: a
        bf16 round of the unit vectors costs ~2e-3) when ``qk_l2norm``, else as given."""
        if not self.qk_l2norm:
            return self.q[0], self.k[0]
        return l2norm(self.q[0].float()), l2norm(self.k[0].float())


class StepRows(NamedTuple):
    """What every layer of a decode step derives from its slot indices and offsets."""

    live: torch.Tensor       # [B] bool: the request is live (its slot and its one token are real)
    padding: torch.Tensor    # [B, 1, 1] bool: not live (its output row is zeroed)
    slots: torch.Tensor      # [B] int64: the slots, padding clamped to 0
    lengths: torch.Tensor    # [B] int32: live as 1 / 0 (the recurrent op's actual_seq_lengths)
    slot_rows: torch.Tensor  # [B, 1] int32: slots (the recurrent op's ssm_state_indices)


def _step_rows(cache_indices: torch.Tensor, query_start_loc: Optional[torch.Tensor] = None) -> StepRows:
    idx = cache_indices.reshape(-1)
    live = idx >= 0
    if query_start_loc is not None:
        qsl = query_start_loc.reshape(-1)
        live = live & (qsl[1:] > qsl[:-1])
    slots = idx.long().clamp(min=0)
    return StepRows(live, ~live.view(-1, 1, 1), slots, live.to(torch.int32), slots.to(torch.int32).view(-1, 1))


_STEP_ROWS = StepValue("gdn decode request rows")


# ---------------------------------------------------------------- input checks


def _fail(name: str, value, expected: str):
    raise bad_input(name, value, expected, op="GDN decode")


def _desc(t) -> str:
    return f"shape {tuple(t.shape)} {dtype_name(t.dtype)}" if isinstance(t, torch.Tensor) else repr(t)


def check_decode_inputs(call: DecodeCall) -> None:
    """Shapes and dtypes (tensor metadata only: no host sync; run on every call, also in a capture)."""
    if call.precomputed_gates is not None:
        g, beta = call.precomputed_gates
        gate_args = {"g": g, "beta": beta}
        per_head = {}
    else:
        gate_args = {"a": call.a, "b": call.b}
        per_head = {"A_log": call.A_log, "dt_bias": call.dt_bias}
    tensors = {"q": call.q, "k": call.k, "v": call.v, **gate_args, **per_head}
    for name, t in {**tensors, "pool": call.pool, "cache_indices": call.cache_indices}.items():
        if not isinstance(t, torch.Tensor):
            _fail(name, repr(t), "a torch.Tensor")
    for name, t in tensors.items():
        if not t.dtype.is_floating_point:
            _fail(f"{name}.dtype", t.dtype, "a floating-point dtype")
    q, k, v, pool = call.q, call.k, call.v, call.pool
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
    for name, t in gate_args.items():
        if t.numel() != B * Hv:
            _fail(name, _desc(t), f"{B} x {Hv} = {B * Hv} entries (one per request and value head)")
    for name, t in per_head.items():
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
        check_index_dtype(name, t, op="GDN decode")
        if t.dim() != 1 or t.numel() != n:
            _fail(name, _desc(t), f"[{n}] ({'one slot per request' if n == B else 'B + 1 offsets'}, B = {B})")


def check_decode_values(call: DecodeCall) -> None:
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
