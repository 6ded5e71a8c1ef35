"""The probe of the chunk-state stride of sgl-kernel-npu's Triton prefill entry
(``gdn-triton-chunk-stride``).

``chunk_gated_delta_rule_npu`` returns the state at the start of every chunk, ``h``: every 64
tokens on its Triton path, every 128 when it runs the mega kernel inside (``GDN_USE_MEGA_GDN=1``
from sgl-project/sgl-kernel-npu ac3a564f, by default in the releases before it; ``fla/chunk.py`` at
f425bdf1).  Radix-cache tracking reads ``h`` as 64-token states, so a 128-token ``h`` would give
wrong snapshots silently.  The probe runs the entry once on one private sequence of 130 tokens
(3 chunks of 64, 2 of 128) with the serving head layout, and compares ``h`` with the plugin's
exact chunk states (:func:`.torch_impl.chunk_gdn_torch`) at each stride.  The signature includes
the environment the entry reads at every call, so a changed setting is probed again.
"""

from __future__ import annotations

import os

import torch

from sglang_ascend_hybrid.ops import probes
from sglang_ascend_hybrid.ops.signature import dtype_name

STRIDE_64 = "64-token"
STRIDE_128 = "128-token"
TOKENS = 130
ENV_READ = ("GDN_USE_MEGA_GDN", "GDN_ATTN_BACKEND_TRITON")  # what the entry reads at call time
_TOL = 5e-2  # fp16 states in the mega mode

PROBE = probes.register(probes.Probe(
    "gdn-triton-chunk-stride", "the token stride of the per-chunk states sgl-kernel-npu's Triton prefill entry returns",
    {STRIDE_64: "per-chunk states every 64 tokens, as radix-cache tracking reads them: usable with chunk states",
     STRIDE_128: "per-chunk states every 128 tokens (its mega kernel inside): not used where 64-token chunk states "
                 "are needed",
     probes.NEITHER: "its per-chunk states match neither stride (WARNING with the errors): not used with chunk states",
     probes.REFUSED: "it raised on the probe's inputs: not used with chunk states"}))


def signature(value_heads: int, key_heads: int, head_dim_k: int, head_dim_v: int, dtype: torch.dtype,
              environ=None) -> str:
    env = os.environ if environ is None else environ
    settings = ",".join(f"{name}={env.get(name, '')}" for name in ENV_READ)
    return (f"(Hv, Hk)=({value_heads}, {key_heads}) K={head_dim_k} V={head_dim_v} "
            f"{dtype_name(dtype)} {settings}")


def measure(value_heads: int, key_heads: int, head_dim_k: int, head_dim_v: int, dtype: torch.dtype, device,
            environ=None) -> probes.Verdict:
    from sglang_ascend_hybrid.ops.gdn.prefill.entries import call_triton_entry
    from sglang_ascend_hybrid.ops.gdn.torch_impl import chunk_gdn_torch, l2norm

    sig = signature(value_heads, key_heads, head_dim_k, head_dim_v, dtype, environ)
    gen = torch.Generator().manual_seed(20261202)
    T, dev = TOKENS, torch.device(device)
    r = lambda *s: torch.randn(*s, generator=gen)  # noqa: E731
    q = l2norm(r(1, T, key_heads, head_dim_k)).to(dev, dtype)
    k = l2norm(r(1, T, key_heads, head_dim_k)).to(dev, dtype)
    v = (0.5 * r(1, T, value_heads, head_dim_v)).to(dev, dtype)
    g = (-0.1 * r(1, T, value_heads).abs()).to(dev)
    beta = torch.sigmoid(r(1, T, value_heads)).to(dev, dtype)
    cu = torch.tensor([0, T], device=dev)
    _, _, h = call_triton_entry(q, k, v, g, beta, scale=head_dim_k ** -0.5, initial_state=None, cu_seqlens=cu)
    got = h.detach().float().cpu().reshape(-1, value_heads, head_dim_k, head_dim_v).transpose(-1, -2)
    _, _, ref = chunk_gdn_torch(q.cpu(), k.cpu(), v.cpu(), g.cpu(), beta.cpu(), cu_seqlens=cu.cpu(),
                                scale=head_dim_k ** -0.5, chunk_states=True)
    refs = {STRIDE_64: ref, STRIDE_128: ref[::2]}
    errors = {}
    for name, want in refs.items():
        if got.shape != want.shape:
            errors[name] = float("inf")
            continue
        scale = float(want.abs().max()) or 1.0
        errors[name] = float((got - want).abs().max()) / scale
    detail = (f"{got.shape[0]} chunk states for {T} tokens; relative error 64-token {errors[STRIDE_64]:.3g}, "
              f"128-token {errors[STRIDE_128]:.3g}, tolerance {_TOL:g}")
    for name in (STRIDE_64, STRIDE_128):
        if errors[name] <= _TOL:
            return probes.Verdict(PROBE.name, sig, name, name == STRIDE_64, detail)
    return probes.Verdict(PROBE.name, sig, probes.NEITHER, False, detail)


def stride_verdict(value_heads: int, key_heads: int, head_dim_k: int, head_dim_v: int, dtype: torch.dtype, device,
                   *, before_serving: bool = False):
    """The recorded verdict for this signature, probing once if needed (None inside a capture)."""
    sig = signature(value_heads, key_heads, head_dim_k, head_dim_v, dtype)
    return probes.verdict(PROBE.name, sig,
                          lambda: measure(value_heads, key_heads, head_dim_k, head_dim_v, dtype, device),
                          before_serving=before_serving)
