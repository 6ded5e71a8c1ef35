"""The obviously-right fp64 definition of one gated GDN decode step (the oracle of the decode
ladder and of the decode-kernel probe).  Plain loops over requests and value heads."""

from __future__ import annotations

import math

import torch

from sglang_ascend_hybrid.ops.errors import bad_input


def softplus(x: torch.Tensor, beta: float = 1.0, threshold: float = 20.0) -> torch.Tensor:
    """``log(1 + exp(beta x)) / beta`` where ``beta x <= threshold``, else ``x`` (the kernels' form)."""
    bx = beta * x
    return torch.where(bx <= threshold, torch.log1p(torch.exp(bx)) / beta, x)


def gates(A_log, a, dt_bias, b, *, softplus_beta: float = 1.0, threshold: float = 20.0, dtype=torch.float64):
    """``g = -exp(A_log) * softplus(a + dt_bias)`` and ``beta = sigmoid(b)``; a, b ``[B, Hv]``."""
    a, b = a.to(dtype), b.to(dtype)
    g = -A_log.to(dtype).exp() * softplus(a + dt_bias.to(dtype), softplus_beta, threshold)
    return g, torch.sigmoid(b)


def naive_gated_decode(A_log, a, dt_bias, q, k, v, b, states, *, scale=None, l2norm: str = "rsqrt",
                           softplus_beta: float = 1.0, threshold: float = 20.0):
    """One token per request, fp64.

    q, k ``[B, Hk, K]``; v ``[B, Hv, V]``; a, b ``[B, Hv]``; A_log, dt_bias ``[Hv]``; ``states``
    value-first ``[B, Hv, V, K]`` (the request's state before the token).  ``l2norm``: ``"rsqrt"``
    (``x / sqrt(sum x^2 + 1e-6)``, SGLang's and transformers' form), ``"kernel"`` (``x / (sqrt(sum x^2)
    + 1e-6)``, the Triton decode kernels' form) or ``"none"``.  Returns ``(o [B, Hv, V], new states
    [B, Hv, V, K])`` in fp64; the inputs are not modified."""
    f = torch.float64
    B, Hk, K = q.shape
    Hv, V = v.shape[1], v.shape[2]
    scale = K ** -0.5 if scale is None else scale
    g, beta = gates(A_log, a.reshape(B, Hv), dt_bias, b.reshape(B, Hv), softplus_beta=softplus_beta,
                    threshold=threshold)
    o = torch.zeros(B, Hv, V, dtype=f)
    new = states.to(f).clone()
    for i in range(B):
        for h in range(Hv):
            kh = h // (Hv // Hk)
            qv, kv = q[i, kh].to(f), k[i, kh].to(f)
            if l2norm == "rsqrt":
                qv, kv = qv / math.sqrt(float(qv @ qv) + 1e-6), kv / math.sqrt(float(kv @ kv) + 1e-6)
            elif l2norm == "kernel":
                qv, kv = qv / (math.sqrt(float(qv @ qv)) + 1e-6), kv / (math.sqrt(float(kv @ kv)) + 1e-6)
            elif l2norm != "none":
                raise bad_input("l2norm", repr(l2norm), "'rsqrt', 'kernel' or 'none'")
            S = new[i, h] * math.exp(float(g[i, h]))                      # [V, K]
            u = float(beta[i, h]) * (v[i, h].to(f) - S @ kv)
            S = S + torch.outer(u, kv)
            o[i, h] = S @ (qv * scale)
            new[i, h] = S
    return o, new
