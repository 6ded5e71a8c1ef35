"""One GDN decode step applied to a state pool in place: the torch rung of the decode ladder.

The maths is :func:`sglang_ascend_hybrid.ops.gdn.naive.naive_recurrent_step` (the readable
definition, which the tests compare against).  Per value head, with the value-first state
``S [V, K]``, decay ``a = exp(g)`` and ``q' = scale * q``::

    u  = beta * (v - a * S k)
    S' = a * S + u k^T
    o  = S' q' = a * (S q') + u * (k . q')

so one matmul of the *old* state against the two columns ``[k, q']`` gives everything the
step needs from it (``S k`` and ``S q'``), and the state itself is touched by exactly four
passes: gather, decay, rank-1 update, scatter.

Those passes run block by block over the batch (:func:`block_rows`): on a CPU a block's
states stay in cache between the passes, so main memory sees the minimum, one read of each
pool row and one write of it.  On other devices the whole batch is one block (one launch per
op).  The step is graph-capture safe: a Python loop over a static batch size, no host sync,
no value-dependent shape.  Key heads are never expanded to value heads: the ``r = Hv / Hk``
value heads of a key head are one ``[r * V, K]`` operand.

Padding rows (``live`` False) read slot 0 (their index is clamped); whatever they compute is
discarded by :func:`~sglang_ascend_hybrid.ops.gdn.scatter.scatter_live_rows`, which rewrites row 0
after each block's scatter (one row, not a pass over the block), so no slot changes but those of
live rows.  States are computed in fp32 and stored in the pool's dtype.
"""

from __future__ import annotations

import torch

from sglang_ascend_hybrid.ops.gdn.scatter import scatter_live_rows

CPU_BLOCK_BYTES = 8 << 20   # fp32 state bytes per block on a CPU (L3-resident between passes; 8 MiB measured best)


def block_rows(batch: int, row_bytes: int, device: torch.device, budget: int | None = None) -> int:
    """Requests per block: as many as fit ``budget`` bytes (default ``CPU_BLOCK_BYTES``) on a CPU,
    at least 1; on any other device the whole batch (one launch per op)."""
    if device.type != "cpu":
        return max(batch, 1)
    budget = CPU_BLOCK_BYTES if budget is None else budget
    return max(1, min(batch, budget // max(row_bytes, 1)))


def advance(S: torch.Tensor, S_next: torch.Tensor, kq: torch.Tensor, k: torch.Tensor, kdotq: torch.Tensor,
            a: torch.Tensor, beta: torch.Tensor, v: torch.Tensor, o: torch.Tensor) -> None:
    """One token for ``n`` requests, fp32: ``S_next`` (may be ``S`` itself) receives
    ``a S + u k^T`` and ``o`` receives ``a (S q') + u (k . q')``, ``u = beta (v - a S k)``.

    ``S [n, Hv, V, K]`` value-first; ``kq [n, Hk, 2, K]`` (rows ``k``, ``q'``); ``k [n, Hk, K]``;
    ``kdotq``, ``a``, ``beta [n, Hv, 1]``; ``v``, ``o [n, Hv, V]``.  The decode step and the verify
    rung's per-token step."""
    n, Hv, V, K = S.shape
    Hk = kq.shape[1]
    r = Hv // Hk
    # S k and S q' in one matmul; [k, q'] as a column-major operand (much faster than a
    # row-major [K, 2] one on CPU BLAS)
    P = torch.matmul(S.view(n, Hk, r * V, K), kq.transpose(-1, -2)).view(n, Hv, V, 2)
    u = beta * (v - a * P[..., 0])                                      # [n, Hv, V]
    torch.addcmul(a * P[..., 1], u, kdotq, out=o)
    torch.mul(S, a.unsqueeze(-1), out=S_next)                           # a * S
    S_next.view(n * Hk, r * V, K).baddbmm_(u.view(n * Hk, r * V, 1), k.reshape(n * Hk, 1, K))


def step_on_pool(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                 pool: torch.Tensor, slots: torch.Tensor, live: torch.Tensor, *, scale: float) -> torch.Tensor:
    """Advance ``pool[slots[i]]`` by one token for every live row; return ``o [B, Hv, V]`` fp32.

    q, k ``[B, Hk, K]`` (already l2-normalised where the model asks for it); v ``[B, Hv, V]``;
    g (log-space decay), beta (post-sigmoid) ``[B, Hv]``; ``pool [slots, Hv, V, K]`` value-first
    of any float dtype; ``slots [B]`` int64 in range for every row (padding clamped to 0);
    ``live [B]`` bool.  Output rows of padding are unspecified."""
    B, Hk, K = q.shape
    Hv, V = v.shape[1], v.shape[2]
    r = Hv // Hk
    f32 = torch.float32
    dev = q.device
    o = torch.empty(B, Hv, V, dtype=f32, device=dev)
    if B == 0:
        return o
    kf = k.to(f32)
    qs = q.to(f32) * scale
    kq = torch.stack([kf, qs], dim=-2)                                  # [B, Hk, 2, K]: rows k, q'
    kdotq = (kf * qs).sum(-1).repeat_interleave(r, 1).unsqueeze(-1)     # [B, Hv, 1]: k . q'
    a = g.to(f32).exp().unsqueeze(-1)                                   # [B, Hv, 1]
    bv = beta.to(f32).unsqueeze(-1)                                     # [B, Hv, 1]
    vf = v.to(f32)
    n_max = block_rows(B, Hv * V * K * 4, dev)
    work = torch.empty(n_max, Hv, V, K, dtype=f32, device=dev)
    for b0 in range(0, B, n_max):
        b1 = min(B, b0 + n_max)
        n = b1 - b0
        S = work[:n]
        rows = slots[b0:b1]
        if pool.dtype == f32:
            torch.index_select(pool, 0, rows, out=S)
        else:
            S.copy_(pool.index_select(0, rows))
        advance(S, S, kq[b0:b1], kf[b0:b1], kdotq[b0:b1], a[b0:b1], bv[b0:b1], vf[b0:b1], o[b0:b1])
        scatter_live_rows(pool, rows, live[b0:b1], S)
    return o
