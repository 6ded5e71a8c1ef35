"""The obviously-right Gated DeltaNet: the token recurrence, one token at a time (like FLA's ``naive.py``).

Conventions (packed varlen, SGLang / Ascend layouts):

* ``q``, ``k``: ``[1, T, Hk, K]``; ``v``: ``[1, T, Hv, V]``; ``g`` (log-space decay)
  and ``beta``: ``[1, T, Hv]``; ``cu_seqlens``: ``[N + 1]``.
* Value head ``h`` reads key head ``h // (Hv // Hk)``.
* States are value-first, ``[N, Hv, V, K]`` (the SGLang pool layout).
* Per value head, with state ``S`` of shape ``[K, V]`` (key-first, as in the maths)::

      S <- exp(g_t) S;  u_t = beta_t (v_t - S^T k_t);  S <- S + k_t u_t^T;  o_t = S^T (scale q_t)

Everything is computed in fp32; outputs come back in ``q.dtype``, states in fp32.

:func:`naive_recurrent_gated_delta_rule` is the token-by-token definition (slow, obviously right);
:func:`naive_recurrent_step` the same maths for one token of every sequence at once.  Tests and the
emulators compare with them; the tuned chunked path is :mod:`.torch_impl`.
"""

from __future__ import annotations

import torch


def _seq_bounds(cu_seqlens: torch.Tensor) -> list[int]:
    return [int(x) for x in cu_seqlens.tolist()]


def _expand_keys(x: torch.Tensor, value_heads: int) -> torch.Tensor:
    """[..., Hk, D] -> [..., Hv, D]: value head h reads key head h // (Hv // Hk)."""
    ratio = value_heads // x.shape[-2]
    return x if ratio == 1 else x.repeat_interleave(ratio, dim=-2)


# --------------------------------------------------------------------------
# Token-by-token definition
# --------------------------------------------------------------------------

def naive_recurrent_gated_delta_rule(q, k, v, g, beta, *, cu_seqlens, initial_state=None, scale=None):
    """The recurrence token by token (value-first states).  Returns (o in q.dtype, final fp32)."""
    T, Hv, V, K = q.shape[1], v.shape[2], v.shape[3], q.shape[3]
    scale = K ** -0.5 if scale is None else scale
    bounds = _seq_bounds(cu_seqlens)
    n = len(bounds) - 1
    qf = _expand_keys(q[0].float(), Hv)
    kf = _expand_keys(k[0].float(), Hv)
    vf, gf, bf = v[0].float(), g[0].float(), beta[0].float()
    out = torch.zeros(T, Hv, V, dtype=torch.float32, device=q.device)
    final = torch.zeros(n, Hv, V, K, dtype=torch.float32, device=q.device)
    for s in range(n):
        S = (torch.zeros(Hv, V, K, device=q.device) if initial_state is None
             else initial_state[s].float().clone())
        for t in range(bounds[s], bounds[s + 1]):
            S = S * gf[t].exp()[:, None, None]
            u = bf[t][:, None] * (vf[t] - torch.einsum("hvk,hk->hv", S, kf[t]))
            S = S + u[:, :, None] * kf[t][:, None, :]
            out[t] = torch.einsum("hvk,hk->hv", S, qf[t] * scale)
        final[s] = S
    return out.unsqueeze(0).to(q.dtype), final


def naive_recurrent_step(q, k, v, g, beta, state, *, scale=None):
    """One token per sequence, all sequences at once.

    q, k ``[B, Hk, K]``; v ``[B, Hv, V]``; g, beta ``[B, Hv]``; state ``[B, Hv, V, K]``.
    Returns (o ``[B, Hv, V]`` fp32, new state ``[B, Hv, V, K]`` fp32); ``state`` is not modified.
    """
    Hv = v.shape[1]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    qf, kf = _expand_keys(q.float(), Hv), _expand_keys(k.float(), Hv)
    S = state.float() * g.float().exp()[:, :, None, None]
    u = beta.float()[:, :, None] * (v.float() - (S @ kf.unsqueeze(-1)).squeeze(-1))
    S = S + u.unsqueeze(-1) * kf.unsqueeze(-2)
    o = (S @ (qf * scale).unsqueeze(-1)).squeeze(-1)
    return o, S
