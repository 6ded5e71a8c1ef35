"""The short-conv verify integration (:mod:`sglang_ascend_hybrid.integration.short_conv_verify`):
ZAYA1's CCA verify against SGLang's own ``cca_extend`` (the upstream function, run here), the
windows it leaves for SGLang's rollback, graph safety, the commit of further conv states, which
speculative settings are served, and the LFM2 hook's routing."""

from __future__ import annotations

import re
from types import SimpleNamespace as NS

import pytest
import torch
from torch import nn

from sglang_ascend_hybrid.integration import short_conv_verify as scv
from sglang_ascend_hybrid.integration.conv_state_layout import (
    cuda_layout_view,
    draft_window,
    layer_cache_cuda_view,
    shares_storage,
)
from tests.support.sync_counter import SyncCounter

CH, HID, T0, T1, HEADS = 8, 6, 2, 2, 4   # CCA channels, hidden, the two conv kernels, q + k heads
PAD = (T0 - 1) + (T1 - 1)                # ZAYA1's total_padding


def _conv_qk(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv1d(CH, CH, T0, groups=CH), nn.Conv1d(CH, CH, T1, groups=HEADS)).double()


def _pools(draft, slots=5, seed=1):
    g = torch.Generator().manual_seed(seed)
    qk_pool = torch.randn(slots, PAD + draft - 1, CH, generator=g, dtype=torch.float64)   # window major
    hs_pool = torch.randn(slots, draft, HID, generator=g, dtype=torch.float64)
    return qk_pool, hs_pool


def _rollback(pool, slot, step, draft):
    shift = (draft - 1) - step
    out = pool.clone()
    if shift > 0:
        out[slot, shift:] = pool[slot, :pool.shape[1] - shift].clone()
    return out


@pytest.mark.parametrize("draft", [1, 3, 4])
def test_cca_verify_equals_upstream_cca_extend_and_leaves_the_rollback_windows(draft):
    from sglang.srt.models.zaya import cca_extend

    conv_qk = _conv_qk()
    qk_pool, hs_pool = _pools(draft)
    slots = [3, 0, 4]
    batch = len(slots)
    g = torch.Generator().manual_seed(2)
    qk = torch.randn(batch * draft, CH, generator=g, dtype=torch.float64)
    hidden = torch.randn(batch * draft, HID, generator=g, dtype=torch.float64)

    got_qk_pool, got_hs_pool = qk_pool.clone(), hs_pool.clone()
    qk_view = cuda_layout_view(got_qk_pool, PAD)
    hs_view = cuda_layout_view(got_hs_pool, 1)
    out, v2 = scv.cca_verify(qk, hidden, conv_qk, qk_view, hs_view, torch.tensor(slots), draft, PAD)

    # upstream: the block as an extend resuming each slot's cached state (CUDA-layout copies of the state rows)
    up_state = cuda_layout_view(qk_pool, PAD).contiguous()
    up_prev = cuda_layout_view(hs_pool, 1).contiguous()
    with torch.no_grad():
        want_out, want_v2 = cca_extend(qk, hidden, conv_qk, up_state, up_prev, slots, [True] * batch,
                                       [draft] * batch, PAD)
    torch.testing.assert_close(out, want_out, rtol=0, atol=1e-12)
    torch.testing.assert_close(v2, want_v2, rtol=0, atol=0)
    # after the whole block both agree on the state (step d - 1: no rollback)
    torch.testing.assert_close(cuda_layout_view(got_qk_pool, PAD), up_state, rtol=0, atol=0)
    torch.testing.assert_close(cuda_layout_view(got_hs_pool, 1), up_prev, rtol=0, atol=0)
    # after SGLang's rollback to any accepted step, the state rows are upstream's extend of step + 1 tokens
    for b, slot in enumerate(slots):
        for step in range(draft):
            prefix_state = cuda_layout_view(qk_pool, PAD).contiguous()
            prefix_prev = cuda_layout_view(hs_pool, 1).contiguous()
            rows = slice(b * draft, b * draft + step + 1)
            with torch.no_grad():
                cca_extend(qk[rows], hidden[rows], conv_qk, prefix_state, prefix_prev, [slot], [True], [step + 1], PAD)
            rolled_qk = _rollback(got_qk_pool, slot, step, draft)
            rolled_hs = _rollback(got_hs_pool, slot, step, draft)
            assert torch.equal(cuda_layout_view(rolled_qk, PAD)[slot], prefix_state[slot]), (slot, step)
            assert torch.equal(cuda_layout_view(rolled_hs, 1)[slot], prefix_prev[slot]), (slot, step)
    untouched = [s for s in range(qk_pool.shape[0]) if s not in slots]
    assert torch.equal(got_qk_pool[untouched], qk_pool[untouched])
    assert torch.equal(got_hs_pool[untouched], hs_pool[untouched])


def test_cca_verify_skips_pad_rows_and_reads_nothing_on_the_host():
    conv_qk = _conv_qk()
    draft = 3
    qk_pool, hs_pool = _pools(draft)
    got_qk, got_hs = qk_pool.clone(), hs_pool.clone()
    qk = torch.randn(2 * draft, CH, dtype=torch.float64)
    hidden = torch.randn(2 * draft, HID, dtype=torch.float64)
    with SyncCounter(device_of_interest="cpu") as counter:
        scv.cca_verify(qk, hidden, conv_qk, cuda_layout_view(got_qk, PAD), cuda_layout_view(got_hs, 1),
                       torch.tensor([-1, 2]), draft, PAD)
    assert counter.total == 0, counter.counts
    others = [0, 1, 3, 4]
    assert torch.equal(got_qk[others], qk_pool[others]) and torch.equal(got_hs[others], hs_pool[others])
    assert not torch.equal(got_qk[2], qk_pool[2])
    got_qk, got_hs = qk_pool.clone(), hs_pool.clone()
    scv.cca_verify(qk, hidden, conv_qk, cuda_layout_view(got_qk, PAD), cuda_layout_view(got_hs, 1),
                   torch.tensor([-1, -1]), draft, PAD)
    assert torch.equal(got_qk, qk_pool) and torch.equal(got_hs, hs_pool)


def test_cca_verify_bad_input_names_the_argument():
    conv_qk = _conv_qk()
    qk_pool, hs_pool = _pools(3)
    with pytest.raises(ValueError, match=re.escape(f"cca_verify: qk=shape (5, {CH}) float64: expected batch (2) * "
                                                   "draft (3) = 6 tokens")):
        scv.cca_verify(torch.zeros(5, CH, dtype=torch.float64), torch.zeros(5, HID, dtype=torch.float64), conv_qk,
                       cuda_layout_view(qk_pool, PAD), cuda_layout_view(hs_pool, 1), torch.tensor([0, 1]), 3, PAD)
    with pytest.raises(ValueError, match=re.escape(f"cca_verify: total_padding=3: expected the conv state's {PAD} "
                                                   "columns")):
        scv.cca_verify(torch.zeros(6, CH, dtype=torch.float64), torch.zeros(6, HID, dtype=torch.float64), conv_qk,
                       cuda_layout_view(qk_pool, PAD), cuda_layout_view(hs_pool, 1), torch.tensor([0, 1]), 3, 3)


def test_draft_window_is_the_pool_memory_and_refuses_a_wrong_row_count():
    pool = torch.arange(2 * 5 * 3, dtype=torch.float32).reshape(2, 5, 3)
    view = cuda_layout_view(pool, 2)
    full = draft_window(view, 5)
    assert full.data_ptr() == pool.data_ptr() and torch.equal(full, pool)
    with pytest.raises(ValueError, match=r"^draft_window: rows=4: expected the pool's rows per slot \(its slot stride "
                                         r"15 is 5 rows"):
        draft_window(view, 4)
    with pytest.raises(ValueError, match=r"^draft_window: rows=6: expected the pool's rows per slot"):
        draft_window(view, 6)


def test_commit_of_further_conv_states_tracks_then_rolls_back():
    calls = []

    def rollback(conv, idx, steps, draft):
        calls.append((idx.tolist(), steps.tolist(), draft))

    conv = torch.arange(1 * 6 * 3 * 2, dtype=torch.float32).reshape(1, 6, 3, 2)
    before = conv.clone()
    scv.commit_extra_conv_states([conv], rollback, torch.tensor([1, 2]), torch.tensor([0, 2]),
                                 torch.tensor([4, 5]), torch.tensor([1, -1]), 3)
    assert torch.equal(conv[:, 4], before[:, 1])        # tracked: the request's verify-time window
    assert torch.equal(conv[:, 5], before[:, 5])        # not tracked: its own
    assert calls == [([1, 2], [0, 2], 3), ([4, 5], [1, -1], 3)]
    calls.clear()
    scv.commit_extra_conv_states([conv], rollback, torch.tensor([1]), torch.tensor([0]), None, None, 3)
    assert calls == [([1], [0], 3)]


@pytest.mark.parametrize("args,text", [
    (dict(speculative_algorithm="NGRAM", speculative_eagle_topk=None, speculative_num_draft_tokens=4),
     "--speculative-algorithm NGRAM"),
    (dict(speculative_algorithm="EAGLE", speculative_eagle_topk=2, speculative_num_draft_tokens=4),
     "--speculative-eagle-topk 2"),
    (dict(speculative_algorithm="EAGLE", speculative_eagle_topk=1, speculative_num_draft_tokens=None),
     "speculative_num_draft_tokens=None"),
    (dict(speculative_algorithm="EAGLE", speculative_eagle_topk=1, speculative_num_draft_tokens=0),
     r"speculative_num_draft_tokens=0: expected an int >= 1 with --speculative-algorithm EAGLE"),
])
def test_speculative_settings_outside_linear_chains_are_refused_naming_the_flag(args, text):
    with pytest.raises(ValueError, match=text):
        scv.check_speculative(NS(**args))


@pytest.mark.parametrize("algo", ["EAGLE", "eagle3", "NEXTN", "STANDALONE", NS(name="EAGLE")])
def test_linear_chain_settings_give_the_draft_count(algo):
    assert scv.check_speculative(NS(speculative_algorithm=algo, speculative_eagle_topk=1,
                                    speculative_num_draft_tokens=5)) == 5
    assert scv.check_speculative(NS(speculative_algorithm=None)) is None
    assert scv.check_speculative(NS(speculative_algorithm="NONE")) is None


@pytest.mark.parametrize("arch", ["Lfm2ForCausalLM", "Lfm2MoeForCausalLM", "Qwen3_5ForConditionalGeneration"])
def test_standalone_draft_with_conv_or_gdn_layers_is_refused_naming_it(tmp_path, arch):
    (tmp_path / "config.json").write_text('{"architectures": ["%s"]}' % arch)
    args = NS(speculative_algorithm="STANDALONE", speculative_eagle_topk=1, speculative_num_draft_tokens=4,
              speculative_draft_model_path=str(tmp_path))
    with pytest.raises(ValueError, match=f"--speculative-draft-model-path {tmp_path} \\({arch}\\)"):
        scv.check_speculative(args)
    args.speculative_algorithm = "EAGLE"  # an EAGLE head is the target's own layer, not checked here
    assert scv.check_speculative(args) == 4


def test_standalone_draft_of_full_attention_layers_is_served(tmp_path):
    (tmp_path / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    for path in (str(tmp_path), str(tmp_path / "config.json"), "org/hub-model-id", None):
        assert scv.check_speculative(NS(speculative_algorithm="STANDALONE", speculative_eagle_topk=1,
                                        speculative_num_draft_tokens=3, speculative_draft_model_path=path)) == 3


def test_one_draft_token_and_an_unset_topk_are_served():
    # a chain of one token (the root alone) is a valid verify block; topk None is SGLang's "not set"
    assert scv.check_speculative(NS(speculative_algorithm="EAGLE", speculative_eagle_topk=None,
                                    speculative_num_draft_tokens=1)) == 1


def test_verify_draft_is_published_only_for_target_verify_steps():
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    verify = NS(forward_mode=ForwardMode.TARGET_VERIFY, spec_info=NS(draft_token_num=4))
    assert scv.verify_draft(verify, 4) == 4
    assert scv.verify_draft(NS(forward_mode=ForwardMode.DECODE, spec_info=None), 4) is None
    assert scv.verify_draft(verify, None) is None
    scv.publish(4, torch.tensor([1]))
    assert scv.current() == 4 and scv.current_slots().tolist() == [1]
    scv.publish(None, torch.tensor([1]))
    assert scv.current() is None and scv.current_slots() is None


def test_lfm2_hook_serves_window_major_pools_and_passes_cuda_layout_pools_through():
    draft, width, dim = 3, 3, 4
    pool = torch.zeros(4, (width - 1) + (draft - 1), dim)
    conv = NS(conv_weight=torch.randn(dim, width), conv_bias=None)
    x = torch.randn(2 * draft, dim)
    meta = NS(layer_cache=NS(conv=[cuda_layout_view(pool, width - 1)]), cache_indices=torch.tensor([1, 3]))

    def must_not_call(*a, **k):
        raise AssertionError("the original ran on a window-major pool")

    out = scv.shortconv_target_verify_around(must_not_call, conv, x, meta, draft, "LFM2")
    assert out.shape == x.shape and not torch.equal(pool[1], torch.zeros_like(pool[1]))
    cuda_meta = NS(layer_cache=NS(conv=[torch.zeros(4, dim, width - 1)]), cache_indices=torch.tensor([1, 3]))
    assert scv.shortconv_target_verify_around(lambda *a, **k: "original", conv, x, cuda_meta, draft, "LFM2") \
        == "original"


# --------------------------------------------------------------------------- the draft-window views


def test_cuda_layout_view_of_a_single_slot_and_its_refusals():
    window = torch.arange(5 * 3, dtype=torch.float32).reshape(5, 3)     # one slot [window, C]
    assert torch.equal(cuda_layout_view(window), window.t())           # state_len None: every row
    assert torch.equal(cuda_layout_view(window, 2), window[3:].t())
    with pytest.raises(ValueError, match=re.escape("cuda_layout_view: window_major=shape (5,) float32: expected shape "
                                                   "(..., window, channels)")):
        cuda_layout_view(torch.zeros(5))
    with pytest.raises(ValueError, match=re.escape("cuda_layout_view: state_len=6: expected 1 <= state_len <= window "
                                                   "(5)")):
        cuda_layout_view(window, 6)
    with pytest.raises(ValueError, match=re.escape("cuda_layout_view: state_len=0: expected 1 <= state_len <= window "
                                                   "(5)")):
        cuda_layout_view(window, 0)


def test_shares_storage_tells_a_pool_view_from_a_copy():
    pool = torch.zeros(2, 5, 3)
    view = cuda_layout_view(pool, 2)
    assert shares_storage(view, pool) and shares_storage(draft_window(view, 5), pool)
    assert not shares_storage(view.contiguous(), pool)


def test_draft_window_refusals_name_the_view_and_the_pool_layout():
    pool = torch.zeros(2, 5, 3)
    view = cuda_layout_view(pool, 2)
    not_transposed = pool[:, 3:]                                  # window major itself: (slots, S, C)
    with pytest.raises(ValueError, match=re.escape(
            "draft_window: view=shape (2, 2, 3) strides (15, 3, 1): expected the (slots, C, S) transposed "
            "view of a window-major pool")):
        draft_window(not_transposed, 5)
    with pytest.raises(ValueError, match=re.escape("draft_window: view=shape (3, 2) strides (1, 3): expected the")):
        draft_window(view[0], 5)                                  # one slot, no slot dimension
    with pytest.raises(ValueError, match=re.escape(
            "draft_window: rows=4: expected the pool's rows per slot (its slot stride 15 is 5 rows of 3 channels, "
            "the view holds 2)")):
        draft_window(view, 4)
    narrow = torch.zeros(2, 5, 1)                                 # one channel
    with pytest.raises(ValueError, match=re.escape("draft_window: rows=3: expected the pool's rows per slot (its slot "
                                                   "stride 5 is 5 rows of 1 channels, the view holds 2)")):
        draft_window(cuda_layout_view(narrow, 2), 3)
    with pytest.raises(ValueError, match=re.escape("draft_window: rows=5: expected at most 2 (the view's 2 rows and "
                                                   "the 0 rows before them in the pool)")):
        draft_window(pool[:, :2].transpose(1, 2), 5)              # the FIRST two rows of each slot
    # a one-slot tensor may carry any slot stride: one of exactly rows * C with rows < state_len is
    # still fewer rows than the view holds
    odd = torch.zeros(20).as_strided((1, 4, 3), (6, 3, 1))
    with pytest.raises(ValueError, match=re.escape("draft_window: rows=2: expected the pool's rows per slot")):
        draft_window(odd.transpose(1, 2), 2)


def test_layer_cache_cuda_view_defaults_flags_and_state_lens():
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class State:
        conv: list
        temporal: object = "shared"

    wm0, wm1 = torch.zeros(2, 4, 3), torch.zeros(2, 2, 5)        # window major [slots, window, C]
    cuda = torch.zeros(2, 3, 2)                                   # already CUDA layout
    out = layer_cache_cuda_view(State([wm0, wm1]))                # defaults: all window major, all rows
    assert [tuple(c.shape) for c in out.conv] == [(2, 3, 4), (2, 5, 2)] and out.temporal == "shared"
    assert shares_storage(out.conv[0], wm0) and torch.equal(out.conv[1], wm1.transpose(1, 2))
    out = layer_cache_cuda_view(State([wm0, cuda]), [True, False])
    assert tuple(out.conv[0].shape) == (2, 3, 4) and out.conv[1] is cuda
    out = layer_cache_cuda_view(State([wm0, wm1]), state_lens=[2, 1])
    assert [tuple(c.shape) for c in out.conv] == [(2, 3, 2), (2, 5, 1)]
    assert torch.equal(out.conv[0], wm0[:, 2:].transpose(1, 2))
    out = layer_cache_cuda_view(State([wm0, wm1]), [True, True], [3, None])
    assert [tuple(c.shape) for c in out.conv] == [(2, 3, 3), (2, 5, 2)]
    with pytest.raises(ValueError, match=re.escape(
            "layer_cache_cuda_view: window_major=[True]: expected one entry per conv state (2)")):
        layer_cache_cuda_view(State([wm0, wm1]), [True], [2, 1])
    with pytest.raises(ValueError, match=re.escape(
            "layer_cache_cuda_view: state_lens=[2, 1, 1]: expected one entry per conv state (2)")):
        layer_cache_cuda_view(State([wm0, wm1]), [True, True], [2, 1, 1])


# --------------------------------------------------------------------------- the commit, more cases


def _recording_rollback(calls):
    def rollback(conv, idx, steps, draft):
        assert idx.dtype == torch.int64 and steps.dtype == torch.int64   # sgl-kernel-npu's index dtype
        calls.append((conv, idx.tolist(), steps.tolist(), draft))
    return rollback


def test_commit_rolls_back_every_further_conv_with_int64_indices_and_tracks_step_zero():
    calls = []
    convs = [torch.arange(6 * 3 * 2, dtype=torch.float32).reshape(1, 6, 3, 2) + 100 * i for i in range(2)]
    before = [c.clone() for c in convs]
    i32 = dict(dtype=torch.int32)
    scv.commit_extra_conv_states(convs, _recording_rollback(calls), torch.tensor([1, 2], **i32),
                                 torch.tensor([0, 2], **i32), torch.tensor([4, 5], **i32),
                                 torch.tensor([0, -1], **i32), 3)
    for conv, old in zip(convs, before):
        assert torch.equal(conv[:, 4], old[:, 1])     # tracked at step 0: the request's verify-time window
        assert torch.equal(conv[:, 5], old[:, 5])     # not tracked (-1): its own
    assert [c is conv for (c, *_), conv in zip(calls, [convs[0], convs[0], convs[1], convs[1]])] == [True] * 4
    assert [call[1:] for call in calls] == [([1, 2], [0, 2], 3), ([4, 5], [0, -1], 3)] * 2


def test_commit_with_one_track_slot_and_with_empty_index_lists():
    calls = []
    conv = torch.arange(6 * 3 * 2, dtype=torch.float32).reshape(1, 6, 3, 2)
    before = conv.clone()
    scv.commit_extra_conv_states([conv], _recording_rollback(calls), torch.tensor([2]), torch.tensor([1]),
                                 torch.tensor([5]), torch.tensor([1]), 3)
    assert torch.equal(conv[:, 5], before[:, 2])
    assert [call[1:] for call in calls] == [([2], [1], 3), ([5], [1], 3)]
    calls.clear()
    empty = torch.zeros(0, dtype=torch.int64)
    scv.commit_extra_conv_states([conv], _recording_rollback(calls), empty, empty, empty, empty, 3)
    assert calls == []                                # nothing to roll back: the kernel is not called
    scv.commit_extra_conv_states([conv], _recording_rollback(calls), torch.tensor([2]), torch.tensor([1]),
                                 empty, empty, 3)
    assert [call[1:] for call in calls] == [([2], [1], 3)]


# --------------------------------------------------------------------------- the LFM2 hook, more cases


def _lfm2_case(draft=3, width=3, dim=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    pool = torch.randn(4, (width - 1) + (draft - 1), dim, generator=g)
    conv = NS(conv_weight=torch.randn(dim, width, generator=g), conv_bias=torch.randn(dim, generator=g))
    x = torch.randn(2 * draft, dim, generator=g)
    meta = NS(layer_cache=NS(conv=[cuda_layout_view(pool, width - 1)]), cache_indices=torch.tensor([1, 3]))
    return pool, conv, x, meta


def test_lfm2_hook_output_is_the_biased_conv_over_state_and_block():
    draft, width = 3, 3
    pool, conv, x, meta = _lfm2_case(draft, width)
    old = pool.clone()
    out = scv.shortconv_target_verify_around(_must_not_call, conv, x, meta, draft, "LFM2")
    for b, slot in enumerate([1, 3]):
        stream = torch.cat([old[slot, -(width - 1):], x[b * draft:(b + 1) * draft]])       # [W-1+d, C]
        want = torch.stack([(stream[t:t + width].t() * conv.conv_weight).sum(-1) + conv.conv_bias
                            for t in range(draft)])
        torch.testing.assert_close(out[b * draft:(b + 1) * draft], want)
        assert torch.equal(pool[slot], stream[1:])    # the draft window for the rollback


def _must_not_call(*a, **k):
    raise AssertionError("the original ran on a window-major pool")


def test_lfm2_hook_hands_the_original_exactly_its_arguments():
    draft, dim, width = 3, 4, 3
    conv = NS(conv_weight=torch.randn(dim, width), conv_bias=None)
    x = torch.randn(2 * draft, dim)
    meta = NS(layer_cache=NS(conv=[torch.zeros(4, dim, width - 1)]), cache_indices=torch.tensor([1, 3]))
    seen = []

    def original(*a, **k):
        seen.append((a, k))
        return "original"

    assert scv.shortconv_target_verify_around(original, conv, x, meta, draft, "LFM2", "extra", flag=7) == "original"
    (args, kwargs), = seen
    assert args[0] is conv and args[1] is x and args[2] is meta and args[3:] == (draft, "LFM2", "extra")
    assert kwargs == dict(flag=7)


def test_lfm2_hook_reads_no_value_on_the_host_unless_debug_checks_are_on(monkeypatch):
    draft = 3
    pool, conv, x, meta = _lfm2_case(draft)
    meta.cache_indices = torch.tensor([1, 1])         # one slot twice: only a value check sees it
    monkeypatch.delenv("SGLANG_ASCEND_HYBRID_DEBUG_CHECKS", raising=False)
    with SyncCounter(device_of_interest="cpu") as counter:
        scv.shortconv_target_verify_around(_must_not_call, conv, x, meta, draft, "LFM2")
    assert counter.total == 0, counter.counts
    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_DEBUG_CHECKS", "1")
    with pytest.raises(ValueError, match=re.escape("causal_conv1d_verify: cache_indices=[1, 1]: expected distinct "
                                                   "slots (or pad_slot_id -1); slot 1 is given to more than one "
                                                   "sequence")):
        scv.shortconv_target_verify_around(_must_not_call, conv, x, meta, draft, "LFM2")
