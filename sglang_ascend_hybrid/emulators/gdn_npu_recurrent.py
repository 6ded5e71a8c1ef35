"""CPU emulator of ``torch.ops.npu.recurrent_gated_delta_rule`` (decode and speculative verify),
mirroring :mod:`sglang_ascend_hybrid.ops.gdn.contract` (SKN = sgl-project/sgl-kernel-npu f425bdf1).
Memory the real op leaves unwritten is filled with NaN here; calls the real op would take and
compute wrongly without an error (a dtype it reinterprets, an index it reads out of bounds)
raise :class:`~sglang_ascend_hybrid.ops.errors.EmulatorContractViolation`.

``torch.ops.npu.recurrent_gated_delta_rule`` (:func:`make_npu_recurrent_emulator`; SKN
``csrc/recurrent_gated_delta_rule/op_host/recurrent_gated_delta_rule.cpp`` and
``op_kernel/recurrent_gated_delta_rule_kernel.cpp``, unchanged since 878309c5 / #403)
    Host ``TORCH_CHECK`` texts and the vStep refusal; bf16 only (violation otherwise); index
    tensors read as int32 without a cast (violation otherwise); mix_qkv, beta and the state used
    in place (violation when not contiguous; the host copies a non-contiguous intermediate_state,
    so its writes would be lost: violation); S <= 8 (violation).  Per batch b: initial row
    ``r0 = ssm_state_indices[b, num_accepted_tokens[b] - 1]`` (``[b, 0]`` without it), read from
    intermediate_state[r0] when given, else recurrent_state[r0]; with intermediate_state and
    ``r0 % S == 0`` from ``recurrent_state[cache_indices[b]]`` instead.  Per token
    ``t < actual_seq_lengths[b]``: q, k l2-normalised in fp32 (``x * rsqrt(sum x^2 + 1e-6)``), q
    scaled; ``beta = sigmoid(beta)`` (the kernel applies it); ``S = exp(g) S`` (no gating when g
    is None); ``u = beta (v - S k)``; ``S += u k^T``; ``o = S q``; the state is written (rounded
    to bf16, CAST_RINT) to row ``ssm_state_indices[b, t]`` of intermediate_state when given, else
    of recurrent_state.  Output ``[B, S, nv, dv]`` from ``torch::empty``: rows past a sequence's
    length are NaN.  Value head h reads key head ``h // (nv / nk)``.
"""

from __future__ import annotations

from typing import Callable

import torch

from sglang_ascend_hybrid.emulators.gdn_common import violation as _violation
from sglang_ascend_hybrid.ops.gdn import contract as caps


def _recurrent_check(ok: bool, text: str) -> None:
    if not ok:
        raise RuntimeError(text)


def make_npu_recurrent_emulator(*, ub_bytes: int = caps.UB_BYTES) -> Callable:
    """An emulator of ``torch.ops.npu.recurrent_gated_delta_rule`` (decode and speculative verify).

    Rows shared between requests: the kernel splits its ``(request, value head)`` work items over
    the AI cores in contiguous ranges with no order between cores (SKN ``op_kernel/
    recurrent_gated_delta_rule_kernel.cpp`` ``Process``: ``workIdx`` from ``blockIdx * avgload``), and
    every item reads its initial state before it stores its tokens' states (``ProcessHead``:
    ``CopyInState``, then ``Compute`` per token, ``CopyOutState`` to ``ssm_state_indices[seq_i]``).
    So a row two requests store has no defined value (NaN here), and a request whose initial state is
    a row another request stores in the same call reads no defined value (its state and outputs NaN).
    A request re-reading or re-writing its own rows is ordered (one work item per head)."""
    name = "recurrent_gated_delta_rule"

    def recurrent_gated_delta_rule(mix_qkv, recurrent_state, beta, scale, actual_seq_lengths, ssm_state_indices,
                                   nk, nv, intermediate_state=None, cache_indices=None, num_accepted_tokens=None,
                                   g=None, gk=None):
        _recurrent_check(mix_qkv.dim() == 3, "MixQKV must be 3-dimensional (B, S, D)")
        _recurrent_check(recurrent_state.dim() == 4, "State must be 4-dimensional (N, nv, dv, dk)")
        B, S, D = mix_qkv.shape
        dv, dk = recurrent_state.shape[2], recurrent_state.shape[3]
        expected = 2 * nk * dk + nv * dv
        _recurrent_check(D == expected, f"mix_qkv width mismatch. Expected: {expected}, Got: {D}. Formula: "
                                        f"D = nv*dv + 2*nk*dk, where nv={nv}, dv(or State.size(2))={dv}, "
                                        f"nk={nk}, dk(or State.size(3))={dk}")
        _recurrent_check(recurrent_state.shape[1] == nv, "State third dimension must match nv")
        _recurrent_check(beta.dim() == 3, "Beta must be 3-dimensional (B, S, nv)")
        _recurrent_check(beta.shape[0] == B, "Beta batch size must match MixQKV")
        _recurrent_check(beta.shape[1] == S, "Beta sequence length must match MixQKV")
        _recurrent_check(beta.shape[2] == nv, "Beta last dimension must equal nv")
        _recurrent_check(ssm_state_indices.dim() == 2, "ssm_state_indices must be 2-dimensional (B, S)")
        _recurrent_check(ssm_state_indices.shape[0] == B, "ssm_state_indices batch size must match MixQKV")
        _recurrent_check(ssm_state_indices.shape[1] == S, "ssm_state_indices sequence length must match MixQKV")
        _recurrent_check(caps.recurrent_vstep(nv, dk, dv, ub_bytes) >= 8, caps.RECURRENT_VSTEP_TEXT)
        # --- what the host does not check (undefined behaviour on the device)
        for label, t in (("mix_qkv", mix_qkv), ("beta", beta), ("recurrent_state", recurrent_state),
                         ("intermediate_state", intermediate_state)):
            if t is not None and t.dtype != caps.RECURRENT_DTYPE:
                _violation(name, f"{label} is {t.dtype}; the kernel is bf16-only and reads the bytes as bf16")
        for label, t in (("mix_qkv", mix_qkv), ("beta", beta), ("recurrent_state", recurrent_state)):
            if not t.is_contiguous():
                _violation(name, f"{label} is not contiguous (used in place by raw offsets)")
        if intermediate_state is not None and not intermediate_state.is_contiguous():
            _violation(name, "intermediate_state is not contiguous: the host writes into a contiguous copy, "
                             "the caller's tensor is never updated")
        for label, t in (("actual_seq_lengths", actual_seq_lengths), ("ssm_state_indices", ssm_state_indices)):
            if t.dtype != torch.int32:
                _violation(name, f"{label} is {t.dtype}; the kernel reads int32 without a cast")
        if S > caps.RECURRENT_MAX_TOKENS:
            _violation(name, f"S={S} > {caps.RECURRENT_MAX_TOKENS} (MAX_MTP buffers)")
        if nk <= 0 or nv % nk:
            _violation(name, f"nv={nv} is not a multiple of nk={nk}")
        if gk is not None:
            _violation(name, "gk is not emulated")
        states_out = intermediate_state if intermediate_state is not None else recurrent_state
        rows_out = states_out.shape[0]
        lens = actual_seq_lengths.tolist()
        idx = ssm_state_indices.tolist()
        nat = None if num_accepted_tokens is None else num_accepted_tokens.to(torch.int32).tolist()
        ci = None if cache_indices is None else cache_indices.to(torch.int32).tolist()
        ratio = nv // nk
        betas = torch.sigmoid(beta.float())
        gates = None if g is None else g.float().reshape(B, S, nv)
        out = torch.full((B, S, nv, dv), float("nan"), dtype=torch.float32)
        writers: dict[int, set] = {}  # row -> the requests that store it in this call
        for b in range(B):
            if not 0 <= lens[b] <= S:
                _violation(name, f"actual_seq_lengths[{b}]={lens[b]} outside [0, S={S}]")
            for t in range(lens[b]):
                dst = idx[b][t]
                if not 0 <= dst < rows_out:
                    _violation(name, f"ssm_state_indices[{b}, {t}]={dst} outside [0, {rows_out}) (no pad skip)")
                writers.setdefault(dst, set()).add(b)
        writes = []
        for b in range(B):
            length = lens[b]
            pos = 0 if nat is None else nat[b] - 1
            if not 0 <= pos < S:
                _violation(name, f"num_accepted_tokens[{b}]={pos + 1} outside [1, S={S}]")
            r0 = idx[b][pos]
            if intermediate_state is not None and r0 % S == 0:
                if ci is None:
                    _violation(name, "intermediate_state without cache_indices (reads a null pointer)")
                src, row = recurrent_state, ci[b]
            else:
                src, row = (intermediate_state if intermediate_state is not None else recurrent_state), r0
            if not 0 <= row < src.shape[0]:
                _violation(name, f"initial state row {row} of batch {b} outside [0, {src.shape[0]})")
            state = src[row].float().clone()  # [nv, dv, dk]
            if src is states_out and writers.get(row, set()) - {b}:
                state.fill_(float("nan"))  # another request stores this row: no order between the cores
            for t in range(length):
                dst = idx[b][t]
                tok = mix_qkv[b, t].float()
                q, k, v = torch.split(tok, [nk * dk, nk * dk, nv * dv])
                q, k, v = q.view(nk, dk), k.view(nk, dk), v.view(nv, dv)
                q = q * torch.rsqrt(q.pow(2).sum(-1, keepdim=True) + 1e-6) * scale
                k = k * torch.rsqrt(k.pow(2).sum(-1, keepdim=True) + 1e-6)
                q, k = q.repeat_interleave(ratio, 0), k.repeat_interleave(ratio, 0)
                if gates is not None:
                    state = state * gates[b, t].exp()[:, None, None]
                u = betas[b, t][:, None] * (v - torch.einsum("hvk,hk->hv", state, k))
                state = state + u[:, :, None] * k[:, None, :]
                out[b, t] = torch.einsum("hvk,hk->hv", state, q)
                writes.append((dst, state.to(torch.bfloat16)))
        for dst, value in writes:  # the real op writes per token as it goes
            states_out[dst] = value if len(writers[dst]) == 1 else float("nan")  # two requests: undefined
        return out.to(torch.bfloat16)

    return recurrent_gated_delta_rule
