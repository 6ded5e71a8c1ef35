"""Prefix-cache (radix) runs of a whole model with the mamba ``extra_buffer`` strategy.

What the scheduler does, and how this module stands in for it:

* **Where a prefill snapshot lands.**  For each extend chunk SGLang's scheduler
  (``ScheduleBatch._mamba_radix_cache_v2_req_prepare_for_extend``, 0.5.23, no DCP)
  tracks when the chunk has at least one checkpoint-grid step (``extend_len >= grid``,
  grid = lcm(``mamba_cache_chunk_size``, page) = 128 with page 128 and 64-token state
  chunks), at ``prefix + (extend_len // grid) * grid``; it passes the chunk end as
  ``mamba_track_seqlen`` when that boundary is also the last 64-token state boundary,
  else the boundary + 1 (``_force_track_h``), so the backend's index maths reads
  ``h``.  :func:`track_for_extend` is that rule.
* **The snapshot itself** is SGLang's backend code (``_init_track_ssm_indices``,
  ``_track_mamba_state_extend`` / ``_decode``, the conv tracking) or, for the
  short-conv families, the plugin's sidecar: the engine runs them, nothing here
  copies a state.
* **A later hit** restores the tracked slot into the new request's slot with
  SGLang's ``HybridReqToTokenPool.copy_mamba_state`` (what the model runner does
  with the radix cache's copy-on-write indices) and shares the KV of the matched
  tokens; :func:`matched_prefix` is the deepest tracked boundary within the shared
  tokens (the radix cache stores a mamba value only where a snapshot was taken).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from tests.e2e import harness

PAGE = 128  # the NPU default page size: the radix tree's page
STATE_CHUNK = 64  # the GDN state chunk (FLA_CHUNK_SIZE / mamba_chunk_size default)
CACHE_CHUNK = max(STATE_CHUNK, PAGE)  # sglang mamba_cache_chunk_size()
GRID = math.lcm(CACHE_CHUNK, PAGE)  # mamba_checkpoint_grid(page)
SERVER_ARGS = dict(_mamba_cache_chunk_size=CACHE_CHUNK, disable_radix_cache=False)
MAX_CONTEXT = 512


def track_for_extend(prefix_len: int, extend_len: int):
    """(tracked boundary, ``mamba_track_seqlen``) of one extend chunk, or None (not tracked)."""
    if extend_len < GRID:
        return None
    aligned = prefix_len + (extend_len // GRID) * GRID
    fla_aligned = prefix_len + (extend_len // STATE_CHUNK) * STATE_CHUNK
    seqlen = prefix_len + extend_len if fla_aligned == aligned else aligned + 1
    return aligned, seqlen


@dataclass
class Snapshot:
    boundary: int  # tokens the tracked state covers
    slot: int  # the track slot holding it


def prefill_tracked(sched: harness.Scheduler, req: harness.Request, chunks, track_slots) -> list:
    """Chunked prefill of ``req`` (chunk lengths ``chunks``), each chunk tracked by the
    scheduler's rule into the next free slot of ``track_slots``; the snapshots taken."""
    snaps, free = [], list(track_slots)
    for n in chunks:
        t = track_for_extend(req.done, n)
        track = None
        if t is not None:
            snaps.append(Snapshot(t[0], free.pop(0)))
            track = {req.name: (t[1], snaps[-1].slot)}
        sched.extend([(req, n)], track=track)
    return snaps


def matched_prefix(snaps, shared: int):
    """The deepest snapshot within ``shared`` tokens (the radix cache's mamba match), or None."""
    hits = [s for s in snaps if s.boundary <= shared]
    return max(hits, key=lambda s: s.boundary) if hits else None


def resume(sched: harness.Scheduler, owner: harness.Request, req: harness.Request, snap: Snapshot) -> None:
    """Give ``req`` the first ``snap.boundary`` tokens of ``owner`` from the caches: the
    tracked state copied into ``req``'s slot by SGLang's pool, the KV locations shared."""
    pool = sched.engine.req_to_token_pool
    assert req.tokens[:snap.boundary] == owner.tokens[:snap.boundary]
    pool.copy_mamba_state(torch.tensor([snap.slot]), torch.tensor([req.slot]))
    pool.req_to_token[req.row, :snap.boundary] = pool.req_to_token[owner.row, :snap.boundary]
    req.done = snap.boundary


def layer_states(engine, slot: int) -> list:
    """Every mamba tensor of one slot, all layers (conv states, then the SSM state when present)."""
    cache = engine.req_to_token_pool.mamba_pool.mamba_cache
    out = [c[:, slot].clone() for c in cache.conv]
    temporal = getattr(cache, "temporal", None)
    if temporal is not None and temporal.numel():
        out.append(temporal[:, slot].clone())
    return out
