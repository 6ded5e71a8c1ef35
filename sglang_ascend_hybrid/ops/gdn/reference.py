"""Pure-torch Gated DeltaNet: the readable token recurrence and the chunked path.

Conventions (packed varlen, SGLang / Ascend layouts):

* ``q``, ``k``: ``[1, T, Hk, K]``; ``v``: ``[1, T, Hv, V]``; ``g`` (log-space decay)
  and ``beta``: ``[1, T, Hv]``; ``cu_seqlens``: ``[N + 1]``.
* Value head ``h`` reads key head ``h // (Hv // Hk)``.
* States are value-first, ``[N, Hv, V, K]`` (the SGLang pool layout).
* Per value head, with state ``S`` of shape ``[K, V]`` (key-first, as in the maths)::

      S <- exp(g_t) S;  u_t = beta_t (v_t - S^T k_t);  S <- S + k_t u_t^T;  o_t = S^T (scale q_t)

Everything is computed in fp32; outputs come back in ``q.dtype``, states in fp32.

:func:`recurrent_reference` is the token-by-token definition (slow, obviously
right).  :func:`chunk_gdn_torch` is the fast CPU path: per chunk of ``C`` tokens
the delta-rule updates are solved at once with the WY representation (one unit
lower-triangular solve per chunk and head), every chunk of every sequence and
every head in one batch; only the hand-over of the state between consecutive
chunks is a loop, over chunk positions (not tokens), with all sequences that
still have a chunk at that position advanced together.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

CHUNK_SIZE = 64  # chunk length of the per-chunk states ``h`` SGLang's Ascend path keeps


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``x / sqrt(sum(x^2) + eps)`` over the last dim, in fp32, returned in x.dtype."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).sum(-1, keepdim=True) + eps)).to(x.dtype)


def _seq_bounds(cu_seqlens: torch.Tensor) -> list[int]:
    return [int(x) for x in cu_seqlens.tolist()]


def _expand_keys(x: torch.Tensor, value_heads: int) -> torch.Tensor:
    """[..., Hk, D] -> [..., Hv, D]: value head h reads key head h // (Hv // Hk)."""
    ratio = value_heads // x.shape[-2]
    return x if ratio == 1 else x.repeat_interleave(ratio, dim=-2)


# --------------------------------------------------------------------------
# Token-by-token definition
# --------------------------------------------------------------------------

def recurrent_reference(q, k, v, g, beta, *, cu_seqlens, initial_state=None, scale=None):
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


def recurrent_step(q, k, v, g, beta, state, *, scale=None):
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


# --------------------------------------------------------------------------
# Chunked path
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class _ChunkLayout:
    """Where every chunk of every sequence sits in the flat chunk batch.

    Chunks are ordered position-major: all first chunks, then all second chunks, ...
    and within a position by sequence in decreasing chunk count, so the chunks
    advanced at step ``c`` are the contiguous slice ``offsets[c]:offsets[c+1]``
    and belong to the first ``active[c]`` sequences of ``order``.
    """

    order: torch.Tensor        # [N] sequence ids sorted by chunk count (desc)
    active: list[int]          # sequences still running at each chunk position
    offsets: list[int]         # start of each position's slice in the flat batch
    token_index: torch.Tensor  # [F*C] token of each chunk row (T = padding row)
    valid: torch.Tensor        # [F*C] row holds a real token
    chunk_seq: list[int]       # flat chunk -> sequence id
    chunk_pos: list[int]       # flat chunk -> position inside its sequence


def _chunk_layout(bounds: list[int], chunk: int, device) -> _ChunkLayout:
    lens = [b - a for a, b in zip(bounds, bounds[1:])]
    counts = [(n + chunk - 1) // chunk for n in lens]
    order = sorted(range(len(lens)), key=lambda s: -counts[s])
    steps = max(counts, default=0)
    active = [sum(1 for s in order if counts[s] > c) for c in range(steps)]
    offsets = [0]
    chunk_seq, chunk_pos = [], []
    for c in range(steps):
        offsets.append(offsets[-1] + active[c])
        chunk_seq.extend(order[: active[c]])
        chunk_pos.extend([c] * active[c])
    T = bounds[-1] if bounds else 0
    if chunk_seq:
        seq_t = torch.tensor(chunk_seq, dtype=torch.long)
        starts = torch.tensor(bounds[:-1], dtype=torch.long)[seq_t] + torch.tensor(chunk_pos) * chunk
        ends = torch.tensor(bounds[1:], dtype=torch.long)[seq_t]
        tok = starts[:, None] + torch.arange(chunk)[None, :]
        valid = tok < ends[:, None]
        tok = torch.where(valid, tok, torch.full_like(tok, T))
    else:
        tok = torch.zeros(0, chunk, dtype=torch.long)
        valid = torch.zeros(0, chunk, dtype=torch.bool)
    return _ChunkLayout(torch.tensor(order, dtype=torch.long, device=device), active, offsets,
                        tok.reshape(-1).to(device), valid.reshape(-1).to(device), chunk_seq, chunk_pos)


def _to_chunks(x: torch.Tensor, layout: _ChunkLayout, chunk: int, value_heads: int) -> torch.Tensor:
    """Gather ``[T, H, D]`` (or ``[T, H]``) into contiguous chunk blocks ``[F, Hv, C, D]``
    (or ``[F, Hv, C]``) in fp32, in one gather; key heads are expanded to value heads
    on the way (value head h reads key head h // (Hv // H)); padding rows are zero."""
    T, H = x.shape[0], x.shape[1]
    rows = layout.token_index.numel()
    F = rows // chunk
    tail = tuple(x.shape[2:])
    if F == 0 or T == 0:
        return torch.zeros((F, value_heads, chunk) + tail, dtype=torch.float32, device=x.device)
    head = torch.arange(value_heads, device=x.device) // (value_heads // H)
    tok = layout.token_index.clamp(max=T - 1).view(F, 1, chunk)
    idx = (tok * H + head.view(1, -1, 1)).reshape(-1)
    out = x.reshape((T * H,) + tail).index_select(0, idx).to(torch.float32)
    out = out.view((F, value_heads, chunk) + tail)
    pad = ~layout.valid.view(F, chunk)
    if bool(pad.any()):
        out.transpose(1, 2)[pad] = 0
    return out


def chunk_gdn_torch(q, k, v, g, beta, *, cu_seqlens, initial_state=None, scale=None,
                    output_final_state=True, chunk_states=False, chunk_size=CHUNK_SIZE):
    """Chunked GDN in pure torch.

    Returns ``(o [1, T, Hv, V] in q.dtype, final [N, Hv, V, K] fp32 or None, h)`` where
    ``h`` is None unless ``chunk_states``: then the state at the start of every chunk of
    ``chunk_size`` tokens, sequence-major, ``[num_chunks, Hv, V, K]`` fp32 (the layout
    of SGLang's Ascend ``chunk_state``).
    """
    T, Hv, V, K = q.shape[1], v.shape[2], v.shape[3], q.shape[3]
    C = chunk_size
    dev = q.device
    scale = K ** -0.5 if scale is None else scale
    bounds = _seq_bounds(cu_seqlens)
    n = len(bounds) - 1
    layout = _chunk_layout(bounds, C, dev)

    f32 = torch.float32
    qc = _to_chunks(q[0], layout, C, Hv)            # [F, Hv, C, K]
    kc = _to_chunks(k[0], layout, C, Hv)            # [F, Hv, C, K]
    vc = _to_chunks(v[0], layout, C, Hv)            # [F, Hv, C, V]
    gc = _to_chunks(g[0], layout, C, Hv).cumsum(-1)  # [F, Hv, C] cumulative decay G_r
    bc = _to_chunks(beta[0], layout, C, Hv)          # [F, Hv, C]
    F = qc.shape[0]

    # Intra-chunk factors, every chunk and head at once.
    lower_incl = torch.ones(C, C, dtype=torch.bool, device=dev).tril()
    decay = (gc.unsqueeze(-1) - gc.unsqueeze(-2)).masked_fill_(~lower_incl, float("-inf")).exp_()
    kk = kc @ kc.transpose(-1, -2)
    qk = (qc @ kc.transpose(-1, -2)).mul_(decay).mul_(scale)      # causal, decayed scores
    # A[r, j] = beta_r exp(G_r - G_j) k_r.k_j for j < r;  T = (I + A)^-1
    a = kk.mul_(decay).mul_(bc.unsqueeze(-1)).tril_(-1)
    a.diagonal(dim1=-2, dim2=-1).fill_(1.0)
    eye = torch.eye(C, dtype=f32, device=dev).expand_as(a)
    t_inv = torch.linalg.solve_triangular(a, eye, upper=False, unitriangular=True)
    del a, kk, decay
    gexp = gc.exp()
    u0 = t_inv @ (vc * bc.unsqueeze(-1))                             # [F, Hv, C, V]
    w = t_inv @ (kc * (bc * gexp).unsqueeze(-1))                     # [F, Hv, C, K]
    del t_inv, vc
    qg = qc.mul_((gexp * scale).unsqueeze(-1))                       # query through the start state
    last = gc[..., -1:]                                              # total decay of each chunk
    k_end_t = (kc * (last - gc).exp().unsqueeze(-1)).transpose(-1, -2).contiguous()  # [F, Hv, K, C]
    last_exp = last.exp().unsqueeze(-1)                              # [F, Hv, 1, 1]
    del kc

    # State hand-over between chunks: key-first [*, Hv, K, V] inside.
    S = torch.zeros(n, Hv, K, V, dtype=f32, device=dev)
    if initial_state is not None and n:
        S = initial_state.to(f32).transpose(-1, -2).index_select(0, layout.order)
    elif n:
        S = S.index_select(0, layout.order)
    out = torch.empty(F, Hv, C, V, dtype=f32, device=dev)
    h_flat = torch.empty(F, Hv, K, V, dtype=f32, device=dev) if chunk_states else None
    for c, m in enumerate(layout.active):
        sl = slice(layout.offsets[c], layout.offsets[c + 1])
        S_a = S[:m]
        if h_flat is not None:
            h_flat[sl] = S_a
        u = u0[sl] - w[sl] @ S_a                                     # [m, Hv, C, V]
        o_c = out[sl]
        torch.matmul(qg[sl], S_a, out=o_c)
        o_c.view(-1, C, V).baddbmm_(qk[sl].reshape(-1, C, C), u.view(-1, C, V))
        S_new = torch.baddbmm((S_a * last_exp[sl]).view(-1, K, V),
                              k_end_t[sl].reshape(-1, K, C), u.view(-1, C, V))
        S[:m] = S_new.view(m, Hv, K, V)

    o = torch.zeros(T, Hv, V, dtype=f32, device=dev)
    rows = out.transpose(1, 2).reshape(-1, Hv, V)
    o.index_copy_(0, layout.token_index[layout.valid], rows[layout.valid])
    o = o.unsqueeze(0).to(q.dtype)

    final = None
    if output_final_state:
        final = torch.empty_like(S)
        final[layout.order] = S
        final = final.transpose(-1, -2).contiguous()

    h = None
    if chunk_states:
        # flat (position-major) -> sequence-major, value-first
        key = [(s, p) for s, p in zip(layout.chunk_seq, layout.chunk_pos)]
        seq_major = sorted(range(len(key)), key=lambda i: key[i])
        h = h_flat[torch.tensor(seq_major, dtype=torch.long, device=dev)].transpose(-1, -2).contiguous() \
            if key else torch.zeros(0, Hv, V, K, dtype=f32, device=dev)
    return o, final, h
