"""CPU emulators of the Ascend GDN kernels, with their contracts.

``sgl_kernel_npu.fla.mega_chunk_gdn:run_mega_chunk_gdn`` (:func:`make_mega_emulator`)
    The Python entry of the mega chunk kernel.  Like the real one it casts q, k, v
    and beta to fp16, then applies ``check_shape`` of ``csrc/mega_chunk_gdn/op_host/
    mega_chunk_gdn.cpp`` with the same messages (each followed by the
    ``GDN_ATTN_BACKEND_TRITON=1`` hint), e.g.
    ``RuntimeError: unsupported mega_chunk_gdn (NumValueHeads, NumKeyHeads) pair Try
    running the alternative backend by setting GDN_ATTN_BACKEND_TRITON=1.``
    States are key-first ``[N, H, K, V]`` (the kernel's layout); the final state is
    rounded through fp16 as the kernel keeps it.  Returns the real 7-tuple
    ``(g_sum, o, A, final_state, w, h, v_new)``; only ``o`` and ``final_state`` are
    meaningful here (the others are placeholders of the right shapes).
``torch.ops.npu.chunk_gated_delta_rule`` (:func:`make_npu_chunk_emulator`)
    As SGLang 0.5.23 calls it: ``q, k [T, Hk, K]``, ``v [T, Hv, V]``, ``beta, g
    [1, T, Hv]``, value-first ``initial_state [N, Hv, V, K]``, ``actual_seq_lengths
    [N]``, ``chunk_state`` (written: state at the start of every 64-token chunk,
    ``[NT, Hv, V, K]``).  Returns ``(o [T, Hv, V], final [N, Hv, V, K])``.  Refuses
    shapes outside its reported limits with an aclnn-style ``RuntimeError``
    (error code 161002); ``refuse`` adds pairs it refuses on top.
``torch.ops.npu.recurrent_gated_delta_rule`` (:func:`make_npu_recurrent_emulator`)
    One token per sequence: ``mix_qkv [B, 1, 2*Hk*K + Hv*V]``, the state pool
    (value-first, updated in place at ``ssm_state_indices``), ``beta, g [B, 1, Hv]``.
    Multi-token (speculative verify) calls are not emulated (NotImplementedError).

The arithmetic is the token-by-token recurrence of
:func:`sglang_ascend_hybrid.ops.gdn.reference.recurrent_reference`, an
implementation independent of the chunked torch path.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch

from sglang_ascend_hybrid.ops.gdn import capabilities as caps
from sglang_ascend_hybrid.ops.gdn.reference import recurrent_reference

OP_MEGA = "sgl_kernel_npu.fla.mega_chunk_gdn:run_mega_chunk_gdn"
OP_NPU_CHUNK = "chunk_gated_delta_rule"
OP_NPU_RECURRENT = "recurrent_gated_delta_rule"

MEGA_HINT = "Try running the alternative backend by setting GDN_ATTN_BACKEND_TRITON=1."
MEGA_CHUNK = 128


def _mega_check(ok: bool, message: str) -> None:
    if not ok:
        raise RuntimeError(f"{message} {MEGA_HINT}")


def make_mega_emulator(predicate: Optional[Callable[[int, int], bool]] = None) -> Callable:
    """An emulator of ``run_mega_chunk_gdn`` accepting the head pairs of ``predicate``
    (default: the current release's table)."""
    pair_ok = predicate or caps.CURRENT_MEGA_ENTRY.supports

    def run_mega_chunk_gdn(q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens):
        if scale is None:
            scale = k.shape[-1] ** -0.5
        q_dtype = q.dtype
        q, k, v, beta = (t.half() for t in (q, k, v, beta))
        cu = (torch.tensor([0, q.shape[1]], dtype=torch.int32) if cu_seqlens is None
              else cu_seqlens.to(torch.int32))
        has_init = initial_state is not None
        if has_init:
            initial_state = initial_state.half()
        D = caps.MEGA_HEAD_DIM
        _mega_check(q.dim() == 4, "q must have shape [B, T, Hg, D]")
        _mega_check(k.dim() == 4, "k must have shape [B, T, Hg, D]")
        _mega_check(v.dim() == 4, "v must have shape [B, T, H, D]")
        _mega_check(g.dim() == 3, "g must have shape [B, T, H]")
        _mega_check(beta.dim() == 3, "beta must have shape [B, T, H]")
        _mega_check(q.shape[0] == 1, "mega_chunk_gdn currently supports packed B=1 input")
        _mega_check(q.shape == k.shape, "q and k must have the same shape")
        _mega_check(q.shape[1] == v.shape[1], "q/k and v sequence lengths must match")
        _mega_check(pair_ok(v.shape[2], q.shape[2]),
                    "unsupported mega_chunk_gdn (NumValueHeads, NumKeyHeads) pair")
        _mega_check(q.shape[3] == D and v.shape[3] == D, "mega_chunk_gdn supports head dimension 128")
        _mega_check(g.shape[0] == 1 and beta.shape[0] == 1, "g and beta must use packed B=1 layout")
        _mega_check(g.shape[1] == q.shape[1] and beta.shape[1] == q.shape[1],
                    "g/beta sequence lengths must match q")
        _mega_check(g.shape[2] == v.shape[2] and beta.shape[2] == v.shape[2],
                    "g/beta must use the same NumValueHeads as v")
        _mega_check(g.dtype == torch.float32, "g must be float32")
        _mega_check(q.is_contiguous() and k.is_contiguous() and v.is_contiguous(),
                    "q, k, and v must be contiguous")
        _mega_check(g.is_contiguous() and beta.is_contiguous() and cu.is_contiguous(),
                    "g, beta, and cu_seqlens must be contiguous")
        n = cu.numel() - 1
        if has_init:
            _mega_check(initial_state.dim() == 4, "initial_state must have shape [N, H, D, D]")
            _mega_check(initial_state.shape[0] == n, "initial_state.size(0) must match cu_seqlens sequences")
            _mega_check(initial_state.shape[1] == v.shape[2], "initial_state.size(1) must match NumValueHeads")
            _mega_check(initial_state.shape[2] == D and initial_state.shape[3] == D,
                        "initial_state must use head dimensions 128 x 128")
        vf_init = None if not has_init else initial_state.float().transpose(-1, -2)  # -> value-first
        o, final = recurrent_reference(q, k, v, g, beta, cu_seqlens=cu, initial_state=vf_init, scale=scale)
        final_kv = final.transpose(-1, -2).half().float()  # kernel keeps the state in fp16
        H, T = v.shape[2], q.shape[1]
        lens = (cu[1:] - cu[:-1]).tolist()
        num_chunks = sum((x + MEGA_CHUNK - 1) // MEGA_CHUNK for x in lens)
        g_sum = torch.zeros_like(g)
        A = torch.zeros(1, T, H, MEGA_CHUNK, dtype=k.dtype)
        h = torch.zeros(1, num_chunks, H, D, D, dtype=k.dtype)
        return (g_sum, o.to(q_dtype), A, final_kv if output_final_state else None,
                torch.zeros_like(v), h, torch.zeros_like(v))

    return run_mega_chunk_gdn


def _aclnn_refuse(op: str, detail: str) -> None:
    raise RuntimeError(f"{op}: aclnn call failed, error code 161002 (parameter invalid): {detail}")


def make_npu_chunk_emulator(refuse: Optional[Callable[[int, int], bool]] = None) -> Callable:
    """An emulator of ``torch.ops.npu.chunk_gated_delta_rule``; ``refuse(Hv, Hk)`` makes
    it refuse more head pairs (as the real fused op does for some Qwen3.5 shapes)."""

    def chunk_gated_delta_rule(q, k, v, *, beta, initial_state, actual_seq_lengths, scale, chunk_state, g):
        name = "chunk_gated_delta_rule"
        if q.dim() != 3 or k.shape != q.shape or v.dim() != 3 or v.shape[0] != q.shape[0]:
            _aclnn_refuse(name, f"q/k must be [T, Nk, Dk] and v [T, Nv, Dv], got {tuple(q.shape)}, "
                                f"{tuple(k.shape)}, {tuple(v.shape)}")
        T, Hk, K = q.shape
        Hv, V = v.shape[1], v.shape[2]
        if not caps.npu_op_supports(Hv, Hk, K, V, q.dtype):
            _aclnn_refuse(name, f"unsupported shape nv={Hv} nk={Hk} dk={K} dv={V} dtype={q.dtype}")
        if refuse is not None and refuse(Hv, Hk):
            _aclnn_refuse(name, f"unsupported head pair nv={Hv} nk={Hk}")
        lens = actual_seq_lengths.to(torch.long)
        cu = torch.zeros(lens.numel() + 1, dtype=torch.long)
        cu[1:] = lens.cumsum(0)
        if int(cu[-1]) != T:
            _aclnn_refuse(name, f"sum(actual_seq_lengths)={int(cu[-1])} does not match T={T}")
        o, final = recurrent_reference(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), g.reshape(1, T, Hv),
                                       beta.reshape(1, T, Hv), cu_seqlens=cu,
                                       initial_state=initial_state, scale=scale)
        # per-chunk start states, recomputed chunk by chunk
        row = 0
        for s in range(lens.numel()):
            start = int(cu[s])
            state = initial_state[s:s + 1].float()
            for c0 in range(start, int(cu[s + 1]), 64):
                chunk_state[row] = state[0].to(chunk_state.dtype)
                c1 = min(c0 + 64, int(cu[s + 1]))
                _, state = recurrent_reference(q[None, c0:c1], k[None, c0:c1], v[None, c0:c1],
                                               g.reshape(1, T, Hv)[:, c0:c1], beta.reshape(1, T, Hv)[:, c0:c1],
                                               cu_seqlens=torch.tensor([0, c1 - c0]), initial_state=state,
                                               scale=scale)
                row += 1
        return o[0], final

    return chunk_gated_delta_rule


def make_npu_recurrent_emulator() -> Callable:
    """An emulator of ``torch.ops.npu.recurrent_gated_delta_rule`` (one token per sequence)."""

    def recurrent_gated_delta_rule(mix_qkv, recurrent_state, *, beta, scale, actual_seq_lengths,
                                   ssm_state_indices, nk, nv, intermediate_state=None, cache_indices=None,
                                   num_accepted_tokens=None, g):
        name = "recurrent_gated_delta_rule"
        B, S, D = mix_qkv.shape
        if S != 1:
            raise NotImplementedError(f"{name} emulator: only one token per sequence is emulated, got {S}")
        V, K = recurrent_state.shape[-2], recurrent_state.shape[-1]
        if recurrent_state.shape[1] != nv or D != 2 * nk * K + nv * V:
            _aclnn_refuse(name, f"mix_qkv last dim {D} / state {tuple(recurrent_state.shape)} do not match "
                                f"nk={nk} nv={nv}")
        if not caps.npu_op_supports(nv, nk, K, V, mix_qkv.dtype):
            _aclnn_refuse(name, f"unsupported shape nv={nv} nk={nk} dk={K} dv={V} dtype={mix_qkv.dtype}")
        q, k, v = torch.split(mix_qkv[:, 0], [nk * K, nk * K, nv * V], dim=-1)
        slots = ssm_state_indices.reshape(B, S)[:, 0].long()
        out = torch.zeros(B, 1, nv, V, dtype=mix_qkv.dtype)
        for b in range(B):
            slot = int(slots[b])
            if slot < 0:
                continue
            o, final = recurrent_reference(q[b].view(1, 1, nk, K), k[b].view(1, 1, nk, K), v[b].view(1, 1, nv, V),
                                           g.reshape(B, nv)[b].view(1, 1, nv).float(),
                                           beta.reshape(B, nv)[b].view(1, 1, nv).float(),
                                           cu_seqlens=torch.tensor([0, 1]),
                                           initial_state=recurrent_state[slot:slot + 1], scale=scale)
            recurrent_state[slot] = final[0].to(recurrent_state.dtype)
            out[b, 0] = o[0, 0].to(out.dtype)
        return out

    return recurrent_gated_delta_rule


def emulators(mega_predicate=None, npu_chunk_refuse=None) -> dict[str, Callable]:
    """Every GDN emulator, keyed by seam name (for ``seam.install_emulators``)."""
    return {
        OP_MEGA: make_mega_emulator(mega_predicate),
        OP_NPU_CHUNK: make_npu_chunk_emulator(npu_chunk_refuse),
        OP_NPU_RECURRENT: make_npu_recurrent_emulator(),
    }
