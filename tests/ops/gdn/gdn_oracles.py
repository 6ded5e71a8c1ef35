"""Independent GDN references for the GDN reference-branch tests: FLA's naive recurrence per
sequence (with the state at the start of every 64-token chunk), and a CPU emulator of
sgl-kernel-npu's Triton prefill entry written from its source."""

from __future__ import annotations

import torch
from fla.ops.gated_delta_rule.naive import naive_recurrent_gated_delta_rule

from sglang_ascend_hybrid.ops.errors import EmulatorContractViolation

C = 64  # the entry's chunk length (sgl-kernel-npu chunk_local_cumsum(g, chunk_size=64))


def normalize(x):
    return x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + 1e-6)


def fla(q, k, v, g, beta, cu, h0_vf, scale, *, l2=False, chunk_starts=False):
    """FLA's naive recurrence per sequence, keys repeated per value head.  States value-first
    ``[N, Hv, V, K]`` in and out.  With ``chunk_starts`` also the state at the start of every
    64-token chunk of every sequence (sequence-major, value-first): the final state of the
    prefix before it."""
    hv = v.shape[2]
    qf, kf = q.float(), k.float()
    if l2:
        qf, kf = normalize(qf), normalize(kf)
    qf = qf.repeat_interleave(hv // q.shape[2], dim=2)
    kf = kf.repeat_interleave(hv // k.shape[2], dim=2)
    V, K = v.shape[3], q.shape[3]

    def run(a, b, s):
        init = (torch.zeros(1, hv, K, V) if h0_vf is None else h0_vf[s:s + 1].float().transpose(-1, -2))
        if b == a:
            return torch.zeros(1, 0, hv, V), init
        return naive_recurrent_gated_delta_rule(qf[:, a:b], kf[:, a:b], v[:, a:b].float(), beta[:, a:b].float(),
                                                g[:, a:b].float(), scale=scale, initial_state=init,
                                                output_final_state=True)

    outs, finals, starts = [], [], []
    bounds = cu.tolist()
    for s in range(len(bounds) - 1):
        a, b = bounds[s], bounds[s + 1]
        o, ht = run(a, b, s)
        outs.append(o)
        finals.append(ht.transpose(-1, -2))
        if chunk_starts:
            for c in range(0, b - a, C):
                starts.append(run(a, a + c, s)[1].transpose(-1, -2))
    h = torch.cat(starts) if chunk_starts else None
    return torch.cat(outs, dim=1), torch.cat(finals), h


def make_triton_chunk_emulator():
    """sgl-kernel-npu ``python/sgl_kernel_npu/sgl_kernel_npu/fla/chunk.py``
    ``chunk_gated_delta_rule_npu`` (commit 07aa7757), CPU: FLA layouts ``[B, T, H, D]``,
    key-first states ``[N, H, K, V]``, returns ``(o in q.dtype, final fp32 [N, H, K, V],
    h [B, NT, H, K, V] in k.dtype)`` with ``h`` the state at the start of every 64-token chunk
    (``chunk_gated_delta_rule_fwd_h``).  Its host checks raise its own texts; an initial state
    that is not ``[N, H, K, V]`` would be read out of bounds / transposed: a contract
    violation."""

    def chunk_gated_delta_rule_npu(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=True,
                                   cu_seqlens=None, head_first=False, use_qk_l2norm_in_kernel=False):
        assert q.dtype == k.dtype == v.dtype
        assert q.dtype != torch.float32, \
            "ChunkGatedDeltaRuleFunction does not support float32. Please use bfloat16."
        assert len(beta.shape) == 3, \
            "beta must be of shape [B, T, H] if head_first=False, or [B, H, T] otherwise."
        if head_first:
            raise DeprecationWarning("head_first is deprecated and will be removed in a future version. "
                                     "Please use head_first=False for now instead.")
        B, T, Hk, K = q.shape
        Hv, V = v.shape[2], v.shape[3]
        if cu_seqlens is None:
            cu_seqlens = torch.arange(0, (B + 1) * T, T)
            q, k, v, g, beta = (x.reshape(1, B * T, *x.shape[2:]) for x in (q, k, v, g, beta))
        elif B != 1:
            raise ValueError(f"The batch size is expected to be 1 rather than {B} when using `cu_seqlens`."
                             f"Please flatten variable-length inputs before processing.")
        n = len(cu_seqlens) - 1
        if initial_state is not None and initial_state.shape[0] != n:
            raise ValueError(f"The number of initial states is expected to be equal to the number of input "
                             f"sequences, i.e., {n} rather than {initial_state.shape[0]}.")
        if initial_state is not None and tuple(initial_state.shape) != (n, Hv, K, V):
            raise EmulatorContractViolation(
                f"chunk_gated_delta_rule_npu: initial_state {tuple(initial_state.shape)} is not [N, H, K, V] = "
                f"{(n, Hv, K, V)}")
        if g.dtype != torch.float32 and g.dtype != q.dtype:
            raise EmulatorContractViolation(f"chunk_gated_delta_rule_npu: g dtype {g.dtype}")
        scale = K ** -0.5 if scale is None else scale
        qf, kf = q[0].float(), k[0].float()
        if use_qk_l2norm_in_kernel:
            qf, kf = normalize(qf), normalize(kf)
        qf = qf.repeat_interleave(Hv // Hk, dim=1)
        kf = kf.repeat_interleave(Hv // Hk, dim=1)
        vf, gf, bf = v[0].float(), g[0].float(), beta[0].float()
        o = torch.empty(q.shape[1], Hv, V)
        final = torch.empty(n, Hv, K, V)
        hs = []
        bounds = [int(x) for x in cu_seqlens.tolist()]
        for s in range(n):
            S = torch.zeros(Hv, K, V) if initial_state is None else initial_state[s].float().clone()
            for t in range(bounds[s], bounds[s + 1]):
                if (t - bounds[s]) % C == 0:
                    hs.append(S.clone())
                S = S * gf[t].exp()[:, None, None]
                u = bf[t][:, None] * (vf[t] - torch.einsum("hkv,hk->hv", S, kf[t]))
                S = S + kf[t][:, :, None] * u[:, None, :]
                o[t] = torch.einsum("hkv,hk->hv", S, qf[t] * scale)
            final[s] = S
        h = torch.stack(hs).unsqueeze(0).to(k.dtype) if hs else k.new_zeros(1, 0, Hv, K, V)
        return o.unsqueeze(0).to(q.dtype), (final if output_final_state else None), h

    return chunk_gated_delta_rule_npu
