"""CPU emulators of the sgl-kernel-npu Triton GDN decode kernels (contract:
:mod:`sglang_ascend_hybrid.ops.gdn.decode.contract`, read from sgl-project/sgl-kernel-npu
``python/sgl_kernel_npu/sgl_kernel_npu/fla/fused_sigmoid_gating_recurrent.py`` at 001e1888 and
``.../fla/fused_sigmoid_gating_recurrent_decode_optimized.py`` at 5300df95).

``layout`` is the variant parameter the builds may differ in: ``"key_first"`` (default: the pool
addressed ``h0 + idx*HV*K*V + i_hv*K*V + o_k*V + o_v``, as both readable sources do) or
``"value_first"`` (a build that addresses SGLang's ``[slots, HV, V, K]`` pool as laid out).

Rules, each from the sources above:
- gating in fp32 (``softplus`` with ``softplus_beta`` / ``softplus_threshold``, ``sigmoid(b)``); q, k
  l2-normalised as ``x / (sqrt(sum x^2) + 1e-6)`` when ``use_qk_l2norm_in_kernel``; ``q *= scale``
  (``assert scale > 0``, the wrappers' text);
- ``idx < 0``: zero state, output written, no store; ``idx >= slots``: out-of-bounds access
  (contract violation); a sequence of length 0 writes nothing (its output rows stay NaN here:
  ``new_empty``);
- a non-contiguous pool is copied by the wrapper, so its state writes would be lost: violation;
- ``generic``: value heads in pairs (``BHV = 2``): with an odd HV the last head is never computed
  (its output NaN, its state untouched); several tokens per sequence advance one state in order.
  ``optimized``: token i of a sequence reads and writes ``p_h0 + i*HV*K*V``, another slot's memory
  for i > 0: violation for sequences longer than one token;
- output ``[1, B, HV, V]`` (generic) or ``[N, HV, V]`` (optimized) in q's dtype; the state is
  computed in fp32 and stored in the pool's dtype;
- both address the output row of a token by its position in q, not by its sequence (generic
  ``p_o = o + ((i_k * all + bos) * HV + i_hv) * V``, 001e1888; optimized
  ``p_o = o + (bos * HV + i_hv) * V + o_v`` ~123 and ``+ i * HV * V`` ~171, 5300df95).  The optimized
  wrapper allocates one row per *sequence* (``o = q.new_empty(N, HV, V)`` ~238): with an empty
  sequence before a live one (``cu = [0, 1, 1, 2]``) row 1 holds sequence 2's token and the last
  row stays unwritten (NaN here).  (With at most one token per sequence a token's row is below N.)
  Tokens past q's rows (``cu[-1]`` beyond them) are out-of-bounds reads: violation.
"""

from __future__ import annotations

from typing import Callable

import torch

from sglang_ascend_hybrid.ops.errors import EmulatorContractViolation
from sglang_ascend_hybrid.ops.gdn.decode import contract as dc

LAYOUTS = ("key_first", "value_first")


def _violation(what: str) -> None:
    raise EmulatorContractViolation(f"triton GDN decode: {what} (undefined behaviour on the real kernel, "
                                    "which does not check it)")


def _softplus(x: torch.Tensor, beta: float, threshold: float) -> torch.Tensor:
    bx = beta * x
    return torch.where(bx <= threshold, (1.0 / beta) * torch.log(1.0 + torch.exp(bx)), x)


def make_triton_decode_emulator(entry: str = "optimized", *, layout: str = "key_first") -> Callable:
    """An emulator of the decode entry ``entry`` (``"generic"`` / ``"optimized"``) whose state
    addressing is ``layout`` (:data:`LAYOUTS`)."""
    if entry not in dc.DECODE_ENTRIES:
        raise ValueError(f"entry={entry!r}: expected one of {tuple(dc.DECODE_ENTRIES)}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r}: expected one of {LAYOUTS}")

    def kernel(A_log, a, dt_bias, softplus_beta, softplus_threshold, q, k, v, b, initial_state_source,
               initial_state_indices, scale=None, use_qk_l2norm_in_kernel=False, cu_seqlens=None):
        pool = initial_state_source
        if pool is not None and not pool.is_contiguous():
            _violation("a non-contiguous initial_state_source is copied by the wrapper; the state writes "
                       "would land in the copy")
        B, T, H, K = q.shape
        HV, V = v.shape[2], v.shape[-1]
        if scale is None:
            scale = K ** -0.5
        elif not scale > 0:
            raise AssertionError("scale must be positive")
        N = B if cu_seqlens is None else cu_seqlens.numel() - 1
        bounds = ([n * T for n in range(B + 1)] if cu_seqlens is None else [int(x) for x in cu_seqlens.tolist()])
        qf = q.reshape(-1, H, K).float()
        kf = k.reshape(-1, H, K).float()
        vf = v.reshape(-1, HV, V).float()
        af = a.reshape(-1, HV).float()
        bf = b.reshape(-1, HV).float()
        decay_rate = A_log.float().exp()
        dtb = dt_bias.float()
        tokens = qf.shape[0]
        if bounds[-1] > tokens:
            _violation(f"cu_seqlens ends at {bounds[-1]}, past q's {tokens} tokens (reads out of bounds)")
        out_rows = N if entry == "optimized" else tokens  # o = q.new_empty(N, HV, V) / new_empty(NK, *v.shape)
        out = torch.full((out_rows, HV, V), float("nan"), dtype=torch.float32)
        heads = HV if entry == "optimized" else (HV // dc.GENERIC_HEADS_PER_PROGRAM) * dc.GENERIC_HEADS_PER_PROGRAM
        flat = None if pool is None else pool.view(-1)
        slots = 0 if pool is None else pool.numel() // max(HV * K * V, 1)
        for n in range(N):
            bos, eos = bounds[n], bounds[n + 1]
            if eos - bos > 1 and entry == "optimized":
                _violation(f"sequence {n} has {eos - bos} tokens: the optimized kernel reads token i's state "
                           "at another slot's address (one token per sequence only)")
            idx = int(initial_state_indices[n]) if pool is not None else -1
            if idx >= slots:
                _violation(f"initial_state_indices[{n}]={idx} is out of bounds for {slots} slots")
            for hv in range(heads):
                h = hv // (HV // H)
                base = (idx * HV + hv) * K * V
                state = None
                for t in range(bos, eos):
                    x = af[t, hv] + dtb[hv]
                    g = -decay_rate[hv] * _softplus(x, float(softplus_beta), float(softplus_threshold))
                    beta = 1.0 / (1.0 + torch.exp(-bf[t, hv]))
                    if idx >= 0:
                        raw = flat[base:base + K * V].float()
                        state = raw.view(K, V) if layout == "key_first" else raw.view(V, K).t()
                    else:
                        state = torch.zeros(K, V)
                    qv, kv = qf[t, h], kf[t, h]
                    if use_qk_l2norm_in_kernel:
                        qv = qv / (torch.sqrt((qv * qv).sum()) + dc.L2NORM_EPS)
                        kv = kv / (torch.sqrt((kv * kv).sum()) + dc.L2NORM_EPS)
                    qv = qv * scale
                    state = state * torch.exp(g)
                    vv = (vf[t, hv] - (state * kv[:, None]).sum(0)) * beta
                    state = state + kv[:, None] * vv[None, :]
                    out[t, hv] = (state * qv[:, None]).sum(0)
                    if idx >= 0:
                        stored = state if layout == "key_first" else state.t()
                        flat[base:base + K * V] = stored.reshape(-1).to(pool.dtype)
        o = out.to(q.dtype)
        return o.reshape(1, -1, HV, V) if entry == "generic" else o

    kernel.layout = layout
    kernel.entry = entry
    return kernel


def emulators(entry: str = "optimized", *, layout: str = "key_first") -> dict:
    """``{seam op name: emulator}`` for the decode entry ``entry``."""
    return {dc.DECODE_ENTRIES[entry]: make_triton_decode_emulator(entry, layout=layout)}
