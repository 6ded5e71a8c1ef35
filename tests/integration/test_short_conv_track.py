"""The short-conv radix-cache snapshots against an obviously-right loop: the state at a
boundary is the last S inputs before it (from the cached state where the extend is
shorter), and decode tracking copies only tracked rows, capture-safe."""

from __future__ import annotations

import re

import pytest
import torch

from sglang_ascend_hybrid.integration import short_conv_track as sct
from tests.support.sync_counter import SyncCounter

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
    with pytest.raises(ValueError, match=re.escape(f"snapshot_extend: x=shape ({C + 1}, 8) float32: expected shape "
                                                   f"({C}, tokens) to snapshot a state of shape ({SLOTS}, {C}, {S})")):
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
    sct.before_prefill(torch.randn(C, 4), state)
    sct.after_update(state)
    assert torch.equal(state, before)


class _Mode:
    def __init__(self, kind):
        self.kind = kind

    def is_decode_or_idle(self):
        return self.kind == "decode"

    def is_extend(self):
        return self.kind in ("extend", "verify")

    def is_target_verify(self):
        return self.kind == "verify"


class _Batch:
    """The ForwardBatch fields step_track reads (SGLang's own names)."""

    def __init__(self, kind, mask, track_indices, prefix=None, aligned=None):
        self.forward_mode = _Mode(kind)
        self.mamba_track_mask = mask
        self.mamba_track_indices = track_indices
        self.extend_prefix_lens = prefix
        self._aligned = aligned

    def mamba_track_aligned_lens(self):
        return self._aligned


def _meta(qsl=None, track=None, has_mask=True):
    from types import SimpleNamespace

    return SimpleNamespace(query_start_loc=qsl, mamba_track_indices=track, has_mamba_track_mask=has_mask)


def test_step_track_extend_takes_sglangs_boundary_rows_and_slots():
    fb = _Batch("extend", torch.tensor([False, True, True]), torch.tensor([0, 8, 9]),
                prefix=torch.tensor([0, 128, 0]), aligned=torch.tensor([0, 128, 256]))
    step = sct.step_track(fb, _meta(qsl=torch.tensor([0, 10, 150, 450], dtype=torch.int32)),
                          torch.tensor([3, 4, 5], dtype=torch.int32))  # an int32 slot-index view
    e = step.extend
    assert step.decode is None
    assert e.starts.tolist() == [10, 150] and e.ends.tolist() == [138, 406]
    assert e.dst.tolist() == [8, 9] and e.src.tolist() == [4, 5] and e.has_prefix.tolist() == [True, False]
    assert e.dst.dtype == e.src.dtype == torch.int64


def test_step_track_decode_prefers_the_metadatas_static_track_buffer():
    mask, static = torch.tensor([True, False]), torch.tensor([6, 7])
    step = sct.step_track(_Batch("decode", mask, torch.tensor([1, 2])), _meta(track=static), torch.tensor([3, 4]))
    assert step.extend is None and step.decode.mask is mask
    assert step.decode.dst.tolist() == [6, 7] and step.decode.src.tolist() == [3, 4]
    step = sct.step_track(_Batch("decode", mask, torch.tensor([1, 2])), _meta(track=None), torch.tensor([3, 4]))
    assert step.decode.dst.tolist() == [1, 2]


@pytest.mark.parametrize("case", ["no_mask", "verify", "untracked_extend", "no_aligned", "no_metadata"])
def test_step_track_is_none_where_nothing_is_tracked(case):
    fb = _Batch("verify" if case == "verify" else "extend", None if case == "no_mask" else torch.tensor([True]),
                torch.tensor([5]), prefix=torch.tensor([0]),
                aligned=None if case == "no_aligned" else torch.tensor([128]))
    meta = None if case == "no_metadata" else _meta(qsl=torch.tensor([0, 200]), has_mask=case != "untracked_extend")
    assert sct.step_track(fb, meta, torch.tensor([2])) is None


def _extend_step():
    return sct.StepTrack(extend=sct.ExtendTrack(torch.tensor([0]), torch.tensor([6]), torch.tensor([4]),
                                                torch.tensor([1]), torch.tensor([False])))


def _decode_step():
    return sct.StepTrack(decode=sct.DecodeTrack(torch.tensor([True]), torch.tensor([5]), torch.tensor([2])))


def test_tracker_takes_the_published_snapshots():
    state, x = torch.zeros(SLOTS, C, S), torch.randn(C, 8)
    try:
        sct.publish(_extend_step())
        sct.before_prefill(x, state)
        assert torch.equal(state[4], x[:, 3:6])
        sct.after_update(state)  # an extend step has no decode track
        assert torch.equal(state[5], torch.zeros(C, S))
        sct.publish(_decode_step())
        state[2] = 7.0
        sct.after_update(state)
        assert torch.equal(state[5], state[2])
        before = state.clone()
        sct.before_prefill(x, state)  # a decode step has no extend track
        assert torch.equal(state, before)
    finally:
        sct.publish(None)


def test_cca_hooks_snapshot_before_extend_and_copy_after_decode():
    """cca_extend_around snapshots before the original overwrites the slots; cca_decode_around
    copies after the original's update (positional and keyword arguments)."""
    conv, prev = torch.zeros(SLOTS, C, S), torch.zeros(SLOTS, 4, 1)
    qk, hs = torch.randn(8, C), torch.randn(8, 4)
    seen = {}

    def extend(qk_, hs_, conv_qk, conv_state, prev_hs_state, *rest):
        seen["at_call"] = (conv_state[4].clone(), prev_hs_state[4].clone())
        conv_state.fill_(-1.0)  # the original overwrites its slots
        return "out"

    try:
        sct.publish(_extend_step())
        assert sct.cca_extend_around(extend, qk, hs, None, conv, prev, [1], [False], [8]) == "out"
        assert torch.equal(seen["at_call"][0], qk.T[:, 3:6]) and torch.equal(seen["at_call"][1][:, 0], hs[5])

        def decode(*args, **kwargs):
            kwargs["conv_state"][2] = 3.0
            kwargs["prev_hs_state"][2] = 4.0
            return "dec"

        sct.publish(_decode_step())
        out = sct.cca_decode_around(decode, qk=qk, hidden_states=hs, conv_qk=None, conv_state=conv,
                                    prev_hs_state=prev, mamba_indices=torch.tensor([2]))
        assert out == "dec" and torch.equal(conv[5], conv[2]) and torch.equal(prev[5], prev[2])
        assert float(conv[5].max()) == 3.0 and float(prev[5].max()) == 4.0
        sct.publish(None)
        before = conv.clone()
        assert sct.cca_extend_around(lambda *a: "plain", qk, hs, None, conv, prev) == "plain"
        assert torch.equal(conv, before)
    finally:
        sct.publish(None)
