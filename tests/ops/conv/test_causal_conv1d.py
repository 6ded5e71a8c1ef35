"""Plugin causal_conv1d_fn / causal_conv1d_update (torch path) against SGLang's own
Triton kernels run on CPU under TRITON_INTERPRET=1 (fp32), on contiguous CUDA-layout
states and on transposed views of a window-major NPU-style pool."""

from __future__ import annotations

import re

import pytest
import torch
from sglang.kernels.ops.mamba.causal_conv1d_triton import (
    causal_conv1d_fn as triton_fn,
)
from sglang.kernels.ops.mamba.causal_conv1d_triton import (
    causal_conv1d_update as triton_update,
)

from sglang_ascend_hybrid.integration.conv_state_layout import cuda_layout_view, shares_storage
from sglang_ascend_hybrid.ops.conv.api import causal_conv1d_fn, causal_conv1d_update

DIM = 24
SLOTS = 9
# sequence 1 is padded (slot -1), sequence 2 has zero length, sequence 3 is
# shorter than W-1 for W = 3, 4; has_initial_state is mixed.
LENS = [6, 3, 0, 1, 9, 2]
SLOT_IDS = [1, -1, 4, 6, 7, 2]
HAS_INIT = [True, True, True, False, True, False]


def _states(kind: str, width: int, gen: torch.Generator):
    """(conv_states [slots, dim, W-1] for the op, backing storage to compare)."""
    s = width - 1
    if kind == "cuda":
        t = torch.randn(SLOTS, DIM, s, generator=gen)
        return t, t
    pool = torch.randn(2, SLOTS, s, DIM, generator=gen)  # [layers, slots, window, dim]
    return cuda_layout_view(pool[1]), pool


def _varlen(gen):
    qsl = torch.tensor([0] + torch.tensor(LENS).cumsum(0).tolist(), dtype=torch.int32)
    x = torch.randn(DIM, sum(LENS), generator=gen)
    return x, qsl


def _real_token_mask():
    mask = torch.ones(sum(LENS), dtype=torch.bool)
    start = sum(LENS[:1])
    mask[start:start + LENS[1]] = False  # padded sequence: output unspecified
    return mask


@pytest.mark.parametrize("width", [2, 3, 4])
@pytest.mark.parametrize("layout", ["cuda", "window_major"])
@pytest.mark.parametrize("activation", [None, "silu"])
@pytest.mark.parametrize("with_bias", [True, False])
def test_fn_matches_triton(width, layout, activation, with_bias):
    gen = torch.Generator().manual_seed(width * 10 + (layout == "cuda"))
    x, qsl = _varlen(gen)
    weight = torch.randn(DIM, width, generator=gen)
    bias = torch.randn(DIM, generator=gen) if with_bias else None
    idx = torch.tensor(SLOT_IDS, dtype=torch.int32)
    his = torch.tensor(HAS_INIT)
    ours_states, ours_backing = _states(layout, width, gen)
    ref_backing = ours_backing.clone()
    ref_states = ref_backing if layout == "cuda" else cuda_layout_view(ref_backing[1])
    before = ours_backing.clone()

    out = causal_conv1d_fn(x, weight, bias, query_start_loc=qsl, cache_indices=idx,
                           has_initial_state=his, conv_states=ours_states, activation=activation)
    ref = triton_fn(x, weight, bias, ref_states, qsl, LENS, cache_indices=idx,
                    has_initial_state=his, activation=activation)

    mask = _real_token_mask()
    torch.testing.assert_close(out[:, mask], ref[:, mask], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours_backing, ref_backing, rtol=0, atol=0)
    # untouched: padded sequence, zero-length sequence, slots outside the batch, other layer
    if layout == "window_major":
        torch.testing.assert_close(ours_backing[0], before[0], rtol=0, atol=0)
        view_before = cuda_layout_view(before[1])
    else:
        view_before = before
    for slot in {0, 3, 4, 5, 8}:
        torch.testing.assert_close(ours_states[slot], view_before[slot], rtol=0, atol=0)
    # the state of a real sequence did change
    assert not torch.equal(ours_states[7], view_before[7])


def test_fn_short_sequence_state_matches_plain_loop():
    """Independent plain-loop reference of the final-state rule for a 1-token sequence."""
    gen = torch.Generator().manual_seed(3)
    width, s = 4, 3
    pool = torch.randn(1, 4, s, DIM, generator=gen)
    view = cuda_layout_view(pool[0])
    old = view[2].clone()
    x = torch.randn(DIM, 1, generator=gen)
    weight = torch.randn(DIM, width, generator=gen)
    out = causal_conv1d_fn(x, weight, None, query_start_loc=torch.tensor([0, 1], dtype=torch.int32),
                           cache_indices=torch.tensor([2]), has_initial_state=torch.tensor([True]),
                           conv_states=view, activation=None)
    window = torch.cat([old, x], dim=1)  # [dim, W]
    expect = (window * weight).sum(1, keepdim=True)
    torch.testing.assert_close(out, expect, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(pool[0, 2], torch.cat([old[:, 1:], x], 1).t(), rtol=0, atol=0)


@pytest.mark.parametrize("width", [2, 3, 4])
@pytest.mark.parametrize("layout", ["cuda", "window_major"])
@pytest.mark.parametrize("seqlen", [None, 1, 3])
def test_update_matches_triton(width, layout, seqlen):
    gen = torch.Generator().manual_seed(100 + width)
    batch = 5
    x = torch.randn(batch, DIM, generator=gen) if seqlen is None else torch.randn(batch, DIM, seqlen, generator=gen)
    weight = torch.randn(DIM, width, generator=gen)
    bias = torch.randn(DIM, generator=gen)
    idx = torch.tensor([3, -1, 0, 8, 5], dtype=torch.int32)
    ours_states, ours_backing = _states(layout, width, gen)
    ref_backing = ours_backing.clone()
    ref_states = ref_backing if layout == "cuda" else cuda_layout_view(ref_backing[1])
    before = ours_states.clone()
    for _ in range(3):  # several decode steps
        out = causal_conv1d_update(x, ours_states, weight, bias, activation="silu", conv_state_indices=idx)
        ref = triton_update(x, ref_states, weight, bias, activation="silu", conv_state_indices=idx)
        keep = torch.tensor([True, False, True, True, True])
        torch.testing.assert_close(out[keep], ref[keep], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(ours_backing, ref_backing, rtol=0, atol=0)
        x = x * 0.5 + 0.1
    for slot in (1, 2, 4, 6, 7):
        torch.testing.assert_close(ours_states[slot], before[slot], rtol=0, atol=0)


def test_update_without_indices_matches_triton():
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(3, DIM, generator=gen)
    weight = torch.randn(DIM, 3, generator=gen)
    ours = torch.randn(3, DIM, 2, generator=gen)
    ref = ours.clone()
    out = causal_conv1d_update(x, ours, weight)
    expect = triton_update(x, ref, weight)
    torch.testing.assert_close(out, expect, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours, ref, rtol=0, atol=0)


def test_fn_batched_3d_input_without_query_start_loc():
    gen = torch.Generator().manual_seed(8)
    x = torch.randn(2, DIM, 5, generator=gen)
    weight = torch.randn(DIM, 4, generator=gen)
    states = torch.zeros(2, DIM, 3)
    out = causal_conv1d_fn(x, weight, None, conv_states=states, activation=None,
                           cache_indices=torch.tensor([0, 1]))
    for b in range(2):  # plain per-sequence loop reference
        padded = torch.nn.functional.pad(x[b], (3, 0))
        expect = torch.stack([(padded[:, t:t + 4] * weight).sum(1) for t in range(5)], 1)
        torch.testing.assert_close(out[b], expect, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(states[b], x[b, :, -3:], rtol=0, atol=0)


# --------------------------------------------------------------------------- bad input


def _bad_case():
    gen = torch.Generator().manual_seed(11)
    pool = torch.randn(1, 4, 2, 16, generator=gen)
    return pool, cuda_layout_view(pool[0]), torch.randn(16, 5, generator=gen), torch.randn(16, 3, generator=gen)


@pytest.mark.parametrize("case", ["x_dims", "x_dtype", "weight_dim", "state_dim", "slot_range",
                                  "qsl_len", "activation", "qsl_values", "idx_dtype"])
def test_fn_bad_input_raises_and_leaves_pool_unchanged(case):
    pool, view, x, weight = _bad_case()
    before = pool.clone()
    kwargs = dict(query_start_loc=torch.tensor([0, 2, 5], dtype=torch.int32),
                  cache_indices=torch.tensor([1, 2]), has_initial_state=torch.tensor([True, False]),
                  conv_states=view, activation=None)
    args = [x, weight, None]
    expect = {"x_dims": "x=shape (1, 1, 16, 5) float32: expected shape (dim, total_tokens)",
              "x_dtype": "x.dtype=torch.int32: expected a floating-point dtype",
              "weight_dim": "weight=shape (8, 3) float32: expected shape (16, width)",
              "state_dim": "conv_states=shape (4, 8, 2) float32: expected shape (slots, dim=16, state_len>=2)",
              "slot_range": "cache_indices=[1, 4]: expected slots in [0, 4) or pad_slot_id (-1); 4 is neither",
              "qsl_len": "cache_indices=shape (2,) int64: expected a tensor of shape (1,)",
              "activation": "activation='relu': expected None, 'silu' or 'swish'",
              "qsl_values": "query_start_loc=[0, 4, 9]: expected non-decreasing offsets in [0, 5]",
              "idx_dtype": "cache_indices.dtype=torch.float32: expected an integer index dtype"}[case]
    if case == "x_dims":
        args[0] = x[None, None]
        kwargs["query_start_loc"] = torch.tensor([0, 5])
    elif case == "x_dtype":
        args[0] = x.to(torch.int32)
    elif case == "weight_dim":
        args[1] = torch.randn(8, 3)
    elif case == "state_dim":
        kwargs["conv_states"] = torch.zeros(4, 8, 2)
    elif case == "slot_range":
        kwargs["cache_indices"] = torch.tensor([1, 4])
    elif case == "qsl_len":
        kwargs["query_start_loc"] = torch.tensor([0, 5], dtype=torch.int32)
    elif case == "activation":
        kwargs["activation"] = "relu"
    elif case == "qsl_values":
        kwargs["query_start_loc"] = torch.tensor([0, 4, 9], dtype=torch.int32)
    elif case == "idx_dtype":
        kwargs["cache_indices"] = torch.tensor([1.0, 2.0])
    with pytest.raises(ValueError, match="^causal_conv1d_fn: " + re.escape(expect)):
        causal_conv1d_fn(*args, **kwargs)
    assert torch.equal(pool, before)


@pytest.mark.parametrize("case", ["slot_range", "x_dims", "indices_len", "cache_seqlens", "state_width"])
def test_update_bad_input_raises_and_leaves_pool_unchanged(case):
    pool, view, _, weight = _bad_case()
    before = pool.clone()
    x = torch.randn(2, 16)
    kwargs = dict(conv_state_indices=torch.tensor([1, 2]))
    if case == "slot_range":
        kwargs["conv_state_indices"] = torch.tensor([1, -2])
        match = "conv_state_indices=[1, -2]: expected slots in [0, 4) or pad_slot_id (-1); -2 is neither"
    elif case == "x_dims":
        x = torch.randn(16)
        match = "x=shape (16,) float32: expected shape (batch, dim) or (batch, dim, seqlen)"
    elif case == "indices_len":
        kwargs["conv_state_indices"] = torch.tensor([1, 2, 3])
        match = "conv_state_indices=shape (3,) int64: expected a tensor of shape (2,)"
    elif case == "cache_seqlens":
        kwargs["cache_seqlens"] = torch.tensor([1, 2])
        match = "cache_seqlens=shape (2,) int64: expected None (circular-buffer conv states are not supported"
    else:
        weight = torch.randn(16, 5)
        match = "conv_state=shape (4, 16, 2) float32: expected shape (slots, dim=16, state_len>=4)"
    with pytest.raises(ValueError, match="^causal_conv1d_update: " + re.escape(match)):
        causal_conv1d_update(x, view, weight, **kwargs)
    assert torch.equal(pool, before)


def test_window_major_view_writes_land_in_pool():
    pool = torch.zeros(2, 3, 2, 16)
    view = cuda_layout_view(pool[1])
    assert view.shape == (3, 16, 2) and shares_storage(view, pool)
    causal_conv1d_update(torch.ones(1, 16), view, torch.ones(16, 3), conv_state_indices=torch.tensor([2]))
    assert torch.equal(pool[1, 2, -1], torch.ones(16)) and pool[0].abs().sum() == 0


@pytest.mark.parametrize("his", [None, True, False])
def test_reference_fn_with_every_sequence_empty_returns_empty_and_writes_nothing(his):
    """T == 0 used to crash inside the torch prefill (a gather from an empty x)."""
    from sglang_ascend_hybrid.ops.conv.torch_impl import causal_conv1d_fn_torch

    pool = torch.randn(3, 2, 8)
    before = pool.clone()
    h = None if his is None else torch.tensor([his, his])
    out = causal_conv1d_fn_torch(torch.zeros(8, 0), torch.randn(8, 3), None,
                                 torch.tensor([0, 0, 0], dtype=torch.int32), torch.tensor([0, 2]), h,
                                 cuda_layout_view(pool))
    assert out.shape == (8, 0) and torch.equal(pool, before)


def test_reference_update_without_value_checks_writes_only_live_slots():
    """The capture-safe scatter: pads never write (slot 0 and the first live slot included)."""
    from sglang_ascend_hybrid.ops.conv.torch_impl import causal_conv1d_update_torch

    pool = torch.randn(5, 3, 8)
    before = pool.clone()
    x = torch.randn(4, 8)
    causal_conv1d_update_torch(x, cuda_layout_view(pool), torch.randn(8, 4), None, None,
                               torch.tensor([-1, 3, -1, 1]), check_values=False)
    for slot in (0, 2, 4):
        assert torch.equal(pool[slot], before[slot])
    assert torch.equal(pool[3, 2], x[1]) and torch.equal(pool[1, 2], x[3])
    assert torch.equal(pool[3, :2], before[3, 1:]) and torch.equal(pool[1, :2], before[1, 1:])
    causal_conv1d_update_torch(x, cuda_layout_view(pool), torch.randn(8, 4), None, None,
                               torch.tensor([-1, -1, -1, -1]), check_values=False)
    assert torch.equal(pool[0], before[0])
