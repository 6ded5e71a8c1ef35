"""The conv AROUND hooks' argument handling, found weak by mutation testing: a call
for upstream reaches it with every argument as given; arguments passed by keyword route the
same way as positional ones; the host check of ``seq_lens_cpu`` accepts its edges."""

from __future__ import annotations

import re

import pytest
import torch

from sglang_ascend_hybrid.integration import conv_hooks as hooks
from sglang_ascend_hybrid.integration.conv_state_layout import cuda_layout_view
from sglang_ascend_hybrid.ops.conv import api as ops

DIM = 16


class _Recorder:
    """A stand-in callable that records its calls and returns ``returns``."""

    def __init__(self, returns="upstream"):
        self.calls, self.returns = [], returns

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return self.returns


def _case(seed=1):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(DIM, 5, generator=gen)
    weight = torch.randn(DIM, 3, generator=gen)
    qsl = torch.tensor([0, 2, 5], dtype=torch.int32)
    return x, weight, qsl


def test_upstream_calls_reach_the_original_with_every_argument():
    x, weight, qsl = _case()
    cuda_states = torch.zeros(3, DIM, 2)  # CUDA layout on CPU: not the plugin's
    original = _Recorder()
    args = (x, weight, None, qsl, torch.tensor([0, 1]), None, cuda_states)
    kwargs = dict(activation="silu", seq_lens_cpu=[2, 3])
    assert hooks.causal_conv1d_fn_around(original, *args, **kwargs) == "upstream"
    (got_args, got_kwargs), = original.calls
    assert got_args == args and got_kwargs == kwargs
    original.calls.clear()
    step = torch.randn(2, DIM)
    args = (step, cuda_states, weight)
    kwargs = dict(bias=None, activation="silu", conv_state_indices=torch.tensor([0, 2]))
    assert hooks.causal_conv1d_update_around(original, *args, **kwargs) == "upstream"
    (got_args, got_kwargs), = original.calls
    assert got_args == args and got_kwargs == kwargs


def _prefill(call):
    pool = torch.zeros(3, 2, DIM)  # window-major: the plugin's layout
    out = call(cuda_layout_view(pool))
    return out, pool


@pytest.mark.parametrize("by_keyword", [False, True])
def test_prefill_hook_routes_keyword_and_positional_calls_alike(by_keyword):
    x, weight, qsl = _case()
    original = _Recorder()
    ci = torch.tensor([2, 0])
    if by_keyword:
        out, pool = _prefill(lambda st: hooks.causal_conv1d_fn_around(
            original, x=x, weight=weight, bias=None, query_start_loc=qsl, cache_indices=ci, conv_states=st,
            activation=None))
    else:
        out, pool = _prefill(lambda st: hooks.causal_conv1d_fn_around(
            original, x, weight, None, qsl, ci, None, st, activation=None))
    assert original.calls == []
    ref, ref_pool = _prefill(lambda st: ops.causal_conv1d_fn(x, weight, None, qsl, ci, None, st, activation=None))
    assert torch.equal(out, ref) and torch.equal(pool, ref_pool)
    torch.testing.assert_close(pool[2], x[:, 0:2].t())  # sequence 0's last width-1 tokens


@pytest.mark.parametrize("by_keyword", [False, True])
def test_decode_hook_routes_keyword_and_positional_calls_alike(by_keyword):
    gen = torch.Generator().manual_seed(3)
    step = torch.randn(2, DIM, generator=gen)
    weight = torch.randn(DIM, 3, generator=gen)
    pool = torch.randn(3, 2, DIM, generator=gen)
    ref_pool = pool.clone()
    idx = torch.tensor([2, 0])
    original = _Recorder()
    if by_keyword:
        out = hooks.causal_conv1d_update_around(original, x=step, conv_state=cuda_layout_view(pool), weight=weight,
                                              conv_state_indices=idx)
    else:
        out = hooks.causal_conv1d_update_around(original, step, cuda_layout_view(pool), weight,
                                              conv_state_indices=idx)
    assert original.calls == []
    ref = ops.causal_conv1d_update(step, cuda_layout_view(ref_pool), weight, conv_state_indices=idx)
    assert torch.equal(out, ref) and torch.equal(pool, ref_pool)
    assert torch.equal(pool[2, -1], step[0])  # the newest token enters the window


@pytest.mark.parametrize("lens", [[0, 5], [2, 3], [0, 0], [1, 0, 4]])
def test_seq_lens_check_accepts_empty_sequences_and_a_full_batch(lens):
    x, weight, _ = _case()
    qsl = torch.tensor([0] + lens).cumsum(0).to(torch.int32)
    pool = torch.zeros(len(lens), 2, DIM)
    out = hooks.causal_conv1d_fn_around(None, x[:, :sum(lens)].contiguous(), weight, None, query_start_loc=qsl,
                                      cache_indices=torch.arange(len(lens)), conv_states=cuda_layout_view(pool),
                                      activation=None, seq_lens_cpu=lens)
    assert out.shape == (DIM, sum(lens))


@pytest.mark.parametrize("lens,needle", [([2, -1], r"seq_lens_cpu=\[2, -1\]"), ([3, 3], r"seq_lens_cpu=\[3, 3\]")])
def test_seq_lens_check_rejects_negative_and_too_many(lens, needle):
    x, weight, qsl = _case()
    pool = torch.zeros(2, 2, DIM)
    with pytest.raises(ValueError, match="^causal_conv1d_fn: " + needle + r": expected non-negative lengths summing to "
                                         r"at most the 5 "):
        hooks.causal_conv1d_fn_around(None, x, weight, None, query_start_loc=qsl, cache_indices=torch.arange(2),
                                    conv_states=cuda_layout_view(pool), activation=None, seq_lens_cpu=lens)


def test_seq_lens_check_only_reads_2d_inputs():
    """A 3-D x is not the packed [dim, tokens] layout the check is about: no verdict on it."""
    hooks.check_host_seq_lens([100], torch.zeros(1, DIM, 5))
    hooks.check_host_seq_lens([100], "not a tensor")
    with pytest.raises(ValueError, match=r"^causal_conv1d_fn: seq_lens_cpu=\[100\]: expected "):
        hooks.check_host_seq_lens([100], torch.zeros(DIM, 5))


# ------------------------------------------------------------------ prefill checks and defaults

def _fn(x, weight, qsl, **kw):
    return ops.causal_conv1d_fn(x, weight, None, qsl, activation=None, **kw)


@pytest.mark.parametrize("change,needle", [
    (dict(x=torch.zeros(2, DIM, 5)), "x=shape (2, 16, 5) float32: expected shape (dim, total_tokens)"),
    (dict(qsl=torch.tensor([0.0, 5.0])), "query_start_loc.dtype=torch.float32: expected an integer index dtype"),
    (dict(has_initial_state=torch.tensor([True, False])),
     "conv_states=None: expected the states to read the initial states from (has_initial_state is given)"),
])
def test_prefill_input_errors_say_what_was_expected(change, needle):
    x, weight, qsl = _case()
    args = dict(x=x, qsl=qsl)
    args.update({k: v for k, v in change.items() if k in args})
    extra = {k: v for k, v in change.items() if k not in args}
    with pytest.raises(ValueError, match="^causal_conv1d_fn: " + re.escape(needle)):
        _fn(args["x"], weight, args["qsl"], **extra)


def test_an_empty_sequence_may_share_a_slot_with_a_live_one():
    """Only non-empty sequences own their slot: an empty one naming the same slot is no race."""
    x, weight, _ = _case()
    qsl = torch.tensor([0, 0, 5], dtype=torch.int32)
    pool = torch.zeros(2, 2, DIM)
    out = _fn(x, weight, qsl, cache_indices=torch.tensor([1, 1]), conv_states=cuda_layout_view(pool))
    assert out.shape == x.shape
    torch.testing.assert_close(pool[1], x[:, 3:].t())
    with pytest.raises(ValueError, match=re.escape("causal_conv1d_fn: cache_indices=[1, 1]: expected distinct slots")):
        _fn(x, weight, torch.tensor([0, 2, 5], dtype=torch.int32), cache_indices=torch.tensor([1, 1]),
            conv_states=cuda_layout_view(torch.zeros(2, 2, DIM)))


def test_without_cache_indices_sequence_b_uses_slot_b():
    x, weight, qsl = _case()
    pool = torch.zeros(3, 2, DIM)
    out = _fn(x, weight, qsl, conv_states=cuda_layout_view(pool))
    ref_pool = torch.zeros(3, 2, DIM)
    ref = _fn(x, weight, qsl, cache_indices=torch.tensor([0, 1]), conv_states=cuda_layout_view(ref_pool))
    assert torch.equal(out, ref) and torch.equal(pool, ref_pool)
    torch.testing.assert_close(pool[1], x[:, 3:].t())
    assert torch.count_nonzero(pool[2]) == 0


# ------------------------------------------------------------------ every refusal text, exactly

def _exact(text):
    return "^" + re.escape(text) + "$"


def test_refusal_texts_say_what_was_expected():
    x, weight, qsl = _case()
    with pytest.raises(ValueError, match=_exact("causal_conv1d_fn: block_table=shape (1,) float32: expected None "
                                                "(chunk block tables are not supported by the Ascend short-conv "
                                                "path)")):
        ops.causal_conv1d_fn(x, weight, None, qsl, block_table=torch.zeros(1))
    with pytest.raises(ValueError, match=_exact("causal_conv1d_fn: x=[1.0, 2.0]: expected shape (dim, T) or "
                                                "(batch, dim, seqlen) when query_start_loc is None")):
        ops.causal_conv1d_fn([1.0, 2.0], weight)
    with pytest.raises(ValueError, match=_exact(f"causal_conv1d_fn: conv_states=[0.0]: expected shape (slots, "
                                                f"dim={DIM}, state_len>=2)")):
        ops.causal_conv1d_fn(x, weight, None, qsl, conv_states=[0.0])
    with pytest.raises(ValueError, match=_exact(f"causal_conv1d_fn: weight=shape ({DIM}, 1) float32: expected a "
                                                f"filter width >= 2 (shape ({DIM}, width))")):
        ops.causal_conv1d_fn(x, weight[:, :1].contiguous(), None, qsl)
    state = torch.zeros(1, DIM, 2)
    with pytest.raises(ValueError, match=_exact("causal_conv1d_update: x=None: expected shape (batch, dim) or "
                                                "(batch, dim, seqlen)")):
        ops.causal_conv1d_update(None, state, weight)
    with pytest.raises(ValueError, match=_exact(f"causal_conv1d_update: conv_state=shape (1, {DIM}, 2) float32: "
                                                "expected at least batch (2) slots when conv_state_indices is None")):
        ops.causal_conv1d_update(torch.randn(2, DIM), state, weight)
