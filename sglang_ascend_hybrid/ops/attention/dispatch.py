"""The packed-attention kernel ladder: rung ``npu_fia`` (``npu_fused_infer_attention_score``,
through the seam) then ``torch``.

Dispatch, for inputs that pass upstream's argument checks:

1. the device op ``npu_fused_infer_attention_score`` serves the tensors (NPU, or an
   installed emulator), the call is inside its contract (:mod:`.contract`: head dims,
   head and sequence counts, fp16 / bf16 q / k / v -- fp32 goes to the reference, with one
   INFO line) and no sequence is one-sided: the op is called exactly as upstream calls
   it, with no extra copies (fast path);
2. the op serves them and some sequences are one-sided: only the KV side is
   rebuilt (one ``torch.cat`` per K / V tensor of the row runs it keeps, planned on
   the host from the boundaries): KV-only sequences are dropped and each query-only
   sequence gets one zero key / value row, so the op sees only sequences non-empty
   on both sides; ``q`` and the output are used in place, and the query-only rows
   are then set to 0 / ``-inf`` (``index_fill_`` over those rows only);
3. otherwise (CPU tensors, no emulator, or outside the contract): the pure-torch rung
   (:mod:`.torch_impl`).

A device failure the contract did not predict is treated by the
:class:`~sglang_ascend_hybrid.ops.ladder.Ladder` like every other ladder's: logged once at WARNING,
the call served by the torch rung, the shape not offered to the device op again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from itertools import pairwise
from typing import Optional

import torch

from sglang_ascend_hybrid.logutil import log_once
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.attention import contract
from sglang_ascend_hybrid.ops.attention.contract import OP_NAME
from sglang_ascend_hybrid.ops.attention.signature import AttentionSignature
from sglang_ascend_hybrid.ops.attention.torch_impl import packed_attention_torch
from sglang_ascend_hybrid.ops.errors import DeviceResultError
from sglang_ascend_hybrid.ops.ladder import Absent, Ladder, Rung
from sglang_ascend_hybrid.ops.signature import dtype_name

logger = logging.getLogger(__name__)


def _empty_result(q: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Every query row without keys: output 0, LSE -inf."""
    out = q.new_zeros((q.shape[0], q.shape[1], v.shape[-1]))
    lse = torch.full((q.shape[1], q.shape[0]), float("-inf"), dtype=torch.float32,
                     device=q.device)
    return out, lse


def _call_op(q, k, v, q_ends, k_ends, scale, want_lse):
    out, lse = seam.call(
        OP_NAME, q, k, v,
        num_heads=q.shape[1],
        num_key_value_heads=k.shape[1],
        scale=scale,
        input_layout="TND",
        actual_seq_lengths=q_ends,
        actual_seq_lengths_kv=k_ends,
        softmax_lse_flag=want_lse,
    )
    if not want_lse:
        return out, None
    if lse.shape != (q.shape[0], q.shape[1], 1):
        raise DeviceResultError("Unexpected Ascend TND softmax LSE shape: "
                                f"expected {(q.shape[0], q.shape[1], 1)}, got {tuple(lse.shape)}")
    return out, lse.squeeze(-1).transpose(0, 1).contiguous()


def _fast_path(q, k, v, q_bounds, k_bounds, scale, want_lse):
    """No one-sided sequence: exactly upstream's call."""
    q_ends = [stop for start, stop in pairwise(q_bounds) if stop > start]
    k_ends = [stop for start, stop in pairwise(k_bounds) if stop > start]
    if not q_ends:  # nothing to attend (all sequences empty on both sides)
        return _empty_result(q, v)
    if not (q.is_contiguous() and k.is_contiguous() and v.is_contiguous()):
        if q.shape == k.shape == v.shape:
            q, k, v = torch.stack((q, k, v), dim=0).unbind(0)
        else:
            q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    return _call_op(q, k, v, q_ends, k_ends, scale, want_lse)


def _merged_runs(runs: list[tuple[int, int] | None]) -> list[tuple[int, int] | None]:
    """Half-open row ``runs`` with each run that starts where the previous one stops joined to
    it; ``None`` entries (zero rows of :func:`_concat_runs`) stay, and are never joined."""
    merged: list[tuple[int, int] | None] = []
    for run in runs:
        if run is not None and merged and merged[-1] is not None and merged[-1][1] == run[0]:
            merged[-1] = (merged[-1][0], run[1])
        else:
            merged.append(run)
    return merged


def _gather_index(runs: list[tuple[int, int]], device: torch.device) -> torch.Tensor:
    """Row index covering the half-open ``runs`` in order, built on the host and
    copied to ``device`` (a host-to-device copy, never a sync)."""
    merged = _merged_runs(runs)
    starts = torch.tensor([s for s, _ in merged], dtype=torch.int64)
    lens = torch.tensor([e - s for s, e in merged], dtype=torch.int64)
    total = int(sum(e - s for s, e in merged))
    shift = starts - (torch.cumsum(lens, 0) - lens)  # source start - packed start, per run
    index = torch.repeat_interleave(shift, lens, output_size=total) + torch.arange(total)
    return index.to(device)


def _concat_runs(x: torch.Tensor, runs: list[tuple[int, int] | None]) -> torch.Tensor:
    """The rows of ``x`` covered by ``runs`` in order, ``None`` standing for one zero row, as
    one ``torch.cat`` of row slices (adjacent runs merged first): whole runs are block copies,
    about 1.3x faster on CPU than an ``index_select`` of the same rows, and no index tensor is
    built or copied to the device.  A single run is returned as a view when ``x`` is contiguous."""
    zero = x.new_zeros((1,) + tuple(x.shape[1:])) if None in runs else None
    pieces = [zero if run is None else x[run[0]:run[1]] for run in _merged_runs(runs)]
    return torch.cat(pieces) if len(pieces) > 1 else pieces[0].contiguous()


def _compacting_path(q, k, v, q_bounds, k_bounds, scale, want_lse, n_kv_only, n_q_only):
    """Some sequences are one-sided: the op sees only sequences non-empty on both sides.

    Only the KV side is rebuilt (one ``torch.cat`` of row runs per K / V tensor; K / V are the smaller
    side under GQA and no larger under MHA): KV-only sequences are dropped (they have no query
    rows), and each query-only sequence gets one zero KV row, so its queries attend to a zero
    value.  ``q`` goes to the op as it is and the output needs no scatter; afterwards the
    query-only rows are set to 0 / ``-inf`` outright (one ``index_fill_`` over those rows only),
    so nothing depends on what the op computes for them.
    """
    log_once(logger, ("packed_attention", "compact"),
             "sglang-ascend-hybrid: packed attention batch has sequences empty on one side "
             "(first seen: %d KV-only, %d query-only); compacting them for the NPU kernel: "
             "KV-only sequences dropped, one zero key per query-only sequence (query-only rows "
             "get output 0, LSE -inf)", n_kv_only, n_q_only)
    k_runs: list[tuple[int, int] | None] = []  # source KV rows of the op's KV side (None: a zero row)
    q_only_runs: list[tuple[int, int]] = []
    q_ends, k_ends = [], []
    k_total = two_sided = 0
    for (qs, qe), (ks, ke) in zip(pairwise(q_bounds), pairwise(k_bounds)):
        if qe == qs:          # KV-only or empty: no query rows, nothing for the op
            continue
        if ke > ks:
            k_runs.append((ks, ke))
            k_total += ke - ks
            two_sided += 1
        else:                 # query-only: one zero KV row
            k_runs.append(None)
            q_only_runs.append((qs, qe))
            k_total += 1
        q_ends.append(qe)     # q keeps every row: its ends are the original ones
        k_ends.append(k_total)
    if not two_sided:         # no sequence has both queries and keys: no work for the op
        return _empty_result(q, v)

    # (a one-sided sequence exists, so the KV side is never all of k / v: a copy, or a slice)
    kc, vc = _concat_runs(k, k_runs), _concat_runs(v, k_runs)

    out, lse = _call_op(q.contiguous(), kc, vc, q_ends, k_ends, scale, want_lse)
    if q_only_runs:
        rows = _gather_index(q_only_runs, q.device)
        out.index_fill_(0, rows, 0.0)
        if lse is not None:
            lse.index_fill_(1, rows, float("-inf"))
    return out, lse


def _device_path(q, k, v, q_bounds, k_bounds, scale, want_lse):
    n_kv_only = n_q_only = 0
    for (qs, qe), (ks, ke) in zip(pairwise(q_bounds), pairwise(k_bounds)):
        if qe == qs and ke > ks:
            n_kv_only += 1
        elif qe > qs and ke == ks:
            n_q_only += 1
    if n_kv_only == 0 and n_q_only == 0:
        return _fast_path(q, k, v, q_bounds, k_bounds, scale, want_lse)
    return _compacting_path(q, k, v, q_bounds, k_bounds, scale, want_lse, n_kv_only, n_q_only)


# ---------------------------------------------------------------------------
# The ladder
# ---------------------------------------------------------------------------

@dataclass
class AttentionCall:
    """One validated packed-attention call: q / k / v ``[T, N, D]``, the softmax scale, whether the
    LSE is wanted, and both sides' host boundaries (already checked)."""
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    scale: float
    want_lse: bool
    q_bounds: tuple[int, ...]
    k_bounds: tuple[int, ...]

    def signature(self) -> AttentionSignature:
        """Shape facts a refusal is remembered by (never the sequence lengths)."""
        q, k, v = self.q, self.k, self.v
        return AttentionSignature(query_heads=q.shape[1], key_value_heads=k.shape[1], head_dim_q=q.shape[2],
                                  head_dim_k=k.shape[2], head_dim_v=v.shape[2], dtype=dtype_name(q.dtype),
                                  device=q.device.type)

    def refusal(self) -> str | None:
        """Why ``npu_fused_infer_attention_score`` cannot take the call (None: it can)."""
        return contract.refusal_reason(self.q.shape[1], self.k.shape[1], self.q.shape[2], self.k.shape[2],
                                       self.v.shape[2], len(self.q_bounds) - 1, self.q.dtype)


def _fia_ok(call: AttentionCall) -> Optional[str]:
    if not seam.serves(OP_NAME, call.q, call.k, call.v):
        return Absent(f"{OP_NAME} is not installed for {call.q.device.type} tensors")
    return call.refusal()


def _fia(call: AttentionCall):
    return _device_path(call.q, call.k, call.v, call.q_bounds, call.k_bounds, call.scale, call.want_lse)


def _torch(call: AttentionCall):
    return packed_attention_torch(call.q, call.k, call.v, call.q_bounds, call.k_bounds, call.scale)



LADDER = Ladder("packed_attention", [
    Rung("npu_fia", lambda sig, c: _fia_ok(c), _fia, device=True, ops=(OP_NAME,)),
    Rung("torch", lambda sig, c: None, _torch),
], rejection=lambda rung, sig, reason: (f"sglang-ascend-hybrid: packed attention {reason} is outside {OP_NAME}'s "
                                        "contract; using the torch path"), log=logger)


def attend(call: AttentionCall):
    """Serve a validated call: the first rung that can.  The ladder says once per shape when the
    device op is there but the call is outside its contract; this says once per device type when
    no device op serves the tensors."""
    if not seam.serves(OP_NAME, call.q, call.k, call.v):
        log_once(logger, ("packed_attention", "reference", call.q.device.type),
                 "sglang-ascend-hybrid: packed attention on %s tensors without the %s "
                 "kernel; using the torch path", call.q.device.type, OP_NAME)
    return LADDER(call.signature(), call)
