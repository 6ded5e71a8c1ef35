"""GDN speculative verify (MTP) through a kernel ladder: the NPU op where its contract holds,
an exact torch implementation of the same semantics everywhere else.

The op is ``torch.ops.npu.recurrent_gated_delta_rule`` (contract: :mod:`.contract`,
read from sgl-project/sgl-kernel-npu ``csrc/recurrent_gated_delta_rule`` at f425bdf1).  SGLang's Ascend GDN backend
calls it for every
verify step; it is bf16-only without a dtype check, so with the fp32 SSM pool the
Qwen3.5 / 3.6 configs ask for it reads fp32 bytes as bf16 (sglang issue #40419).

Rungs:

``npu_recurrent``  the op, when every tensor it reads or writes is bf16, S <= 8 (below), its
                   on-chip memory fits the head dims (vStep), and an intermediate-state
                   scratch of at least ``B*S`` rows is given.  The op has no padding skip (it
                   stores every token ``t < actual_seq_lengths[b]`` to row
                   ``ssm_state_indices[b, t]``), so padding rows (index -1) are sent to the
                   last scratch row no request names, found on the device
                   (:func:`_padding_row`): with ``rows >= B*S`` one exists whenever padding
                   does, and no request reads or writes it (a shared last entry could be a live
                   request's rows).  Padding's initial-state reads stay in
                   bounds (cache index clamped to 0).
``torch``          :func:`verify_torch`: the op's semantics (pre-sigmoid beta, internal
                   l2norm, initial state from ``cache_indices`` on a request's first step,
                   per-token write of every intermediate state, padding skipped) computed
                   in fp32 and stored in the pool's dtype.

On both rungs the output of a padding token (index -1) is 0, like a token past its sequence's
length, and its state is stored nowhere a request reads.

Draft depth (``S`` = SGLang's ``speculative_num_draft_tokens``).  Only the NPU op has a limit:
its kernel holds ``MAX_MTP = 8`` tokens per request in on-chip buffers and its host never checks
S (:data:`~.contract.RECURRENT_MAX_TOKENS`, cited there), so ``npu_recurrent``'s predicate refuses
S > 8 with that reason -- the ladder logs it once per signature -- and the torch rung, which has
no depth limit, serves the call (9 .. 16 and beyond).  Nothing else on the verify path depends on
S: the padding row needs ``rows >= B*S`` scratch rows, which SGLang's ``[size + 1, S]`` scratch has
at any S; the torch rung's fp32 buffer of one block's per-step states grows as ``S`` (off CPU the
whole batch: ``B*S`` fp32 states, as many as one layer's scratch rows).  Upstream, read for S > 8
(sgl-kernel-npu f425bdf1; SGLang 0.5.20 .. 0.5.23): ``torch.ops.npu.causal_conv1d``'s speculative
update keeps ``2 + S <= state_len`` with SGLang's window of ``(W-1) + (S-1)`` rows at W = 4
(``state_len = S + 2``: csrc/causal_conv1d/op_kernel/causal_conv1d.h ``WriteBackStateSpec``) and
loops over the window's tokens through a 5-slot ring, so no depth limit; ``move_intermediate_cache``
and ``conv_state_rollback`` (python/sgl_kernel_npu/sgl_kernel_npu/mamba/mamba_state_update_triton.py)
index the draft axis by stride and shift by ``S - 1 - step`` rows; SGLang sets no NPU cap on
``speculative_num_draft_tokens`` (only the extra-buffer radix cache wants ``mamba_track_interval >= S``:
srt/arg_groups/mamba_hook.py ``validate_mamba_extra_buffer``).

Both write the caller's tensors in place, like the op (the commit of accepted steps,
``move_intermediate_cache``, is upstream's and dtype-preserving).  The op's refusals all
come from its host checks, which run before the kernel is launched, so a refused call
has written nothing.  Everything here is capture-safe: no host sync, no data-dependent
shape, no Python decision on tensor values (value checks only with ``check_values``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import NamedTuple, Optional

import torch

from sglang_ascend_hybrid.logutil import log_once
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.decisions import Decisions, checked_first
from sglang_ascend_hybrid.ops.errors import bad_input
from sglang_ascend_hybrid.ops.gdn import contract as caps
from sglang_ascend_hybrid.ops.gdn.contract import OP_NPU_RECURRENT
from sglang_ascend_hybrid.ops.gdn.pool_step import advance, block_rows
from sglang_ascend_hybrid.ops.gdn.scatter import scatter_live_rows
from sglang_ascend_hybrid.ops.gdn.signature import GdnSignature
from sglang_ascend_hybrid.ops.gdn.torch_impl import l2norm
from sglang_ascend_hybrid.ops.host import host_list
from sglang_ascend_hybrid.ops.index_dtype import is_index_dtype
from sglang_ascend_hybrid.ops.ladder import Absent, Ladder, Rung
from sglang_ascend_hybrid.ops.signature import dtype_name
from sglang_ascend_hybrid.ops.step_cache import StepValue
from sglang_ascend_hybrid.ops.tensors import as_dtype

logger = logging.getLogger(__name__)



@dataclass
class VerifyCall:
    """One verify step, as the op takes it (batch b owns rows ``b*S .. b*S+S-1``)."""

    mix_qkv: torch.Tensor                        # [B, S, 2*nk*dk + nv*dv]
    recurrent_state: torch.Tensor                # [N, nv, dv, dk] the SSM pool (layer slice)
    beta: torch.Tensor                           # [B, S, nv] pre-sigmoid
    g: Optional[torch.Tensor]                    # [B, S, nv] log-space decay, or None (alpha = 1)
    scale: float
    actual_seq_lengths: torch.Tensor             # [B]
    ssm_state_indices: torch.Tensor              # [B, S] state row written after each token
    nk: int
    nv: int
    intermediate_state: Optional[torch.Tensor] = None   # [M, nv, dv, dk]
    cache_indices: Optional[torch.Tensor] = None         # [B] pool slot of each request
    num_accepted_tokens: Optional[torch.Tensor] = None   # [B]
    _signature: Optional[GdnSignature] = None

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """(B, S, dk, dv)"""
        return (self.mix_qkv.shape[0], self.mix_qkv.shape[1], self.recurrent_state.shape[3],
                self.recurrent_state.shape[2])

    def signature(self) -> GdnSignature:
        if self._signature is None:
            B, S, dk, dv = self.shape
            out = self.intermediate_state if self.intermediate_state is not None else self.recurrent_state
            self._signature = GdnSignature(self.nv, self.nk, dk, dv, self.mix_qkv.dtype, state_dtype=out.dtype)
        return self._signature


def _fail(name: str, value, expected: str):
    raise bad_input(name, value, expected)


def check_verify_inputs(call: VerifyCall) -> None:
    """Shape / dtype checks (no sync), on every call."""
    mix, st = call.mix_qkv, call.recurrent_state
    if mix.dim() != 3:
        _fail("mix_qkv", tuple(mix.shape), "[B, S, 2*nk*dk + nv*dv]")
    if st.dim() != 4 or st.shape[1] != call.nv:
        _fail("recurrent_state", tuple(st.shape), f"[slots, nv={call.nv}, dv, dk]")
    B, S, dk, dv = call.shape
    if call.nk <= 0 or call.nv <= 0 or call.nv % call.nk:
        _fail("nv", call.nv, f"a positive multiple of nk={call.nk}")
    width = 2 * call.nk * dk + call.nv * dv
    if mix.shape[2] != width:
        _fail("mix_qkv", tuple(mix.shape), f"last dim 2*nk*dk + nv*dv = {width}")
    for name, t in (("beta", call.beta), ("g", call.g)):
        if t is not None and tuple(t.shape) != (B, S, call.nv):
            _fail(name, tuple(t.shape), f"[{B}, {S}, {call.nv}]")
    if tuple(call.ssm_state_indices.shape) != (B, S) or not is_index_dtype(call.ssm_state_indices.dtype):
        _fail("ssm_state_indices", f"{tuple(call.ssm_state_indices.shape)} {call.ssm_state_indices.dtype}",
              f"an integer tensor [{B}, {S}]")
    for name, t in (("actual_seq_lengths", call.actual_seq_lengths), ("cache_indices", call.cache_indices),
                    ("num_accepted_tokens", call.num_accepted_tokens)):
        if t is not None and (t.numel() != B or not is_index_dtype(t.dtype)):
            _fail(name, f"{tuple(t.shape)} {t.dtype}", f"an integer tensor of {B} entries")
    if call.intermediate_state is not None:
        it = call.intermediate_state
        if it.dim() != 4 or tuple(it.shape[1:]) != tuple(st.shape[1:]) or it.dtype != st.dtype:
            _fail("intermediate_state", f"{tuple(it.shape)} {it.dtype}",
                  f"[rows, {call.nv}, {dv}, {dk}] in the pool's dtype {st.dtype}")
        if call.cache_indices is None:
            _fail("cache_indices", None, "a tensor when intermediate_state is given")


def check_verify_values(call: VerifyCall) -> None:
    """Value checks (read on the host: direct calls and SGLANG_ASCEND_HYBRID_DEBUG_CHECKS=1 only)."""
    B, S, _, _ = call.shape
    out_rows = (call.intermediate_state if call.intermediate_state is not None else call.recurrent_state).shape[0]
    lens = host_list(call.actual_seq_lengths)
    if any(not 0 <= x <= S for x in lens):
        _fail("actual_seq_lengths", lens, f"entries in [0, S={S}]")
    idx = host_list(call.ssm_state_indices)
    shown = idx if B * S <= 32 else "..."
    written = [(idx[b][t], b, t) for b in range(B) for t in range(lens[b]) if idx[b][t] != -1]
    if any(not 0 <= row < out_rows for row, _, _ in written):
        _fail("ssm_state_indices", shown, f"rows in [0, {out_rows}) or -1 (padding)")
    writer: dict = {}
    for row, b, t in written:  # two requests storing one row: no order between the op's cores
        if row in writer:
            b0, t0 = writer[row]
            _fail("ssm_state_indices", shown, f"each state row written once per step (row {row}: request {b0} "
                                              f"token {t0} and request {b} token {t})")
        writer[row] = (b, t)
    nat = None
    if call.num_accepted_tokens is not None:
        nat = host_list(call.num_accepted_tokens)
        if any(not 1 <= x <= S for x in nat):
            _fail("num_accepted_tokens", nat, f"entries in [1, S={S}]")
    for b in range(B):  # the initial state row, as the op selects it
        r0 = idx[b][0 if nat is None else nat[b] - 1]
        if r0 < 0 and any(idx[b][t] >= 0 for t in range(lens[b])):
            _fail("ssm_state_indices", shown, f"request {b} starts from padding (-1 at num_accepted_tokens - 1) "
                                              "but stores states: a live request starts from a live row")
        from_scratch = call.intermediate_state is not None and r0 >= 0 and r0 % S != 0
        if from_scratch and r0 in writer and writer[r0][0] != b:
            _fail("ssm_state_indices", shown, f"no initial state row another request writes in the same step "
                                              f"(row {r0}: read by request {b}, written by request {writer[r0][0]})")
    if call.cache_indices is not None:
        ci = host_list(call.cache_indices)
        n = call.recurrent_state.shape[0]
        if any(not (x == -1 or 0 <= x < n) for x in ci):
            _fail("cache_indices", ci, f"slots in [0, {n}) or -1 (padding)")


# ----------------------------------------------------------------------------- torch rung


def _initial_rows(call: VerifyCall):
    """The op's initial-state selection as rows, clamped so every gather stays in bounds (padding):
    ``(pool rows [B], scratch rows [B] or None, first step [B, 1, 1, 1] or None)``.  Without a
    scratch the initial state is the pool row ``ssm_state_indices[b, pos]``; with one it is the
    pool row ``cache_indices[b]`` on a first step (``pos`` at a step boundary), else that scratch row."""
    B, S, _, _ = call.shape
    idx = call.ssm_state_indices.long()
    pos = (torch.zeros(B, dtype=torch.long, device=idx.device) if call.num_accepted_tokens is None
           else (call.num_accepted_tokens.long() - 1).clamp(0, S - 1))
    r0 = idx.gather(1, pos.view(B, 1)).view(B)
    n = call.recurrent_state.shape[0]
    if call.intermediate_state is None:
        return r0.clamp(0, n - 1), None, None
    m = call.intermediate_state.shape[0]
    return (call.cache_indices.long().clamp(0, n - 1), r0.clamp(0, m - 1),
            (r0.remainder(S) == 0).view(B, 1, 1, 1))


def _gather_initial(call: VerifyCall, rows, b0: int, b1: int, out: torch.Tensor) -> torch.Tensor:
    """Initial states of requests ``b0:b1`` into ``out`` (fp32, a block-sized buffer)."""
    pool_rows, scratch_rows, first = rows
    from_pool = call.recurrent_state.index_select(0, pool_rows[b0:b1])
    if scratch_rows is None:
        return out.copy_(from_pool)
    from_scratch = call.intermediate_state.index_select(0, scratch_rows[b0:b1])
    return torch.where(first[b0:b1], from_pool, from_scratch, out=out) if from_pool.dtype == out.dtype \
        else out.copy_(torch.where(first[b0:b1], from_pool, from_scratch))


# Requests whose fp32 states are updated together on a CPU: about 1 MiB of state per step, so a
# block's states stay in cache between the per-token passes (other devices: one block).
_BLOCK_BYTES = 1 << 20


def verify_torch(call: VerifyCall) -> torch.Tensor:
    """The op's verify semantics in torch, fp32 compute, states stored in the pool's dtype.

    Per token and value head, with the previous state ``S`` (value-first), ``a = exp(g)`` and
    ``q' = scale * q`` (the maths of :func:`~sglang_ascend_hybrid.ops.gdn.pool_step.step_on_pool`)::

        u = beta (v - a S k);   S' = a S + u k^T;   o = a (S q') + u (k . q')

    so one matmul of the previous state against the two columns ``[k, q']`` (a column-major
    operand, fast on CPU BLAS) gives both products, and the new state is written once (decay into
    the step's buffer, then a rank-1 update in place).  Requests are processed in blocks (a static
    loop: shapes never depend on values) into one reused buffer of the block's per-step states,
    which is scattered out once per block."""
    B, S, dk, dv = call.shape
    nk, nv = call.nk, call.nv
    dev = call.mix_qkv.device
    f32 = torch.float32
    mix = call.mix_qkv.float()
    q, k, v = torch.split(mix, [nk * dk, nk * dk, nv * dv], dim=-1)
    ratio = nv // nk
    q = l2norm(q.reshape(B, S, nk, dk)) * call.scale
    k = l2norm(k.reshape(B, S, nk, dk))
    kq = torch.stack([k, q], dim=-2)                               # [B, S, nk, 2, dk]: rows k, q'
    kdotq = (k * q).sum(-1).repeat_interleave(ratio, dim=2).unsqueeze(-1)   # [B, S, nv, 1]
    v = v.reshape(B, S, nv, dv)
    beta = torch.sigmoid(call.beta.float()).unsqueeze(-1)          # [B, S, nv, 1]
    alpha = (torch.ones(B, S, nv, dtype=f32, device=dev) if call.g is None
             else call.g.float().exp()).unsqueeze(-1)              # [B, S, nv, 1]
    init_rows = _initial_rows(call)    # gathered per block, before any of the block's writes
    target = call.intermediate_state if call.intermediate_state is not None else call.recurrent_state
    rows = call.ssm_state_indices.long().t()                       # [S, B] step-major
    in_len = torch.arange(S, device=dev).view(S, 1) < call.actual_seq_lengths.long().view(1, B)
    valid = in_len & (rows >= 0) & (rows < target.shape[0])
    rows = rows.clamp(0, target.shape[0] - 1)
    out = torch.empty(B, S, nv, dv, dtype=f32, device=dev)
    block = block_rows(B, nv * dv * dk * 4, dev, _BLOCK_BYTES)    # the whole batch off CPU
    steps = torch.empty(S, block, nv, dv, dk, dtype=f32, device=dev)   # one block's states, step-major
    init = torch.empty(block, nv, dv, dk, dtype=f32, device=dev)
    for b0 in range(0, B, block):                                  # static loops
        b1 = min(B, b0 + block)
        n = b1 - b0
        state = _gather_initial(call, init_rows, b0, b1, init[:n])
        for t in range(S):
            cur = steps[t, :n]
            advance(state, cur, kq[b0:b1, t], k[b0:b1, t], kdotq[b0:b1, t], alpha[b0:b1, t], beta[b0:b1, t],
                    v[b0:b1, t], out[b0:b1, t])
            state = cur
        scatter_live_rows(target, rows[:, b0:b1].reshape(S * n), valid[:, b0:b1].reshape(S * n),
                         steps[:, :n].reshape(S * n, nv, dv, dk))
    live = in_len & (call.ssm_state_indices.t() >= 0)               # [S, B]: not past the length, not padding
    out = torch.where(live.t().reshape(B, S, 1, 1), out, torch.zeros_like(out))
    # contiguous, as the op's output: SGLang's forward_extend views it as [-1, nv, dv]
    return out.to(call.mix_qkv.dtype).contiguous()


# ----------------------------------------------------------------------------- npu rung


def _npu_reason(call: VerifyCall) -> Optional[str]:
    B, S, dk, dv = call.shape
    if call.intermediate_state is None:
        return "no intermediate-state scratch to park padding rows in"
    rows = call.intermediate_state.shape[0]
    if rows < B * S:
        return (f"the intermediate-state scratch has {rows} rows, fewer than B*S = {B * S}: no row is sure to be "
                "free for its padding writes")
    dtypes = (call.mix_qkv.dtype, call.recurrent_state.dtype, call.intermediate_state.dtype)
    reason = caps.recurrent_refusal_reason(call.nv, call.nk, dk, dv, S, dtypes)
    if reason is None and not (call.recurrent_state.is_contiguous() and call.intermediate_state.is_contiguous()):
        reason = "the state pool or scratch is not contiguous"
    return reason


def _npu_supports(sig: GdnSignature, call: VerifyCall) -> Optional[str]:
    if not seam.serves(OP_NPU_RECURRENT, call.mix_qkv):
        return Absent(f"torch.ops.npu.{OP_NPU_RECURRENT} is not installed for these tensors")
    return _npu_reason(call)


def _rejection(rung: str, sig: GdnSignature, reason: str) -> str:
    return (f"sglang-ascend-hybrid: GDN verify {sig} cannot use torch.ops.npu.recurrent_gated_delta_rule: {reason}; "
            f"using the torch verify path (fp32 compute, states kept in {dtype_name(sig.state_dtype)})")


def _padding_row(idx: torch.Tensor, rows: int) -> torch.Tensor:
    """The last of ``rows`` scratch rows that ``idx`` (``ssm_state_indices``) does not name, as a 0-d
    int32 tensor: every row a request stores or starts from is named there, so this one is neither
    read nor written by any request.  When some entry is padding (< 0), at most ``B*S - 1`` entries
    name rows, so with ``rows >= B*S`` (the predicate) such a row exists.  The last one: in SGLang's
    ``[size + 1, S]`` scratch that is its spare entry.  Fixed shapes, no host read (graph capture)."""
    named = torch.where(idx >= 0, idx.long(), rows).clamp(max=rows).reshape(-1)  # padding, out of range -> row `rows`
    used = torch.zeros(rows + 1, dtype=torch.int32, device=idx.device).index_fill_(0, named, 1)[:rows]
    free = torch.where(used == 0, torch.arange(1, rows + 1, dtype=torch.int32, device=idx.device), 0)
    return free.amax() - 1            # a max, not an argmin: no tie to break, the same row on every device


class _StepRows(NamedTuple):
    """What every layer of a verify step hands the op besides its own tensors, and the rows it zeroes."""

    indices: torch.Tensor    # [B, S] int32: ssm_state_indices, padding sent to the padding row
    cache: torch.Tensor      # [B] int32: cache_indices clamped to >= 0
    accepted: Optional[torch.Tensor]   # [B] int32 num_accepted_tokens, or None
    lengths: torch.Tensor    # [B] int32 actual_seq_lengths
    dead: torch.Tensor       # [B, S, 1, 1] bool: past a request's length, or padding (output zeroed)


def _step_rows(call: VerifyCall, rows: int) -> _StepRows:
    """The same for every layer of a step (kept across them, :mod:`~sglang_ascend_hybrid.ops.step_cache`)."""
    B, S, _, _ = call.shape
    idx = call.ssm_state_indices.to(torch.int32)
    padding = idx < 0
    indices = torch.where(padding, _padding_row(idx, rows), idx).contiguous()   # padding -> a free row
    lengths = call.actual_seq_lengths.to(torch.int32).contiguous()
    in_len = torch.arange(S, device=idx.device).view(1, S) < lengths.view(B, 1)
    nat = call.num_accepted_tokens
    return _StepRows(indices, call.cache_indices.to(torch.int32).clamp(min=0).contiguous(),
                     None if nat is None else nat.to(torch.int32).contiguous(), lengths,
                     (~(in_len & ~padding)).view(B, S, 1, 1))


_STEP_ROWS = StepValue("gdn verify step rows")


def _npu_prepare(call: VerifyCall):
    """The npu_recurrent verify rung for every call of ``call``'s metadata: the scratch's rows, the step's
    index tensors and the signature read once."""
    sig, rows = call.signature(), call.intermediate_state.shape[0]
    accepted = call.num_accepted_tokens is not None

    def run(c: VerifyCall) -> torch.Tensor:
        index_tensors = (c.ssm_state_indices, c.actual_seq_lengths, c.cache_indices)
        if accepted:
            index_tensors += (c.num_accepted_tokens,)
        step = _STEP_ROWS.get(index_tensors, (rows,), lambda: _step_rows(c, rows))
        out = seam.call(OP_NPU_RECURRENT, c.mix_qkv.contiguous(), c.recurrent_state,
                        as_dtype(c.beta, torch.bfloat16).contiguous(), c.scale, step.lengths, step.indices,
                        c.nk, c.nv, intermediate_state=c.intermediate_state, cache_indices=step.cache,
                        num_accepted_tokens=step.accepted,
                        g=None if c.g is None else as_dtype(c.g, torch.float32).contiguous())
        log_once(logger, ("gdn-verify-path", "npu", sig),
                 "sglang-ascend-hybrid: GDN verify %s runs on torch.ops.npu.recurrent_gated_delta_rule", sig)
        return out.masked_fill_(step.dead, 0.0)  # rows the op leaves unwritten, padding

    return run


def _torch_run(call: VerifyCall) -> torch.Tensor:
    log_once(logger, ("gdn-verify-path", "torch", call.signature()),
             "sglang-ascend-hybrid: GDN verify %s runs on the torch verify path", call.signature())
    return verify_torch(call)


VERIFY = Ladder("gdn_verify", [
    Rung("npu_recurrent", lambda sig, call: _npu_supports(sig, call), is_refusal=caps.is_recurrent_refusal,
         device=True, ops=(OP_NPU_RECURRENT,), prepare=_npu_prepare),
    Rung("torch", lambda sig, call: None, _torch_run),
], rejection=_rejection, log=logger)


def verify_rungs() -> tuple[str, ...]:
    return VERIFY.names


_DECIDED = Decisions("gdn verify")


def recurrent_verify(call: VerifyCall, *, backend: str = "auto", check_values: Optional[bool] = None
                     ) -> torch.Tensor:
    """Run one verify step through the ladder; returns ``[B, S, nv, dv]`` in mix_qkv's dtype
    (rows past a sequence's length are 0).  ``check_values`` (default True) reads the index
    tensors on the host first; the serving hook passes ``SGLANG_ASCEND_HYBRID_DEBUG_CHECKS``."""
    call._signature, first, runner = checked_first(_DECIDED, VERIFY, call, backend, check_verify_inputs, VERIFY.runner)
    if check_values is None or check_values:
        check_verify_values(call)
    return VERIFY(call._signature, call, backend=backend, first=first, runner=runner)
