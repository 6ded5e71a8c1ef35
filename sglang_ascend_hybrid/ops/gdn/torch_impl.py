"""The tuned pure-torch Gated DeltaNet prefill (the torch rung, the CPU path) and ``l2norm``.

Conventions are those of :mod:`.reference` (value-first ``[N, Hv, V, K]`` states, fp32 maths).

:func:`chunk_gdn_torch` is the fast CPU path: per chunk of ``C`` tokens
the delta-rule updates are solved at once with the WY representation (the
inverse of one unit lower-triangular matrix per chunk and head, blocked, by
batched matmuls), for groups of chunks of all sequences and heads at once, with
``k k^T`` and ``q k^T`` computed once per key head; only the hand-over of the
state between consecutive chunks is a loop, over chunk positions (not tokens),
with all sequences that still have a chunk at that position advanced together by
four batched matmul-class ops.  The op count matters (on an NPU every op is a
launch): about 1,300 ATen ops at T = 4096, Hv = 16 off CPU; on CPU, shorter compute chunks
(fewer FLOPs) in about 3,900 (tests/ops/gdn/test_gdn_op_count.py; see ``_compute_chunk``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sglang_ascend_hybrid.ops import cpu_workspace

CHUNK_SIZE = 64  # chunk length of the per-chunk states ``h`` SGLang's Ascend path keeps


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``x / sqrt(sum(x^2) + eps)`` over the last dim, in fp32, returned in x.dtype."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).sum(-1, keepdim=True) + eps)).to(x.dtype)


def _seq_bounds(cu_seqlens: torch.Tensor) -> list[int]:
    return [int(x) for x in cu_seqlens.tolist()]


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
    out_row: torch.Tensor      # [F*C] token of each chunk row (padding -> T, a dropped sink row)
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
    if chunk_seq:
        seq_t = torch.tensor(chunk_seq, dtype=torch.long)
        starts = torch.tensor(bounds[:-1], dtype=torch.long)[seq_t] + torch.tensor(chunk_pos) * chunk
        ends = torch.tensor(bounds[1:], dtype=torch.long)[seq_t]
        tok = starts[:, None] + torch.arange(chunk)[None, :]
        valid = tok < ends[:, None]
        src = torch.where(valid, tok, (ends - 1)[:, None].expand_as(tok))
    else:
        src = tok = torch.zeros(0, chunk, dtype=torch.long)
        valid = torch.zeros(0, chunk, dtype=torch.bool)
    out_row = torch.where(valid, tok, torch.full_like(tok, bounds[-1]))
    has_padding = any(n % chunk for n in lens)
    # one sequence with tokens (it starts at token 0), a whole number of chunks
    dense = len(set(chunk_seq)) <= 1 and not has_padding
    return _ChunkLayout(torch.tensor(order, dtype=torch.long, device=device), active, offsets,
                        src.reshape(-1).to(device), out_row.reshape(-1).to(device),
                        valid.reshape(-1).to(device), chunk_seq, chunk_pos, has_padding, dense,
                        order == list(range(len(lens))))


class _Gather:
    """Copies flat chunks ``lo:hi`` of a token-major ``[T, H(, D)]`` input into chunk blocks
    ``[hi - lo, H, C(, D)]`` in fp32, with one flat row index per head count made once per
    call (so a group pays one ``index_select``).  Padding rows repeat a real token (finite,
    and harmless where ``g`` and ``beta`` are zero there) unless ``zero_padding``."""

    def __init__(self, layout: _ChunkLayout, chunk: int):
        self.layout, self.chunk = layout, chunk
        self._index: dict[int, torch.Tensor] = {}

    def index(self, heads: int) -> torch.Tensor:
        if heads not in self._index:  # row (f, h, c) reads token gather_index[f*C + c], head h
            tok = self.layout.gather_index.view(-1, 1, self.chunk)
            head = torch.arange(heads, device=tok.device).view(1, -1, 1)
            self._index[heads] = (tok * heads + head).reshape(-1)
        return self._index[heads]

    def __call__(self, x: torch.Tensor, lo: int, hi: int, out: torch.Tensor | None = None,
                 zero_padding: bool = False) -> torch.Tensor:
        C, (T, H), tail = self.chunk, x.shape[:2], tuple(x.shape[2:])
        Fb = hi - lo
        if out is None:
            out = torch.empty((Fb, H, C) + tail, dtype=torch.float32, device=x.device)
        if self.layout.dense:  # flat chunk i holds tokens [i*C, (i+1)*C): a plain relayout
            out.transpose(1, 2).copy_(x[lo * C:hi * C].view((Fb, C, H) + tail))
            return out
        idx = self.index(H)[lo * C * H:hi * C * H]
        src = x.reshape((T * H,) + tail)
        if src.dtype == torch.float32:
            torch.index_select(src, 0, idx, out=out.view((-1,) + tail))
        else:
            out.view((-1,) + tail).copy_(src.index_select(0, idx))
        if zero_padding and self.layout.has_padding:
            pad = ~self.layout.valid[lo * C:hi * C].view((Fb, 1, C) + (1,) * len(tail))
            out.masked_fill_(pad, 0.0)
        return out


_INV_BASE = 16  # diagonal block size of the blocked unit-lower-triangular inverse
_DECAY_PRODUCT_RANGE = 60.0  # |G| bound inside a chunk for decay as exp(G_r) * exp(-G_j)
# (chunk, value head) pairs whose intra-chunk factors are batched together (a group):
# 128 is 8 chunks at Hv = 16.  Larger groups mean fewer ops per call (the group's fixed
# cost, about 125 ATen ops, is paid once per group: 1,320 ops at T = 4096, Hv = 16; 845
# with 256 pairs); the group's temporaries (about 4.5 MB per chunk at Hv = 16,
# K = V = 128) live in workspaces reused by every group.  On CPU, 48 to 256 pairs run
# within about 5% of each other at T = 4096 and on a varlen batch (smaller groups slightly
# faster, at 2-3x the ops); 128 keeps the workspace CPU calls keep (below) at about 35 MB.
_BLOCK_HEAD_CHUNKS = 128

# The chunk length the maths runs at, which need not be the ``chunk_size`` of the states it
# reports (those are recorded every ``chunk_size // C`` compute chunks).  Per token and head
# the hand-over costs about 6 K V FLOPs whatever C, the intra-chunk factors about 10 C K: a
# shorter chunk does fewer FLOPs (T = 4096, K = V = 128: 9.1 GFLOP at C = 32 against 12.1 at
# 64) in twice the ops.  On CPU, where an op costs microseconds, C = 32 with groups of 64
# (chunk, head) pairs (about 4 MB of group temporaries, cache-resident) measured fastest at 1
# and 2 threads, on one sequence and on a varlen batch (145 / 75 ms against 180 / 94 ms for
# C = 64 with 128 pairs at T = 4096, 1 / 2 threads; benchmarks/bench_gdn.py): about 3,900 ATen
# ops per call.  On other devices every op is a launch: the chunk is ``chunk_size`` and
# groups are _BLOCK_HEAD_CHUNKS pairs (about 1,300 ops).
_CPU_CHUNK = 32
_CPU_BLOCK_HEAD_CHUNKS = 64


def _compute_chunk(chunk_size: int, device: torch.device) -> tuple[int, int]:
    """(chunk length the maths runs at, (chunk, head) pairs per group) for ``device``."""
    if torch.device(device).type == "cpu" and chunk_size % _CPU_CHUNK == 0:
        return _CPU_CHUNK, _CPU_BLOCK_HEAD_CHUNKS
    return chunk_size, _BLOCK_HEAD_CHUNKS


# On CPU the group workspaces are also kept from call to call (per thread, ``ops.cpu_workspace``):
# a fresh buffer of several MB is fresh pages, and first-touch page faults cost about as much as
# the matmuls that fill them (some 30 MB per call at Hv = 16, K = V = 128).  Their size is bounded
# by the (chunk, head) pairs of a group, whatever T; nothing returned aliases them.  Other devices
# have caching allocators: a dict per call.
_STATE_WORKSPACE_MAX = 1 << 23  # fp32 elements (32 MB): running states up to this size are workspace too


def _unit_lower_inverse(a: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """``(I + a)^-1`` for ``a`` ``[..., C, C]`` strictly lower triangular (diagonal and
    above must be zero), in place of ``torch.linalg.solve_triangular`` against an identity.

    ``out`` (optional, same shape as ``a``) receives the result.

    Blocked, with ``_INV_BASE``-sized blocks: the diagonal blocks ``I + D`` (``D`` strictly
    lower, so nilpotent) are inverted all at once as ``(I - D)(I + D^2)(I + D^4)...``; then
    block row by block row (forward substitution on blocks: block row ``i`` of
    ``(I + a) X = I`` below the diagonal), ``X[i, :i] = -X[i, i] (a[i, :i] X[:i, :i])``:
    two batched matmuls per block row, whatever the batch.
    """
    C = a.shape[-1]
    b = _INV_BASE
    nb = C // b if C % b == 0 else 0
    if C < b or nb == 0 or a.numel() == 0:
        lower = a.clone()
        lower.diagonal(dim1=-2, dim2=-1).fill_(1.0)
        eye = torch.eye(C, dtype=a.dtype, device=a.device).expand_as(lower)
        res = torch.linalg.solve_triangular(lower, eye, upper=False, unitriangular=True)
        return res if out is None else out.copy_(res)
    lead = a.shape[:-2]
    x = a.reshape(-1, C, C)
    N = x.shape[0]
    out = torch.empty_like(x) if out is None else out.view(N, C, C)
    out.zero_()                                                     # the blocks above the diagonal
    # diagonal blocks D (nilpotent, D^b = 0): (I + D)^-1 = (I - D)(I + D^2)(I + D^4)...
    d = x.view(N, nb, b, nb, b).diagonal(dim1=1, dim2=3).permute(0, 3, 1, 2).reshape(-1, b, b)
    inv = torch.eye(b, dtype=x.dtype, device=x.device).sub(d)
    power, span = d, 2
    while span < b:
        power = torch.bmm(power, power)
        inv = torch.baddbmm(inv, inv, power)
        span *= 2
    out.view(N, nb, b, nb, b).diagonal(dim1=1, dim2=3).copy_(inv.view(N, nb, b, b).permute(0, 2, 3, 1))
    # block rows below: X[i, :i] = -X[i, i] (a[i, :i] X[:i, :i])  (X[:i, :i] is already final)
    a_rows, x_rows = x.split(b, dim=1), out.split(b, dim=1)         # [N, b, C] block rows
    for i in range(1, nb):
        r0 = i * b
        left = torch.bmm(a_rows[i][..., :r0], out[:, :r0, :r0])       # a[i, :i] X[:i, :i]
        # into a contiguous temporary, then copied: a strided in-place target is slower
        x_rows[i][..., :r0] = torch.bmm(x_rows[i][..., r0:r0 + b], left).neg_()
    return out.view(*lead, C, C)


def _reported_states(bounds, layout, chunk_size: int, record_every: int, head_dims: tuple, dev):
    """The reported chunk states (``chunk_states``): ``h [rows, Hv, V, K]`` fp32, sequence-major,
    one row per chunk of ``chunk_size`` tokens, and ``h_dest [F]``: the row of flat compute chunk
    i's start state when it starts a reported chunk, -1 otherwise."""
    counts = [(b - a + chunk_size - 1) // chunk_size for a, b in zip(bounds, bounds[1:])]
    first_row = [0]
    for c in counts:
        first_row.append(first_row[-1] + c)
    h = torch.empty(first_row[-1], *head_dims, dtype=torch.float32, device=dev)
    h_dest = torch.tensor([first_row[s_] + p // record_every if p % record_every == 0 else -1
                           for s_, p in zip(layout.chunk_seq, layout.chunk_pos)],
                          dtype=torch.long, device=dev)
    return h, h_dest


def _gate_factors(gather, g, beta, F: int, Hv: int, C: int, scale: float, dev):
    """Per-token gate factors of every flat chunk, for the whole call at once (``[F, Hv, C]``
    each): the cumulative log-decay ``G``, the reset counts (None without ``g = -inf``), beta,
    ``exp(G)``, the decay to the chunk end, ``gamma`` (``[F*Hv, 1, 1]``), which chunks need the
    exact decay, ``exp(-G)`` (None when every chunk is exact), the strict upper mask (None when
    none is) and q's row factor.  ``g`` / ``beta`` are the op's ``[1, T, Hv]`` inputs."""
    gc = gather(g[0], 0, F, zero_padding=True)                     # padding: g = 0, beta = 0
    resets = None
    if bool(torch.isneginf(gc).any()):  # g = -inf is a full reset: cumulative sums of the
        # finite gates plus a reset count, so exp(G_r - G_j) is exact (0 across a reset)
        # instead of -inf - -inf
        neg = torch.isneginf(gc)
        resets = neg.to(torch.int32).cumsum(-1)                     # [F, Hv, C]
        gc.masked_fill_(neg, 0.0)
    gc.cumsum_(-1)                                                  # G_r
    bc = gather(beta[0], 0, F, zero_padding=True)                  # beta_r
    gexp = gc.exp()                                                 # exp(G_r): from the chunk start
    last = gc[..., -1:]
    to_end = (last - gc).exp_()                                     # exp(G_{C-1} - G_r): to the chunk end
    last_exp = last.exp()                                           # gamma
    if resets is not None:
        gexp.masked_fill_(resets > 0, 0.0)
        to_end.masked_fill_(resets != resets[..., -1:], 0.0)
        last_exp.masked_fill_(resets[..., -1:] > 0, 0.0)
        exact = [True] * F
    else:
        # decay[r, j] = exp(G_r - G_j) is the outer product exp(G_r) exp(-G_j) (no C x C
        # exp) while exp(-G) stays well inside fp32 range; chunks decaying further take
        # the exact exp of differences.
        exact = (gc.amin(dim=(1, 2)) <= -_DECAY_PRODUCT_RANGE).tolist()
    gneg = gc.neg().exp_() if not all(exact) else None              # exp(-G_j) (inf where exact)
    upper = torch.ones(C, C, dtype=torch.bool, device=dev).triu_(1) if any(exact) else None
    q_gain = gexp * scale                                           # q's row factor
    last_exp = last_exp.view(F * Hv, 1, 1)
    return gc, resets, bc, gexp, to_end, last_exp, exact, gneg, upper, q_gain


def chunk_gdn_torch(q, k, v, g, beta, *, cu_seqlens, initial_state=None, scale=None,
                    output_final_state=True, chunk_states=False, chunk_size=CHUNK_SIZE):
    """Chunked GDN in pure torch.

    Returns ``(o [1, T, Hv, V] in q.dtype, final [N, Hv, V, K] fp32 or None, h)`` where
    ``h`` is None unless ``chunk_states``: then the state at the start of every chunk of
    ``chunk_size`` tokens, sequence-major, ``[num_chunks, Hv, V, K]`` fp32 (the layout
    of SGLang's Ascend ``chunk_state``).

    The maths, per value head, for a chunk of ``C`` tokens with start state ``S`` (key-first
    ``[K, V]`` in the maths; stored value-first), in-chunk cumulative log-decay ``G_r`` and
    total decay ``gamma = exp(G_{C-1})``:

    * ``A[r, j] = beta_r exp(G_r - G_j) k_r.k_j`` (``j < r``), ``T = (I + A)^-1`` (WY form);
    * ``u0 = T diag(beta) v`` and ``w = T diag(beta exp(G)) k``: the in-chunk delta-rule
      corrections, independent of ``S``;
    * the chunk's corrected values ``u = u0 - w S`` (the only part that needs ``S``);
    * ``o = scale (diag(exp(G)) q S + P u)`` with the causal decayed scores
      ``P[r, j] = exp(G_r - G_j) q_r.k_j`` (``j <= r``);
    * the next chunk's start state ``gamma S + k_end^T u``, ``k_end[j] = exp(G_{C-1} - G_j) k_j``.

    Everything but ``u`` and the next state is batched over a group of chunks (of every
    sequence and head); the hand-over walks the group's chunk positions in order and per
    position issues four batched matmul-class ops (``q S``, ``u``, the decay, the update),
    all sequences that have a chunk at that position together; ``P u`` is one batched matmul
    per group afterwards (it needs every ``u`` of the group, nothing else sequential).
    ``C`` is the compute chunk (:func:`_compute_chunk`: 32 on CPU, ``chunk_size`` elsewhere);
    with ``chunk_states`` the start state of every ``chunk_size // C``-th compute chunk is
    written straight to its sequence-major row (one ``index_copy_`` per position piece).
    ATen ops per call: about 120 per group of ``pairs // Hv`` chunks plus 4 per chunk
    position (one more at a reported chunk state).  Exactness: ``g = -inf`` resets by reset
    counts (exact zeros across a reset), chunks decaying below ``-_DECAY_PRODUCT_RANGE`` by
    exact exps of differences, padding rows carry ``g = beta = 0`` (they never reach a
    state or a kept output), sequences without tokens keep their initial state.
    """
    T, Hk, Hv, V, K = q.shape[1], q.shape[2], v.shape[2], v.shape[3], q.shape[3]
    r = Hv // Hk
    dev = q.device
    C, pairs_per_group = _compute_chunk(chunk_size, dev)
    record_every = chunk_size // C  # compute chunks per reported chunk state
    f32 = torch.float32
    scale = K ** -0.5 if scale is None else scale
    bounds = _seq_bounds(cu_seqlens)
    n = len(bounds) - 1
    layout = _chunk_layout(bounds, C, dev)
    F = len(layout.chunk_seq)
    steps, offsets = len(layout.active), layout.offsets
    gather = _Gather(layout, C)

    workspace = cpu_workspace.buffers(dev)
    views: dict[tuple, torch.Tensor] = {}  # this call's views (groups of one size share them: no ops)

    def buf(name, *shape):  # a view of a reused fp32 buffer (bounded by the group size)
        if (name, shape) not in views:
            views[name, shape] = cpu_workspace.kept(name, shape, f32, dev, store=workspace)
        return views[name, shape]

    # The state between chunks, one per sequence in layout order, value-first [n, Hv, V, K]
    # (the output layout; the matmuls read it transposed, S^T = [K, V]), updated in place.
    # A workspace too while small (the final states are then a copy).
    state_in_workspace = n * Hv * V * K <= _STATE_WORKSPACE_MAX
    S = buf("S", n, Hv, V, K) if state_in_workspace else torch.empty(n, Hv, V, K, dtype=f32, device=dev)
    if initial_state is not None and n:                                 # a copy: never the caller's
        if initial_state.dtype == f32:
            torch.index_select(initial_state, 0, layout.order, out=S)
        else:
            S.copy_(initial_state.index_select(0, layout.order))
    else:  # zero start states: written outright by each sequence's first chunk
        S[steps and layout.active[0]:].zero_()                          # sequences without tokens
    S_rows = S.view(n * Hv, V, K)
    # outputs, token-major; with padding, row T is a sink for the padding rows (dropped)
    o_rows = torch.empty(T + (0 if layout.dense else 1), Hv, V, dtype=f32, device=dev)
    h = h_dest = h_flat = None
    if chunk_states:
        h, h_dest = _reported_states(bounds, layout, chunk_size, record_every, (Hv, V, K), dev)
        h_flat = h.view(h.shape[0], Hv * V * K)  # (-1 cannot be inferred for zero chunks)

    if F:
        gc, resets, bc, gexp, to_end, last_exp, exact, gneg, upper, q_gain = _gate_factors(
            gather, g, beta, F, Hv, C, scale, dev)

    # The flat chunks are processed in groups of _BLOCK_HEAD_CHUNKS (chunk, value head) pairs.
    per_group = max(1, pairs_per_group // max(Hv, 1))
    pos = 0  # first chunk position that overlaps the current group
    q0, k0, v0 = q[0], k[0], v[0]
    for lo in range(0, F, per_group):
        hi = min(F, lo + per_group)
        Fb, P = hi - lo, (hi - lo) * Hv

        qc = gather(q0, lo, hi, buf("q", Fb, Hk, C, K)).view(Fb * Hk, C, K)
        kc = gather(k0, lo, hi, buf("k", Fb, Hk, C, K)).view(Fb * Hk, C, K)
        vc = gather(v0, lo, hi, buf("v", Fb, Hv, C, V)).view(P, C, V)

        # Intra-chunk factors.  k.k^T and q.k^T are the same for the r value heads of a key
        # head: computed once per key head, broadcast over its value heads.
        kT = kc.transpose(1, 2)
        kk = torch.bmm(kc, kT, out=buf("kk", Fb * Hk, C, C)).view(Fb, Hk, 1, C, C)
        qk = torch.bmm(qc, kT, out=buf("qk0", Fb * Hk, C, C)).view(Fb, Hk, 1, C, C)
        decay = buf("decay", Fb, Hv, C, C)                              # exp(G_r - G_j)
        if not any(exact[lo:hi]):  # entries above the diagonal are dropped by the tril_ below
            torch.mul(gexp[lo:hi].unsqueeze(-1), gneg[lo:hi].unsqueeze(-2), out=decay)
        else:
            G = gc[lo:hi]
            torch.sub(G.unsqueeze(-1), G.unsqueeze(-2), out=decay).masked_fill_(upper, float("-inf")).exp_()
            if resets is not None:
                rs = resets[lo:hi]
                decay.masked_fill_(rs.unsqueeze(-1) != rs.unsqueeze(-2), 0.0)
        dk = decay.view(Fb, Hk, r, C, C)
        # P[r, j] = exp(G_r - G_j) q_r.k_j for j <= r (scale is applied with P u below)
        scores = torch.mul(dk, qk, out=buf("qk", Fb, Hk, r, C, C)).view(P, C, C).tril_()
        # A[r, j] = beta_r exp(G_r - G_j) k_r.k_j for j < r;  T = (I + A)^-1
        a = dk.mul_(kk).view(Fb, Hv, C, C).mul_(bc[lo:hi].unsqueeze(-1)).tril_(-1)
        t_inv = _unit_lower_inverse(a, out=buf("t", Fb, Hv, C, C))
        # u0 = T diag(beta) v, w = T diag(beta exp(G)) k: the diagonal factors scale T's
        # columns; w's keys are shared by the r value heads of a key head, so their r
        # matrices T are stacked into one [r*C, C] operand against the key head's k.
        u = torch.bmm(t_inv.mul_(bc[lo:hi].unsqueeze(-2)).view(P, C, C), vc, out=buf("u", P, C, V))
        t_inv.mul_(gexp[lo:hi].unsqueeze(-2))
        w = torch.bmm(t_inv.view(Fb * Hk, r * C, C), kc, out=buf("w", Fb * Hk, r * C, K)).view(P, C, K)
        qg = torch.mul(qc.view(Fb, Hk, 1, C, K), q_gain[lo:hi].view(Fb, Hk, r, C, 1),
                       out=buf("qg", Fb, Hk, r, C, K)).view(P, C, K)     # scale exp(G_r) q_r
        k_end = torch.mul(kc.view(Fb, Hk, 1, C, K), to_end[lo:hi].view(Fb, Hk, r, C, 1),
                          out=buf("ke", Fb, Hk, r, C, K)).view(P, C, K)  # exp(G_{C-1} - G_j) k_j
        out = vc                                                        # vc is spent: outputs go there

        # Hand-over, position by position over the part of each position inside the group
        # (all sequences with a chunk there at once): the group's tensors are split once
        # into per-position pieces, so a position costs its four matmul-class ops and one
        # slice of the running states.
        pieces = []  # (sequence slots j0:j1, first chunk of a zero state, reported state rows or None)
        while pos < steps and offsets[pos] < hi:
            a0, a1 = max(lo, offsets[pos]), min(hi, offsets[pos + 1])
            rows_h = h_dest[a0:a1] if chunk_states and pos % record_every == 0 else None
            pieces.append((a0 - offsets[pos], a1 - offsets[pos], pos == 0 and initial_state is None, rows_h))
            if offsets[pos + 1] > hi:
                break                                                   # continues in the next group
            pos += 1
        sizes = [(j1 - j0) * Hv for j0, j1, _, _ in pieces]
        parts = zip(pieces, u.split(sizes), u.transpose(1, 2).split(sizes), w.split(sizes), qg.split(sizes),
                    k_end.split(sizes), out.split(sizes), last_exp[lo * Hv:hi * Hv].split(sizes))
        for (j0, j1, first, rows_h), u_c, uT_c, w_c, qg_c, ke_c, o_c, gamma in parts:
            if (j0, j1) not in views:  # states of sequence slots j0:j1 and their transposes S^T
                S_c = S_rows[j0 * Hv:j1 * Hv]                           # [pieces, V, K]
                views[j0, j1] = S_c, S_c.transpose(1, 2)
            S_c, ST_c = views[j0, j1]
            if first:  # S = 0: u = u0, no inter-chunk output, next S^T = k_end^T u
                if rows_h is not None:
                    h_flat.index_fill_(0, rows_h, 0.0)
                o_c.zero_()
                torch.bmm(uT_c, ke_c, out=S_c)
                continue
            if rows_h is not None:
                h_flat.index_copy_(0, rows_h, S_c.reshape(j1 - j0, -1))
            torch.bmm(qg_c, ST_c, out=o_c)                              # scale exp(G) q S
            u_c.baddbmm_(w_c, ST_c, alpha=-1.0)                         # u = u0 - w S
            S_c.mul_(gamma)                                             # gamma S
            S_c.baddbmm_(uT_c, ke_c)                                    #   + (k_end^T u)^T
        out.baddbmm_(scores, u, alpha=scale)                            # + scale P u
        if layout.dense:  # flat chunk i holds tokens [i*C, (i+1)*C)
            o_rows.view(F, C, Hv, V)[lo:hi] = out.view(Fb, Hv, C, V).transpose(1, 2)
        else:  # token-major in a workspace, then whole rows to their tokens (2-D: row copies)
            rows = buf("rows", Fb, C, Hv, V)
            rows.copy_(out.view(Fb, Hv, C, V).transpose(1, 2))
            o_rows.view(-1, Hv * V).index_copy_(0, layout.out_row[lo * C:hi * C], rows.view(Fb * C, Hv * V))

    o = o_rows[:T].unsqueeze(0).to(q.dtype)

    final = None
    if output_final_state:  # in sequence order
        if layout.order_is_identity:
            final = S.clone() if state_in_workspace else S
        else:
            final = S.view(n, -1).index_select(0, layout.order.argsort()).view(n, Hv, V, K)

    return o, final, h
