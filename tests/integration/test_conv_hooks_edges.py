"""Edges of the short-conv hooks and their prefix-cache tracking, found weak by mutation testing:
SGLang's mixed positional / keyword calls, the ``check_values`` default the hooks pass, the
published snapshot reaching the prefill hook, ZAYA1's CCA verify call (every argument of
``cca_extend`` reaching ``cca_verify``), and ``step_track`` on SGLang's int32 slot ids, a
one-token prefix and metadata without ``has_mamba_track_mask``."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from sglang_ascend_hybrid.integration import conv_hooks as hooks
from sglang_ascend_hybrid.integration import short_conv_track as sct
from sglang_ascend_hybrid.integration import short_conv_verify
from sglang_ascend_hybrid.integration.conv_state_layout import cuda_layout_view
from sglang_ascend_hybrid.ops.conv import api as ops
from tests.integration.test_conv_hooks import _Recorder
from tests.integration.test_short_conv_track import _Batch, _meta
from tests.support.sync_counter import SyncCounter

DIM = 16
DEBUG = "SGLANG_ASCEND_HYBRID_DEBUG_CHECKS"


def _never(*args, **kwargs):
    raise AssertionError("the original ran for a call the plugin serves")


def _prefill_case(seed=1):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(DIM, 5, generator=gen)
    weight = torch.randn(DIM, 3, generator=gen)
    qsl = torch.tensor([0, 2, 5], dtype=torch.int32)
    return x, weight, qsl


@pytest.fixture
def no_published_steps():
    sct.publish(None)
    short_conv_verify.publish(None)
    yield
    sct.publish(None)
    short_conv_verify.publish(None)


# ------------------------------------------------------------------ argument parsing of the conv hooks

def test_prefill_hook_reads_conv_states_by_keyword_after_six_positional_arguments():
    """``x, weight, bias, query_start_loc, cache_indices, has_initial_state`` positionally and
    ``conv_states`` by keyword: the hook serves it (no 7th positional argument to read)."""
    x, weight, qsl = _prefill_case()
    ci, init = torch.tensor([2, 0]), torch.tensor([False, False])
    pool = torch.zeros(3, 2, DIM)
    out = hooks.causal_conv1d_fn_around(_never, x, weight, None, qsl, ci, init, conv_states=cuda_layout_view(pool),
                                        activation=None)
    ref_pool = torch.zeros(3, 2, DIM)
    ref = ops.causal_conv1d_fn(x, weight, None, qsl, ci, init, cuda_layout_view(ref_pool), activation=None)
    assert torch.equal(out, ref) and torch.equal(pool, ref_pool)
    torch.testing.assert_close(pool[0], x[:, 3:].t())


def test_decode_hook_serves_x_by_position_and_the_state_by_keyword():
    gen = torch.Generator().manual_seed(3)
    step, weight = torch.randn(2, DIM, generator=gen), torch.randn(DIM, 3, generator=gen)
    pool = torch.randn(3, 2, DIM, generator=gen)
    ref_pool = pool.clone()
    idx = torch.tensor([2, 0])
    out = hooks.causal_conv1d_update_around(_never, step, conv_state=cuda_layout_view(pool), weight=weight,
                                            conv_state_indices=idx)
    ref = ops.causal_conv1d_update(step, cuda_layout_view(ref_pool), weight, conv_state_indices=idx)
    assert torch.equal(out, ref) and torch.equal(pool, ref_pool)
    assert torch.equal(pool[2, -1], step[0])


# ------------------------------------------------------------------ check_values = SGLANG_ASCEND_HYBRID_DEBUG_CHECKS

def _prefill_with_slot_twice():
    x, weight, qsl = _prefill_case()
    return hooks.causal_conv1d_fn_around(_never, x, weight, None, qsl, torch.tensor([1, 1]), None,
                                         cuda_layout_view(torch.zeros(3, 2, DIM)), activation=None)


def _decode_with_slot_twice():
    gen = torch.Generator().manual_seed(4)
    step, weight = torch.randn(2, DIM, generator=gen), torch.randn(DIM, 3, generator=gen)
    return hooks.causal_conv1d_update_around(_never, step, cuda_layout_view(torch.randn(3, 2, DIM, generator=gen)),
                                             weight, conv_state_indices=torch.tensor([1, 1]))


@pytest.mark.parametrize("call", [_prefill_with_slot_twice, _decode_with_slot_twice], ids=["prefill", "decode"])
def test_hooks_check_slot_values_only_under_debug_checks(monkeypatch, call):
    """The serving path reads no slot values on the host (DEBUG_CHECKS off by default); with
    SGLANG_ASCEND_HYBRID_DEBUG_CHECKS=1 the same call is refused."""
    monkeypatch.delenv(DEBUG, raising=False)
    call()
    monkeypatch.setenv(DEBUG, "1")
    with pytest.raises(ValueError, match=r"^causal_conv1d_(fn|update): (cache|conv_state)_indices=\[[0-9, ]*\]: "
                                         r"expected distinct slots \(or pad_slot_id -1\); slot 1 is given to more "
                                         r"than one"):
        call()


def test_decode_hook_reads_no_tensor_values_by_default(monkeypatch):
    monkeypatch.delenv(DEBUG, raising=False)
    gen = torch.Generator().manual_seed(5)
    step, weight = torch.randn(2, DIM, generator=gen), torch.randn(DIM, 3, generator=gen)
    pool = torch.randn(3, 2, DIM, generator=gen)
    with SyncCounter() as counter:
        hooks.causal_conv1d_update_around(_never, step, cuda_layout_view(pool), weight,
                                          conv_state_indices=torch.tensor([2, 0]))
    assert counter.total == 0, counter.counts


# ------------------------------------------------------------------ the published extend snapshot in the prefill hook

def test_prefill_hook_snapshots_the_tracked_window_before_the_kernel(no_published_steps):
    x, weight, qsl = _prefill_case()
    pool = torch.zeros(4, 2, DIM)  # window-major
    sct.publish(sct.StepTrack(extend=sct.ExtendTrack(
        starts=torch.tensor([2]), ends=torch.tensor([4]), dst=torch.tensor([3]), src=torch.tensor([0]),
        has_prefix=torch.tensor([False]))))
    hooks.causal_conv1d_fn_around(_never, x, weight, None, qsl, torch.tensor([1, 0]), None, cuda_layout_view(pool),
                                  activation=None)
    torch.testing.assert_close(pool[3], x[:, 2:4].t())  # sequence 1's window before its boundary
    torch.testing.assert_close(pool[0], x[:, 3:5].t())  # the kernel still ran


# ------------------------------------------------------------------ ZAYA1 cca_extend -> cca_verify in TARGET_VERIFY

def _cca_inputs():
    conv_qk = torch.nn.Conv1d(4, 4, 3, groups=4, bias=False)
    return dict(qk=torch.randn(4, 4), hidden_states=torch.randn(4, 3), conv_qk=conv_qk,
                conv_state=torch.zeros(5, 4, 2), prev_hs_state=torch.zeros(5, 3, 1))


_CALL_STYLES = {
    # cca_extend's own call in zaya.py: nine positional arguments
    "positional": lambda a, tp: ((a["qk"], a["hidden_states"], a["conv_qk"], a["conv_state"], a["prev_hs_state"],
                                  None, None, None, tp), {}),
    "padding_by_keyword": lambda a, tp: ((a["qk"], a["hidden_states"], a["conv_qk"], a["conv_state"],
                                          a["prev_hs_state"], None, None, None), dict(total_padding=tp)),
    "keyword": lambda a, tp: ((), dict(a, slot_ids=None, has_prefix=None, extend_seq_lens_cpu=None,
                                       total_padding=tp)),
}


@pytest.mark.parametrize("style", sorted(_CALL_STYLES))
def test_cca_extend_in_verify_passes_every_argument_to_cca_verify(monkeypatch, no_published_steps, style):
    spy = _Recorder(returns="verified")
    monkeypatch.setattr(short_conv_verify, "cca_verify", spy)
    a, slots = _cca_inputs(), torch.tensor([1, 3])
    args, kwargs = _CALL_STYLES[style](a, 2)
    short_conv_verify.publish(2, slots)
    assert sct.cca_extend_around(_never, *args, **kwargs) == "verified"
    (got, got_kwargs), = spy.calls
    want = (a["qk"], a["hidden_states"], a["conv_qk"], a["conv_state"], a["prev_hs_state"], slots, 2, 2)
    assert len(got) == len(want) and all(g is w for g, w in zip(got, want)) and got_kwargs == {}


def test_cca_extend_in_verify_without_padding_passes_none(monkeypatch, no_published_steps):
    spy = _Recorder(returns="verified")
    monkeypatch.setattr(short_conv_verify, "cca_verify", spy)
    a = _cca_inputs()
    short_conv_verify.publish(2, torch.tensor([1, 3]))
    sct.cca_extend_around(_never, a["qk"], a["hidden_states"], a["conv_qk"], a["conv_state"], a["prev_hs_state"])
    (got, _), = spy.calls
    assert got[-1] is None and got[-2] == 2


def test_cca_extend_in_verify_runs_the_plugins_verify(no_published_steps):
    """End to end through the real ``cca_verify``: the outputs and the draft windows it leaves
    are those of calling it directly."""
    torch.manual_seed(0)
    a, slots = _cca_inputs(), torch.tensor([1, 3])
    qk_pool, hs_pool = torch.randn(5, 3, 4), torch.randn(5, 2, 3)  # window-major, draft 2, padding 2
    ref_qk, ref_hs, orig_qk = qk_pool.clone(), hs_pool.clone(), qk_pool.clone()
    short_conv_verify.publish(2, slots)
    out = sct.cca_extend_around(_never, a["qk"], a["hidden_states"], a["conv_qk"], cuda_layout_view(qk_pool, 2),
                                cuda_layout_view(hs_pool, 1), None, None, None, 2)
    want = short_conv_verify.cca_verify(a["qk"], a["hidden_states"], a["conv_qk"], cuda_layout_view(ref_qk, 2),
                                        cuda_layout_view(ref_hs, 1), slots, 2, 2)
    assert len(out) == 2 and all(torch.equal(o, w) for o, w in zip(out, want))
    assert torch.equal(qk_pool, ref_qk) and torch.equal(hs_pool, ref_hs)
    assert not torch.equal(qk_pool[1], orig_qk[1]) and torch.equal(qk_pool[0], orig_qk[0])  # slots 1 and 3 only


def test_cca_extend_outside_verify_calls_the_original_with_its_keywords(no_published_steps):
    a = _cca_inputs()
    seen = []

    def original(*args, **kwargs):
        seen.append((args, kwargs))
        return "out"

    sct.publish(sct.StepTrack(extend=sct.ExtendTrack(torch.tensor([0]), torch.tensor([3]), torch.tensor([4]),
                                                     torch.tensor([1]), torch.tensor([False]))))
    kwargs = dict(slot_ids=[1], has_prefix=[False], extend_seq_lens_cpu=[4], total_padding=2)
    assert sct.cca_extend_around(original, a["qk"], a["hidden_states"], a["conv_qk"], a["conv_state"],
                                 a["prev_hs_state"], **kwargs) == "out"
    (got_args, got_kwargs), = seen
    assert got_kwargs == kwargs and len(got_args) == 5
    assert torch.equal(a["conv_state"][4], a["qk"][1:3].t())  # the snapshot ran first
    assert torch.equal(a["prev_hs_state"][4, :, 0], a["hidden_states"][2])


# ------------------------------------------------------------------ step_track on SGLang's fields

def test_step_track_decode_slots_are_int64_from_sglangs_int32_ids():
    """The unified mamba pool translates track ids to int32 (``translate_mamba_indices``)."""
    mask = torch.tensor([True, False])
    step = sct.step_track(_Batch("decode", mask, None), _meta(track=torch.tensor([6, 7], dtype=torch.int32)),
                          torch.tensor([3, 4], dtype=torch.int32))
    assert step.decode.dst.dtype == torch.int64 and step.decode.src.dtype == torch.int64
    assert step.decode.dst.tolist() == [6, 7] and step.decode.src.tolist() == [3, 4]


def test_step_track_is_none_when_metadata_has_no_track_mask_flag():
    """Metadata without ``has_mamba_track_mask`` (an older backend's) tracks nothing."""
    fb = _Batch("extend", torch.tensor([True]), torch.tensor([5]), prefix=torch.tensor([0]),
                aligned=torch.tensor([128]))
    meta = SimpleNamespace(query_start_loc=torch.tensor([0, 200]), mamba_track_indices=None)
    assert sct.step_track(fb, meta, torch.tensor([2])) is None


def test_step_track_a_one_token_prefix_is_a_prefix():
    fb = _Batch("extend", torch.tensor([True, True]), torch.tensor([7, 8]), prefix=torch.tensor([1, 0]),
                aligned=torch.tensor([4, 4]))
    step = sct.step_track(fb, _meta(qsl=torch.tensor([0, 6, 12], dtype=torch.int32)), torch.tensor([1, 2]))
    assert step.extend.has_prefix.tolist() == [True, False]


# ------------------------------------------------------------------ snapshot_extend edges

def test_snapshot_at_the_extend_start_is_the_cached_state():
    """A boundary at the first token of a resumed request's extend: the snapshot is its cached
    state, every column in place."""
    state = torch.arange(4 * 2 * 3, dtype=torch.float32).reshape(4, 2, 3)
    before = state.clone()
    x = torch.randn(2, 6)
    sct.snapshot_extend(state, x, sct.ExtendTrack(starts=torch.tensor([2]), ends=torch.tensor([2]),
                                                  dst=torch.tensor([3]), src=torch.tensor([1]),
                                                  has_prefix=torch.tensor([True])))
    assert torch.equal(state[3], before[1])


def test_snapshot_extend_keeps_its_work_on_the_pools_device():
    """Pool, input and track on a non-CPU device (meta here, an NPU when serving): no CPU tensor
    enters the index maths."""
    dev = torch.device("meta")
    state, x = torch.empty(9, 5, 3, device=dev), torch.empty(5, 10, device=dev)
    track = sct.ExtendTrack(*(torch.tensor(v, device=dev) for v in ([0], [7], [4], [1])),
                            torch.tensor([True], device=dev))
    sct.snapshot_extend(state, x, track)
    assert state.device == dev
