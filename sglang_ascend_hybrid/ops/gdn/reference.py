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
the delta-rule updates are solved at once with the WY representation (the
inverse of one unit lower-triangular matrix per chunk and head, blocked, by
batched matmuls), for groups of chunks of all sequences and heads at once, with
``k k^T`` and ``q k^T`` computed once per key head; only the hand-over of the
state between consecutive chunks is a loop, over chunk positions (not tokens),
with all sequences that still have a chunk at that position advanced together.
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
    gather_index: torch.Tensor  # [F*C] token of each chunk row (padding -> its sequence's last token)
    chunk_tokens: list[tuple[int, int]]  # flat chunk -> its real tokens [start, end)
    valid: torch.Tensor        # [F*C] row holds a real token
    chunk_seq: list[int]       # flat chunk -> sequence id
    chunk_pos: list[int]       # flat chunk -> position inside its sequence
    has_padding: bool          # some chunk rows are padding
    dense: bool                # flat chunk i holds tokens [i*C, (i+1)*C) (one sequence, no padding)
    order_is_identity: bool    # order == range(N)


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
    chunk_tokens = [(bounds[sq] + p * chunk, min(bounds[sq] + (p + 1) * chunk, bounds[sq + 1]))
                    for sq, p in zip(chunk_seq, chunk_pos)]
    if chunk_seq:
        seq_t = torch.tensor(chunk_seq, dtype=torch.long)
        starts = torch.tensor(bounds[:-1], dtype=torch.long)[seq_t] + torch.tensor(chunk_pos) * chunk
        ends = torch.tensor(bounds[1:], dtype=torch.long)[seq_t]
        tok = starts[:, None] + torch.arange(chunk)[None, :]
        valid = tok < ends[:, None]
        src = torch.where(valid, tok, (ends - 1)[:, None].expand_as(tok))
    else:
        src = torch.zeros(0, chunk, dtype=torch.long)
        valid = torch.zeros(0, chunk, dtype=torch.bool)
    has_padding = any(n % chunk for n in lens)
    # one sequence with tokens (it starts at token 0), a whole number of chunks
    dense = len(set(chunk_seq)) <= 1 and not has_padding
    return _ChunkLayout(torch.tensor(order, dtype=torch.long, device=device), active, offsets,
                        src.reshape(-1).to(device), chunk_tokens, valid.reshape(-1).to(device),
                        chunk_seq, chunk_pos, has_padding, dense, order == list(range(len(lens))))


def _to_chunks(x: torch.Tensor, layout: _ChunkLayout, chunk: int, lo: int, hi: int,
               out: torch.Tensor | None = None, zero_padding: bool = True) -> torch.Tensor:
    """Gather flat chunks ``lo:hi`` of ``[T, H, D]`` (or ``[T, H]``) into contiguous chunk
    blocks ``[hi - lo, H, C, D]`` (or ``[hi - lo, H, C]``) in fp32; padding rows are zero
    (with ``zero_padding``; else they repeat a real token: finite, and harmless where
    ``g`` and ``beta`` are zero on the padding).
    Heads are kept as they are (key heads are not expanded to value heads).  ``out``
    (optional, fp32 ``[hi - lo, H, C(, D)]``) receives the result."""
    T, H = x.shape[0], x.shape[1]
    Fb = hi - lo
    tail = tuple(x.shape[2:])
    shape = (Fb, H, chunk) + tail
    if out is None:
        out = torch.empty(shape, dtype=torch.float32, device=x.device)
    if layout.dense:
        # flat chunk i holds tokens [i*C, (i+1)*C): a plain relayout, no index gather
        out.view((Fb, H, chunk) + tail).transpose(1, 2).copy_(
            x[lo * chunk:hi * chunk].reshape((Fb, chunk, H) + tail))
        return out
    head = torch.arange(H, device=x.device)
    tok = layout.gather_index[lo * chunk:hi * chunk].view(Fb, 1, chunk)
    idx = (tok * H + head.view(1, -1, 1)).reshape(-1)
    src = x.reshape((T * H,) + tail)
    if src.dtype == torch.float32:
        torch.index_select(src, 0, idx, out=out.view((-1,) + tail))
    else:
        out.view((-1,) + tail).copy_(src.index_select(0, idx))
    if zero_padding and layout.has_padding:
        pad = ~layout.valid[lo * chunk:hi * chunk].view((Fb, 1, chunk) + (1,) * len(tail))
        out.masked_fill_(pad, 0.0)
    return out


_INV_BASE = 16  # diagonal block size of the blocked unit-lower-triangular inverse
_DECAY_PRODUCT_RANGE = 60.0  # |G| bound inside a chunk for decay as exp(G_r) * exp(-G_j)
_BLOCK_HEAD_CHUNKS = 64  # (chunk, value head) pairs whose intra-chunk factors are batched together


def _unit_lower_inverse(a: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """``(I + a)^-1`` for ``a`` ``[..., C, C]`` strictly lower triangular (diagonal and
    above must be zero), in place of ``torch.linalg.solve_triangular`` against an identity.

    ``out`` (optional, same shape as ``a``) receives the result.

    Blocked: the ``_INV_BASE``-sized diagonal blocks ``I + D`` (``D`` strictly lower, so
    nilpotent) are inverted all at once as ``(I - D)(I + D^2)(I + D^4)...``; then pairs
    of inverted blocks are merged level by level, ``[[X0, 0], [L10, X1]]^-1 = [[X0, 0], [-X1 L10 X0, X1]]``, with batched matmuls.
    """
    C = a.shape[-1]
    b = _INV_BASE
    nb = C // b if C % b == 0 else 0
    if C <= b or nb == 0 or nb & (nb - 1) or a.numel() == 0:
        lower = a.clone()
        lower.diagonal(dim1=-2, dim2=-1).fill_(1.0)
        eye = torch.eye(C, dtype=a.dtype, device=a.device).expand_as(lower)
        res = torch.linalg.solve_triangular(lower, eye, upper=False, unitriangular=True)
        return res if out is None else out.copy_(res)
    lead = a.shape[:-2]
    x = a.reshape(-1, C, C)
    N = x.shape[0]
    out = torch.empty_like(x) if out is None else out.view(N, C, C)
    # diagonal blocks D (nilpotent, D^b = 0): (I + D)^-1 = (I - D)(I + D^2)(I + D^4)...
    d = x.view(N, nb, b, nb, b).diagonal(dim1=1, dim2=3).permute(0, 3, 1, 2).reshape(-1, b, b)
    inv = torch.eye(b, dtype=x.dtype, device=x.device).sub(d)
    power, span = d, 2
    while span < b:
        power = power @ power
        inv = torch.baddbmm(inv, inv, power)
        span *= 2
    out.view(N, nb, b, nb, b).diagonal(dim1=1, dim2=3).copy_(inv.view(N, nb, b, b).permute(0, 2, 3, 1))
    while b < C:
        P = C // (2 * b)
        ov = out.view(N, P, 2, b, P, 2, b).diagonal(dim1=1, dim2=4).permute(0, 5, 1, 2, 3, 4)
        av = x.view(N, P, 2, b, P, 2, b).diagonal(dim1=1, dim2=4).permute(0, 5, 1, 2, 3, 4)
        ov[:, :, 0, :, 1] = 0.0
        ov[:, :, 1, :, 0] = (ov[:, :, 1, :, 1] @ (av[:, :, 1, :, 0] @ ov[:, :, 0, :, 0])).neg_()
        b *= 2
    return out.view(*lead, C, C)


def chunk_gdn_torch(q, k, v, g, beta, *, cu_seqlens, initial_state=None, scale=None,
                    output_final_state=True, chunk_states=False, chunk_size=CHUNK_SIZE):
    """Chunked GDN in pure torch.

    Returns ``(o [1, T, Hv, V] in q.dtype, final [N, Hv, V, K] fp32 or None, h)`` where
    ``h`` is None unless ``chunk_states``: then the state at the start of every chunk of
    ``chunk_size`` tokens, sequence-major, ``[num_chunks, Hv, V, K]`` fp32 (the layout
    of SGLang's Ascend ``chunk_state``).
    """
    T, Hk, Hv, V, K = q.shape[1], q.shape[2], v.shape[2], v.shape[3], q.shape[3]
    r = Hv // Hk
    C = chunk_size
    dev = q.device
    scale = K ** -0.5 if scale is None else scale
    bounds = _seq_bounds(cu_seqlens)
    n = len(bounds) - 1
    layout = _chunk_layout(bounds, C, dev)

    f32 = torch.float32
    F = len(layout.chunk_seq)
    lower_incl = torch.ones(C, C, dtype=torch.bool, device=dev).tril()

    # The state between chunks, value-first [*, Hv, V, K] (the output layout), one row per
    # sequence in layout order, updated in place.
    order_is_identity = layout.order_is_identity
    if initial_state is not None and n:
        S = initial_state.to(f32).index_select(0, layout.order)   # a copy: never the caller's
    else:  # zero start states: written outright by each sequence's first chunk
        S = torch.empty(n, Hv, V, K, dtype=f32, device=dev)
        S[len(layout.active) and layout.active[0]:].zero_()          # sequences without tokens
    o_rows = torch.empty(T, Hv, V, dtype=f32, device=dev)
    h_flat = torch.empty(F, Hv, V, K, dtype=f32, device=dev) if chunk_states else None

    # The flat chunks are processed in groups of _BLOCK_HEAD_CHUNKS (chunk, value head)
    # pairs: the intra-chunk factors of a group are batched, then the group's chunks are
    # handed the state position by position.  Small groups keep the temporaries cache-sized
    # and in one workspace reused by every group (fresh multi-MB tensors page-fault).
    per_group = max(1, _BLOCK_HEAD_CHUNKS // max(Hv, 1))
    max_fb = min(per_group, F)
    workspace: dict[str, torch.Tensor] = {}

    def buf(name, *shape):  # [Fb, ...] view of a reused fp32 buffer
        per = 1
        for d in shape[1:]:
            per *= d
        if name not in workspace:
            workspace[name] = torch.empty(max_fb * per, dtype=f32, device=dev)
        return workspace[name][: shape[0] * per].view(shape)

    offsets = layout.offsets
    pos = 0  # first chunk position that overlaps the current group
    has_reset = bool(torch.isneginf(g).any()) if g.numel() else False  # prefill: host reads are allowed
    for lo in range(0, F, per_group):
        hi = min(F, lo + per_group)
        Fb = hi - lo

        def per_key_head(x):  # [Fb, Hv, ...] -> [Fb, Hk, r, ...]: value head h = key head h // r
            return x.view((Fb, Hk, r) + tuple(x.shape[2:]))

        # Padding rows of q, k, v need not be zero: with beta = 0 there, T's padding rows
        # are unit rows and its padding columns are scaled by beta, so they never reach
        # u0, w or the state, and padded outputs land in the dropped row T.
        qc = _to_chunks(q[0], layout, C, lo, hi, buf("q", Fb, Hk, C, K), False)   # [Fb, Hk, C, K]
        kc = _to_chunks(k[0], layout, C, lo, hi, buf("k", Fb, Hk, C, K), False)   # [Fb, Hk, C, K]
        vc = _to_chunks(v[0], layout, C, lo, hi, buf("v", Fb, Hv, C, V), False)   # [Fb, Hv, C, V]
        gc = _to_chunks(g[0], layout, C, lo, hi, buf("g", Fb, Hv, C))
        resets = None
        if has_reset:  # g = -inf is a full reset: cumulative sums of the finite gates, plus a
            # reset count, so exp(G_r - G_j) is exact (0 across a reset) instead of -inf - -inf
            neg = torch.isneginf(gc)
            resets = neg.to(torch.int32).cumsum(-1)                     # [Fb, Hv, C]
            gc.masked_fill_(neg, 0.0)
        gc.cumsum_(-1)                                                  # G_r
        bc = _to_chunks(beta[0], layout, C, lo, hi, buf("b", Fb, Hv, C))  # [Fb, Hv, C]

        # Intra-chunk factors.  k.k^T and q.k^T are the same for the r value heads of a
        # key head: computed once per key head, broadcast over the group.
        # decay[r, j] = exp(G_r - G_j) for j <= r, else 0.  While exp(-G) stays well inside
        # fp32 range it is the outer product exp(G_r) exp(-G_j) (no C x C exp); else exact.
        gexp = gc.exp()
        decay = buf("decay", Fb, Hv, C, C)
        if Fb and resets is None and float(gc.min()) > -_DECAY_PRODUCT_RANGE:
            torch.mul(gexp.unsqueeze(-1), torch.exp(gc.neg()).unsqueeze(-2), out=decay)
            decay.masked_fill_(~lower_incl, 0.0)
        else:
            torch.sub(gc.unsqueeze(-1), gc.unsqueeze(-2), out=decay)
            decay.masked_fill_(~lower_incl, float("-inf")).exp_()
        if resets is not None:
            decay.masked_fill_(resets.unsqueeze(-1) != resets.unsqueeze(-2), 0.0)
            gexp.masked_fill_(resets > 0, 0.0)                          # exp(G_r) from the chunk start
        kk = torch.matmul(kc, kc.transpose(-1, -2), out=buf("kk", Fb, Hk, C, C)).unsqueeze(2)
        qk = torch.matmul(qc, kc.transpose(-1, -2), out=buf("qk0", Fb, Hk, C, C)).mul_(scale).unsqueeze(2)
        qk = torch.mul(per_key_head(decay), qk, out=per_key_head(buf("qk", Fb, Hv, C, C))) \
            .view(Fb, Hv, C, C)                                         # causal, decayed scores
        # A[r, j] = beta_r exp(G_r - G_j) k_r.k_j for j < r;  T = (I + A)^-1
        a = per_key_head(decay).mul_(kk).view(Fb, Hv, C, C).mul_(bc.unsqueeze(-1))
        a.diagonal(dim1=-2, dim2=-1).zero_()
        t_inv = _unit_lower_inverse(a, out=buf("t", Fb, Hv, C, C))
        # u0 = T diag(beta) v,  w = T diag(beta exp(G)) k: the diagonal factors scale T's
        # columns; w's keys are shared by the r value heads of a key head, so their r
        # matrices T are stacked into one [r*C, C] operand against the key head's k.
        tb = t_inv.mul_(bc.unsqueeze(-2))
        u0 = torch.matmul(tb, vc, out=buf("u", Fb, Hv, C, V))          # [Fb, Hv, C, V]
        w = torch.matmul(tb.mul_(gexp.unsqueeze(-2)).view(Fb, Hk, r * C, C), kc,
                         out=buf("w", Fb, Hk, r * C, K)).view(Fb, Hv, C, K)
        qg = torch.mul(qc.unsqueeze(2), per_key_head(gexp * scale).unsqueeze(-1),
                       out=buf("qg", Fb, Hk, r, C, K)).view(Fb, Hv, C, K)
        last = gc[..., -1:]                                             # total decay of each chunk
        to_end = (last - gc).exp()
        last_exp = last.exp()
        if resets is not None:
            to_end.masked_fill_(resets != resets[..., -1:], 0.0)
            last_exp.masked_fill_(resets[..., -1:] > 0, 0.0)
        k_end = torch.mul(kc.unsqueeze(2), per_key_head(to_end).unsqueeze(-1),
                          out=buf("ke", Fb, Hk, r, C, K)).view(Fb, Hv, C, K)
        last_exp = last_exp.unsqueeze(-1)                               # [Fb, Hv, 1, 1]
        out = vc                                                        # vc is spent: outputs go there

        # Hand-over, position by position over the part of each position inside the group;
        # u0 becomes the corrected values v_new = u0 - w S.
        while pos < len(layout.active) and offsets[pos] < hi:
            a0, a1 = max(lo, offsets[pos]), min(hi, offsets[pos + 1])
            j0, j1 = a0 - offsets[pos], a1 - offsets[pos]               # sequence slots in S
            cl, ch = a0 - lo, a1 - lo                                   # chunks in the group
            S_m = S[j0:j1]
            S_a = S_m.view(-1, V, K)
            o_c = out[cl:ch].view(-1, C, V)
            if pos == 0 and initial_state is None:  # S = 0: v_new = u0, o = qk v_new, S = k_end^T v_new
                if h_flat is not None:
                    h_flat[a0:a1] = 0.0
                u = u0[cl:ch].view(-1, C, V)
                torch.bmm(qk[cl:ch].view(-1, C, C), u, out=o_c)
                torch.bmm(u.transpose(1, 2), k_end[cl:ch].view(-1, C, K), out=S_a)
            else:
                if h_flat is not None:
                    h_flat[a0:a1] = S_m
                u = u0[cl:ch].view(-1, C, V).baddbmm_(w[cl:ch].view(-1, C, K), S_a.transpose(1, 2),
                                                       alpha=-1.0)
                torch.bmm(qg[cl:ch].view(-1, C, K), S_a.transpose(1, 2), out=o_c)
                o_c.baddbmm_(qk[cl:ch].view(-1, C, C), u)
                S_m.mul_(last_exp[cl:ch])
                S_a.baddbmm_(u.transpose(1, 2), k_end[cl:ch].view(-1, C, K))
            if offsets[pos + 1] > hi:
                break                                                   # continues in the next group
            pos += 1

        rows = out.transpose(1, 2)                                      # [Fb, C, Hv, V]
        if layout.dense:
            o_rows.view(F, C, Hv, V)[lo:hi] = rows
        else:  # each chunk's real tokens are one contiguous run
            for i in range(lo, hi):
                t0, t1 = layout.chunk_tokens[i]
                o_rows[t0:t1] = rows[i - lo, : t1 - t0]

    o = o_rows.unsqueeze(0).to(q.dtype)

    final = None
    if output_final_state:
        if order_is_identity:
            final = S
        else:
            final = torch.empty_like(S).index_copy_(0, layout.order, S)

    h = None
    if chunk_states:
        # flat (position-major) -> sequence-major, value-first
        key = [(s, p) for s, p in zip(layout.chunk_seq, layout.chunk_pos)]
        seq_major = sorted(range(len(key)), key=lambda i: key[i])
        h = h_flat if seq_major == list(range(len(key))) else \
            h_flat[torch.tensor(seq_major, dtype=torch.long, device=dev)]
    return o, final, h
