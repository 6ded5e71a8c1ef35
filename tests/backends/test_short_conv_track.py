"""The short-conv radix-cache snapshots against an obviously-right loop: the state at a
boundary is the last S inputs before it (from the cached state where the extend is
shorter), and decode tracking copies only tracked rows, capture-safe."""

from __future__ import annotations

import pytest
import torch

from sglang_ascend_hybrid.backends import short_conv_track as sct
from tests.sync_counter import SyncCounter

C, S, SLOTS = 5, 3, 9


def _reference_window(state, x, start, end, src, has_prefix):
    """History = cached state (or zeros) then this extend's inputs; the S entries before ``end``."""
    hist = state[src].clone() if has_prefix else torch.zeros(C, S, dtype=state.dtype)
    full = torch.cat([hist, x[:, start:end].to(state.dtype)], dim=1)
    return full[:, -S:]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_snapshot_extend_equals_the_history_window(dtype):
    gen = torch.Generator().manual_seed(0)
    state = torch.randn(SLOTS, C, S, generator=gen).to(dtype)
    x = torch.randn(C, 40, generator=gen)
    # (start, boundary, src, dst, has_prefix): mid-extend, 1 token in (window from the cache),
    # no prefix with a short extend (zeros), boundary at the extend end
    rows = [(0, 16, 1, 6, False), (16, 17, 2, 7, True), (20, 22, 3, 8, False), (22, 40, 4, 5, True)]
    before = state.clone()
    sct.snapshot_extend(state, x, sct.ExtendTrack(
        starts=torch.tensor([r[0] for r in rows]), ends=torch.tensor([r[1] for r in rows]),
        src=torch.tensor([r[2] for r in rows]), dst=torch.tensor([r[3] for r in rows]),
        has_prefix=torch.tensor([r[4] for r in rows])))
    for start, end, src, dst, pre in rows:
        assert torch.equal(state[dst], _reference_window(before, x, start, end, src, pre)), (start, end)
    untouched = [s for s in range(SLOTS) if s not in {r[3] for r in rows}]
    assert torch.equal(state[untouched], before[untouched])


def test_snapshot_extend_writes_through_a_strided_pool_view():
    pool = torch.zeros(SLOTS, S, C)  # window-major
    view = pool.transpose(-1, -2)  # [slots, C, S]
    x = torch.arange(C * 10, dtype=torch.float32).reshape(C, 10)
    sct.snapshot_extend(view, x, sct.ExtendTrack(torch.tensor([0]), torch.tensor([7]), torch.tensor([4]),
                                                 torch.tensor([1]), torch.tensor([False])))
    assert torch.equal(pool[4].transpose(0, 1), x[:, 4:7])


def test_snapshot_extend_rejects_a_mismatched_input():
    with pytest.raises(ValueError, match=r"expected \(5, tokens\)"):
        sct.snapshot_extend(torch.zeros(SLOTS, C, S), torch.zeros(C + 1, 8),
                            sct.ExtendTrack(torch.tensor([0]), torch.tensor([4]), torch.tensor([1]),
                                            torch.tensor([2]), torch.tensor([False])))


def test_snapshot_rows_is_the_input_before_the_boundary():
    state = torch.randn(SLOTS, 4, 1)
    rows = torch.randn(12, 4)
    before = state.clone()
    sct.snapshot_extend_rows(state, rows, sct.ExtendTrack(
        starts=torch.tensor([0, 6, 9]), ends=torch.tensor([5, 6, 9]), dst=torch.tensor([6, 7, 8]),
        src=torch.tensor([1, 2, 3]), has_prefix=torch.tensor([False, True, False])))
    assert torch.equal(state[6, :, 0], rows[4])
    assert torch.equal(state[7], before[2])  # boundary at the extend start: the cached value
    assert torch.equal(state[8], torch.zeros(4, 1))  # no prefix, no token yet


def test_copy_decode_copies_tracked_rows_only_without_host_syncs():
    state = torch.randn(SLOTS, C, S)
    before = state.clone()
    track = sct.DecodeTrack(mask=torch.tensor([True, False, False, True]), dst=torch.tensor([7, 8, 0, 6]),
                            src=torch.tensor([2, 3, 0, 0]))  # row 2: padding (slot 0, not tracked)
    with SyncCounter() as counter:
        sct.copy_decode(state, track)
    assert counter.total == 0, counter.counts
    assert torch.equal(state[7], before[2]) and torch.equal(state[6], before[0])
    assert torch.equal(state[8], before[8])  # row 1 not tracked: its dst is left alone
    unchanged = [0, 1, 2, 3, 4, 5, 8]
    assert torch.equal(state[unchanged], before[unchanged])


def test_tracker_is_idle_without_a_published_step():
    state = torch.randn(SLOTS, C, S)
    before = state.clone()
    sct.publish(None)
    sct.TRACKER.before_prefill(torch.randn(C, 4), state)
    sct.TRACKER.after_update(state)
    assert torch.equal(state, before)
