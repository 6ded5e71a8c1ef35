"""Property fuzz of the plugin's conv ops on every rung with the emulated kernels, against the
independent fp64 oracle (:mod:`tests.ops.conv.conv_oracle`): random valid inputs (empty batches,
zero-length and all-padding sequences, draft-window pools, both layouts) give the oracle's
outputs and a bit-identical pool on every rung that can serve them, and a rung that cannot
is refused up front with the pool untouched; malformed values give a ValueError naming the
argument on every rung, with the pool bit-identical."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang_ascend_hybrid.emulators import causal_conv1d as emu
from sglang_ascend_hybrid.integration.conv_state_layout import cuda_layout_view
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.conv import api as ops
from sglang_ascend_hybrid.ops.conv import dispatch as conv_dispatch
from sglang_ascend_hybrid.ops.ladder import ForcedRungUnavailable
from tests.ops.conv.conv_oracle import (
    assert_close_to_oracle,
    forced_backend,
    naive_causal_conv1d_fn,
    naive_causal_conv1d_update,
)

FN_RUNGS = ("npu_v2", "npu_aclnn", "torch")
UPDATE_RUNGS = ("npu_v2", "npu_aclnn", "npu_update_v2", "torch")
SETTINGS = dict(derandomize=True, deadline=None, max_examples=60,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])



def _pool(draw, dtype, width, dim, gen):
    """A state view: the last W-1 rows of a window-major pool (maybe with draft rows), or a
    CUDA-layout channel-major pool."""
    slots = draw(st.integers(1, 6))
    layout = draw(st.sampled_from(["window", "draft", "channel"]))
    if layout == "channel":
        pool = torch.randn(slots, dim, width - 1, generator=gen).to(dtype)
        return pool, pool
    extra = 0 if layout == "window" else draw(st.integers(1, 2))
    pool = torch.randn(slots, width - 1 + extra, dim, generator=gen).to(dtype)
    return pool, cuda_layout_view(pool, width - 1)


def _slots_for(draw, batch, slots):
    """Distinct slots or pad (-1) per sequence."""
    perm = draw(st.permutations(list(range(slots))))
    return [perm[i] if i < slots and draw(st.booleans()) else -1 for i in range(batch)]


@st.composite
def fn_case(draw):
    seed = draw(st.integers(0, 2 ** 16))
    gen = torch.Generator().manual_seed(seed)
    dtype = draw(st.sampled_from([torch.float16, torch.bfloat16, torch.float32]))
    width = draw(st.integers(2, 4))
    dim = draw(st.sampled_from([8, 24, 32]))
    pool, view = _pool(draw, dtype, width, dim, gen)
    batch = draw(st.integers(0, 4))
    lens = [draw(st.integers(0, 5)) for _ in range(batch)]
    idx = _slots_for(draw, batch, pool.shape[0])
    his = draw(st.one_of(st.none(), st.lists(st.booleans(), min_size=batch, max_size=batch)))
    x = torch.randn(dim, sum(lens), generator=gen).to(dtype)
    weight = (torch.randn(dim, width, generator=gen) * 0.5).to(dtype)
    bias = draw(st.one_of(st.none(), st.just((torch.randn(dim, generator=gen) * 0.1).to(dtype))))
    qsl = torch.tensor([0] + torch.tensor(lens, dtype=torch.int64).cumsum(0).tolist(), dtype=torch.int32)
    return dict(x=x, weight=weight, bias=bias, qsl=qsl, idx=torch.tensor(idx, dtype=torch.int32),
                his=None if his is None else torch.tensor(his, dtype=torch.bool), pool=pool, view=view,
                silu=draw(st.booleans()), dtype=dtype, width=width)


@st.composite
def update_case(draw):
    seed = draw(st.integers(0, 2 ** 16))
    gen = torch.Generator().manual_seed(seed)
    dtype = draw(st.sampled_from([torch.float16, torch.bfloat16, torch.float32]))
    width = draw(st.integers(2, 4))
    dim = draw(st.sampled_from([8, 24, 32]))
    pool, view = _pool(draw, dtype, width, dim, gen)
    batch = draw(st.integers(0, 4))
    idx = _slots_for(draw, batch, pool.shape[0])
    length = draw(st.sampled_from([None, 1, 2, 3]))
    shape = (batch, dim) if length is None else (batch, dim, length)
    x = torch.randn(*shape, generator=gen).to(dtype)
    weight = (torch.randn(dim, width, generator=gen) * 0.5).to(dtype)
    bias = draw(st.one_of(st.none(), st.just((torch.randn(dim, generator=gen) * 0.1).to(dtype))))
    return dict(x=x, weight=weight, bias=bias, idx=torch.tensor(idx, dtype=torch.int32), pool=pool,
                view=view, silu=draw(st.booleans()), dtype=dtype, width=width)


def _run_fn(c, view):
    return ops.causal_conv1d_fn(c["x"], c["weight"], c["bias"], query_start_loc=c["qsl"],
                                cache_indices=c["idx"], has_initial_state=c["his"], conv_states=view,
                                activation="silu" if c["silu"] else None)


def _run_update(c, view):
    return ops.causal_conv1d_update(c["x"], view, c["weight"], c["bias"], "silu" if c["silu"] else None,
                                    conv_state_indices=c["idx"])


def _same_view(c, pool):
    return pool if c["view"] is c["pool"] else cuda_layout_view(pool, c["width"] - 1)


@settings(**SETTINGS)
@given(c=fn_case(), variant=st.sampled_from(sorted(emu.VARIANTS)))
def test_fn_valid_inputs_every_rung_matches_oracle(c, variant):
    expect, scale, expect_view = naive_causal_conv1d_fn(c["x"], c["weight"], c["bias"], c["qsl"], c["idx"], c["his"],
                                           c["view"], c["silu"])
    for rung in FN_RUNGS:
        conv_dispatch.reset_state()
        pool = c["pool"].clone()
        with seam.install_emulators(emu.emulators(**emu.VARIANTS[variant])), forced_backend(rung):
            try:
                out = _run_fn(c, _same_view(c, pool))
            except ForcedRungUnavailable:
                assert rung != "torch" and c["x"].shape[1] > 0 and c["qsl"].shape[0] > 1
                assert torch.equal(pool, c["pool"]), f"{rung} refused but wrote the pool"
                continue
        assert out.shape == c["x"].shape and out.dtype == c["x"].dtype
        gscale = (float(c["x"].abs().max() * c["weight"].abs().max()) * c["width"]
                  if c["x"].numel() else 0.0)
        assert_close_to_oracle(out, expect, scale, c["dtype"], f"fn {rung} {variant}", gscale)
        assert torch.equal(_same_view(c, pool), expect_view), f"fn {rung} {variant}: state differs"
        assert torch.equal(pool, _oracle_pool(c, expect_view)), f"fn {rung}: rows outside the state changed"


def _oracle_pool(c, expect_view):
    """The whole expected pool: the original with only the state rows replaced."""
    pool = c["pool"].clone()
    _same_view(c, pool).copy_(expect_view)
    return pool


@settings(**SETTINGS)
@given(c=update_case(), variant=st.sampled_from(sorted(emu.VARIANTS)))
def test_update_valid_inputs_every_rung_matches_oracle(c, variant):
    expect, scale, expect_view = naive_causal_conv1d_update(
            c["x"], c["view"], c["weight"], c["bias"], c["idx"], c["silu"])
    x_before = c["x"].clone()
    for rung in UPDATE_RUNGS:
        conv_dispatch.reset_state()
        pool = c["pool"].clone()
        with seam.install_emulators(emu.emulators(**emu.VARIANTS[variant])), forced_backend(rung):
            try:
                out = _run_update(c, _same_view(c, pool))
            except ForcedRungUnavailable:
                assert rung != "torch"
                assert torch.equal(pool, c["pool"])
                continue
        assert torch.equal(c["x"], x_before), f"{rung} overwrote the caller's x"
        assert out.shape == c["x"].shape and out.dtype == c["x"].dtype
        assert_close_to_oracle(out, expect, scale, c["dtype"], f"update {rung} {variant}")
        assert torch.equal(pool, _oracle_pool(c, expect_view)), f"update {rung} {variant}: pool differs"


@st.composite
def malformed_fn(draw):
    c = draw(fn_case())
    slots = c["pool"].shape[0]
    lens = (c["qsl"][1:] - c["qsl"][:-1]).tolist()
    kinds = ["slot_high", "slot_negative", "qsl_past_end", "qsl_decreasing"]
    if sum(1 for n in lens if n > 0) >= 2:
        kinds.append("duplicate")
    if not lens:
        kinds = ["qsl_past_end"]
    kind = draw(st.sampled_from(kinds))
    idx, qsl = c["idx"].clone(), c["qsl"].clone()
    if kind == "slot_high":
        idx[draw(st.integers(0, len(lens) - 1))] = slots + draw(st.integers(0, 3))
        arg = "cache_indices"
    elif kind == "slot_negative":
        idx[draw(st.integers(0, len(lens) - 1))] = -2
        arg = "cache_indices"
    elif kind == "duplicate":
        live = [i for i, n in enumerate(lens) if n > 0]
        idx[live[0]], idx[live[1]] = 0, 0
        arg = "cache_indices"
    elif kind == "qsl_past_end":
        qsl[-1] = qsl[-1] + draw(st.integers(1, 3))
        arg = "query_start_loc"
    else:
        qsl[1:] = qsl[1:].flip(0) if len(lens) > 1 and lens[0] != lens[-1] else qsl[1:] - 1
        if bool((qsl[1:] >= qsl[:-1]).all()) and int(qsl[0]) >= 0:
            qsl[0] = -1
        arg = "query_start_loc"
    c.update(idx=idx, qsl=qsl)
    return c, arg


@settings(**SETTINGS)
@given(case=malformed_fn(), variant=st.sampled_from(sorted(emu.VARIANTS)))
def test_fn_malformed_values_raise_on_every_rung_pool_untouched(case, variant):
    c, arg = case
    for rung in FN_RUNGS:
        pool = c["pool"].clone()
        with seam.install_emulators(emu.emulators(**emu.VARIANTS[variant])), forced_backend(rung):
            with pytest.raises(ValueError, match=rf"^causal_conv1d_fn: {arg}=\[.*\]: expected "):
                _run_fn(c, _same_view(c, pool))
        assert torch.equal(pool, c["pool"]), f"{rung}: pool written before the ValueError"


@st.composite
def malformed_update(draw):
    c = draw(update_case().filter(lambda c: c["x"].shape[0] > 0))
    batch, slots = c["x"].shape[0], c["pool"].shape[0]
    kinds = ["slot_high", "slot_negative"] + (["duplicate"] if batch >= 2 else [])
    kind = draw(st.sampled_from(kinds))
    idx = c["idx"].clone()
    at = draw(st.integers(0, batch - 1))
    if kind == "slot_high":
        idx[at] = slots + draw(st.integers(0, 3))
    elif kind == "slot_negative":
        idx[at] = -3
    else:
        idx[0], idx[1] = 0, 0
    c.update(idx=idx)
    return c


@settings(**SETTINGS)
@given(c=malformed_update(), variant=st.sampled_from(sorted(emu.VARIANTS)))
def test_update_malformed_values_raise_on_every_rung_pool_untouched(c, variant):
    for rung in UPDATE_RUNGS:
        pool = c["pool"].clone()
        with seam.install_emulators(emu.emulators(**emu.VARIANTS[variant])), forced_backend(rung):
            with pytest.raises(ValueError, match=r"^causal_conv1d_update: conv_state_indices=\[.*\]: expected "):
                _run_update(c, _same_view(c, pool))
        assert torch.equal(pool, c["pool"])
