"""The torch rungs themselves (``causal_conv1d_fn_torch`` / ``causal_conv1d_update_torch``):
the blocked prefill across many channel blocks, fp16 / bf16 accumulating in fp32 without a
whole-tensor dtype round trip, and the decode's pad-row and capture-safety guarantees.

Outputs are compared with the independent fp64 oracle (:mod:`tests.ops.conv.conv_oracle`) at its
tight bound (half an ulp of the output dtype plus fp32 accumulation error over the summed
terms, no global slack); states must be bit-identical to the oracle's."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from sglang_ascend_hybrid.integration.conv_state_layout import cuda_layout_view
from sglang_ascend_hybrid.ops.conv import torch_impl as ref
from tests.ops.conv.conv_oracle import assert_close_to_oracle, naive_causal_conv1d_fn, naive_causal_conv1d_update
from tests.support.sync_counter import SyncCounter

DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def _pool(layout: str, slots: int, width: int, dim: int, dtype, gen):
    """(backing storage, the [slots, dim, W-1] view the op gets)."""
    s = width - 1
    if layout == "channel":
        pool = torch.randn(slots, dim, s, generator=gen).to(dtype)
        return pool, pool
    draft = 2 if layout == "draft" else 0
    pool = torch.randn(slots, s + draft, dim, generator=gen).to(dtype)    # window-major
    return pool, cuda_layout_view(pool, s)


# Sequence 1 is padding, 2 is empty, 3 and 5 are shorter than W-1 for W = 4 (5 resumes a
# state), the batch starts at token 2 and ends 3 tokens before the end of x.
LENS = [7, 4, 0, 1, 11, 2, 5]
SLOTS = [3, -1, 6, 0, 5, 8, 1]
HAS_INIT = [True, True, True, False, True, True, False]
HEAD, TAIL = 2, 3


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["window", "draft", "channel"])
@pytest.mark.parametrize("width", [2, 4])
@pytest.mark.parametrize("silu,with_bias", [(False, True), (True, False)])
def test_prefill_across_channel_blocks_matches_oracle(monkeypatch, dtype, layout, width, silu, with_bias):
    """Blocks of 3 channels over 40 channels (the last block partial): every block gets its
    heads, its history and its share of the new states right."""
    total = HEAD + sum(LENS) + TAIL
    monkeypatch.setattr(ref, "_BLOCK_ELEMS", 3 * total)
    gen = torch.Generator().manual_seed(width * 7 + len(layout))
    dim = 40
    x = torch.randn(dim, total, generator=gen).to(dtype)
    weight = (torch.randn(dim, width, generator=gen) * 0.5).to(dtype)
    bias = (torch.randn(dim, generator=gen) * 0.1).to(dtype) if with_bias else None
    qsl = torch.tensor([HEAD] + (HEAD + torch.tensor(LENS).cumsum(0)).tolist(), dtype=torch.int32)
    idx, his = torch.tensor(SLOTS, dtype=torch.int32), torch.tensor(HAS_INIT)
    backing, view = _pool(layout, 9, width, dim, dtype, gen)
    before = backing.clone()

    expect, scale, expect_view = naive_causal_conv1d_fn(x, weight, bias, qsl, idx, his, view.clone(), silu)
    out = ref.causal_conv1d_fn_torch(x, weight, bias, qsl, idx, his, view,
                                     "silu" if silu else None, check_values=False)

    assert out.shape == x.shape and out.dtype == dtype
    assert_close_to_oracle(out, expect, scale, dtype, "prefill")
    assert torch.equal(view, expect_view)
    untouched = before.clone()
    (untouched if layout == "channel" else cuda_layout_view(untouched, width - 1)).copy_(expect_view)
    assert torch.equal(backing, untouched), "rows outside the state (draft rows) changed"
    before_view = before if layout == "channel" else cuda_layout_view(before, width - 1)
    for slot in (2, 4, 6, 7):    # outside the batch, or the empty sequence's (6)
        assert torch.equal(view[slot], before_view[slot])


def test_prefill_head_and_tail_tokens_start_from_zero_history():
    """Tokens before query_start_loc[0] and after query_start_loc[-1] are convolved as their
    own sequences with zero history (the old rung's behaviour), not with a neighbour's tokens."""
    gen = torch.Generator().manual_seed(5)
    dim, width = 6, 4
    x = torch.randn(dim, 12, generator=gen)
    weight = torch.randn(dim, width, generator=gen)
    qsl = torch.tensor([3, 8], dtype=torch.int32)
    out = ref.causal_conv1d_fn_torch(x, weight, None, qsl, check_values=False)
    for a, b in ((0, 3), (3, 8), (8, 12)):
        padded = torch.nn.functional.pad(x[:, a:b], (width - 1, 0))
        expect = torch.stack([(padded[:, t:t + width] * weight).sum(1) for t in range(b - a)], 1)
        torch.testing.assert_close(out[:, a:b], expect, rtol=1e-6, atol=1e-6)


class _DtypeChanges(TorchDispatchMode):
    """Largest number of elements any dtype-converting copy produced."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        if func is torch.ops.aten._to_copy.default and "dtype" in kwargs and kwargs["dtype"] != args[0].dtype:
            self.largest = max(self.largest, args[0].numel())
        elif func is torch.ops.aten.copy_.default and args[0].dtype != args[1].dtype:
            self.largest = max(self.largest, args[0].numel())
        return result


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_prefill_half_never_converts_the_whole_tensor(dtype):
    """fp16 / bf16 are widened and rounded one channel block at a time: no conversion is as
    large as x (the old rung converted all of x to fp32 and all of the output back)."""
    gen = torch.Generator().manual_seed(9)
    dim, total = 64, (ref._BLOCK_ELEMS // 16)       # 4 blocks of 16 channels
    x = torch.randn(dim, total, generator=gen).to(dtype)
    weight = (torch.randn(dim, 4, generator=gen) * 0.5).to(dtype)
    bias = (torch.randn(dim, generator=gen) * 0.1).to(dtype)
    qsl = torch.tensor([0, total // 3, total], dtype=torch.int32)
    pool = torch.randn(4, 3, dim, generator=gen).to(dtype)
    with _DtypeChanges() as seen:
        out = ref.causal_conv1d_fn_torch(x, weight, bias, qsl, torch.tensor([2, 0]), torch.tensor([True, False]),
                                         cuda_layout_view(pool), None, check_values=False)
    assert 0 < seen.largest <= x.numel() // 4, seen.largest
    t0 = total // 3                                   # sequence 1: no cached state
    expect, scale, _ = naive_causal_conv1d_fn(
            x[:, t0:t0 + 64], weight, bias, torch.tensor([0, 64]), None, None, None, False)
    assert_close_to_oracle(out[:, t0:t0 + 64], expect, scale, dtype, "first tokens of sequence 1")
    hist = cuda_layout_view(pool)[2].clone()          # sequence 0 (slot 2): its last 3 tokens
    assert torch.equal(hist, x[:, t0 - 3:t0])


def test_prefill_noncontiguous_x_matches_contiguous():
    gen = torch.Generator().manual_seed(10)
    dim, total = 24, 30
    x_t = torch.randn(total, dim, generator=gen)          # token-major memory, as a [dim, T] view
    weight = torch.randn(dim, 3, generator=gen)
    qsl = torch.tensor([0, 4, 5, 30], dtype=torch.int32)
    pool_a = torch.randn(5, 2, dim, generator=gen)
    pool_b = pool_a.clone()
    his = torch.tensor([True, True, False])
    idx = torch.tensor([4, 1, 2])
    a = ref.causal_conv1d_fn_torch(x_t.t(), weight, None, qsl, idx, his, cuda_layout_view(pool_a), "silu")
    b = ref.causal_conv1d_fn_torch(x_t.t().contiguous(), weight, None, qsl, idx, his, cuda_layout_view(pool_b),
                                   "silu")
    assert torch.equal(a, b)
    assert torch.equal(pool_a, pool_b)


# --------------------------------------------------------------------------- decode


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["window", "draft", "channel"])
@pytest.mark.parametrize("length", [None, 1, 3])
def test_decode_matches_oracle_without_a_sync(dtype, layout, length):
    gen = torch.Generator().manual_seed(21 + (length or 0))
    dim, width, batch = 16, 4, 5
    shape = (batch, dim) if length is None else (batch, dim, length)
    x = torch.randn(*shape, generator=gen).to(dtype)
    weight = (torch.randn(dim, width, generator=gen) * 0.5).to(dtype)
    bias = (torch.randn(dim, generator=gen) * 0.1).to(dtype)
    idx = torch.tensor([-1, 4, 0, -1, 6], dtype=torch.int32)  # pads first: they copy row 1
    backing, view = _pool(layout, 8, width, dim, dtype, gen)
    expect, scale, expect_view = naive_causal_conv1d_update(x, view.clone(), weight, bias, idx, True)
    before = backing.clone()
    with SyncCounter() as counter:
        out = ref.causal_conv1d_update_torch(x, view, weight, bias, "silu", idx, check_values=False)
    assert counter.total == 0, dict(counter.counts)
    assert out.shape == x.shape and out.dtype == dtype
    assert_close_to_oracle(out, expect, scale, dtype, "decode")
    assert torch.equal(view, expect_view)
    untouched = before.clone()
    (untouched if layout == "channel" else cuda_layout_view(untouched, width - 1)).copy_(expect_view)
    assert torch.equal(backing, untouched)


@pytest.mark.parametrize("layout", ["window", "channel"])
def test_decode_all_pad_batch_leaves_the_pool_bit_identical(layout):
    """No real row: the rung still writes (fixed shapes), but only the old state back."""
    gen = torch.Generator().manual_seed(31)
    backing, view = _pool(layout, 3, 4, 8, torch.bfloat16, gen)
    before = backing.clone()
    x = torch.randn(4, 8, generator=gen).bfloat16()
    with SyncCounter() as counter:
        ref.causal_conv1d_update_torch(x, view, torch.randn(8, 4).bfloat16(), None, None,
                                       torch.full((4,), -1, dtype=torch.int32), check_values=False)
    assert counter.total == 0
    assert torch.equal(backing, before)


def test_decode_fp32_tokens_into_a_bf16_pool():
    """The output uses the fp32 tokens as given; the state stores them rounded to the pool."""
    gen = torch.Generator().manual_seed(33)
    dim = 12
    pool = torch.randn(4, 3, dim, generator=gen).bfloat16()
    view = cuda_layout_view(pool)
    x = torch.randn(2, dim, generator=gen) * 3
    weight = torch.randn(dim, 4, generator=gen)
    idx = torch.tensor([2, 0])
    expect, scale, expect_view = naive_causal_conv1d_update(x, view.clone(), weight, None, idx, False)
    out = ref.causal_conv1d_update_torch(x, view, weight, None, None, idx, check_values=False)
    assert out.dtype == torch.float32
    assert_close_to_oracle(out, expect, scale, torch.float32, "decode fp32 x, bf16 pool")
    assert torch.equal(view, expect_view)
    assert not torch.equal(x.bfloat16().float(), x)       # the rounding is real


@pytest.mark.parametrize("total", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("width", [2, 4])
def test_prefill_streams_as_short_as_the_filter(total, width):
    """One sequence of 1..W+1 tokens resuming a state: every tap of the stream is needed at the
    last tokens (the stream's tap loop must not stop early when the stream is this short)."""
    gen = torch.Generator().manual_seed(total * 10 + width)
    dim = 6
    x = torch.randn(dim, total, generator=gen)
    weight = torch.randn(dim, width, generator=gen) * 0.5
    bias = torch.randn(dim, generator=gen) * 0.1
    qsl = torch.tensor([0, total], dtype=torch.int32)
    idx, his = torch.tensor([1], dtype=torch.int32), torch.tensor([True])
    states = torch.randn(3, dim, width - 1, generator=gen)
    expect, scale, expect_states = naive_causal_conv1d_fn(x, weight, bias, qsl, idx, his, states.clone(), False)
    out = ref.causal_conv1d_fn_torch(x, weight, bias, qsl, idx, his, states, None, check_values=False)
    assert_close_to_oracle(out, expect, scale, torch.float32, "prefill")
    assert torch.equal(states, expect_states)


@pytest.mark.parametrize("total", [1, 2, 3, 4, 5])
def test_prefill_streams_up_to_one_past_the_width_match_the_definition(total):
    """One sequence of 1..W+1 tokens, fp64 definition: every tap of the stream counts, also the
    last one when the stream is exactly W tokens long (its last column is not a head column)."""
    gen = torch.Generator().manual_seed(total)
    dim, width = 5, 4
    x = torch.randn(dim, total, generator=gen, dtype=torch.float64)
    weight = torch.randn(dim, width, generator=gen, dtype=torch.float64)
    bias = torch.randn(dim, generator=gen, dtype=torch.float64)
    out = ref.causal_conv1d_fn_torch(x, weight, bias, torch.tensor([0, total], dtype=torch.int32),
                                     check_values=False)
    padded = torch.nn.functional.pad(x, (width - 1, 0))
    expect = torch.stack([(padded[:, t:t + width] * weight).sum(1) + bias for t in range(total)], 1)
    torch.testing.assert_close(out, expect, rtol=1e-12, atol=1e-12)
