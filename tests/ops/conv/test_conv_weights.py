"""``ops.conv.weights.taps_major``: the ``[width, dim]`` copy of a conv weight is made once and kept, made
again whenever the weight changed, and never kept from inside a graph capture."""

from __future__ import annotations

import torch

from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.conv.weights import taps_major


def _weight(dim=8, width=3, seed=0):
    return torch.randn(dim, width, generator=torch.Generator().manual_seed(seed)).bfloat16()


def test_the_copy_is_the_transpose_made_once_per_weight():
    w = _weight()
    first = taps_major(w)
    assert first.is_contiguous() and torch.equal(first, w.t()) and first.data_ptr() != w.data_ptr()
    assert taps_major(w) is first
    other = _weight(seed=1)
    assert taps_major(other) is not first and torch.equal(taps_major(other), other.t())


def test_an_in_place_change_of_the_weight_makes_a_new_copy():
    w = _weight()
    first = taps_major(w)
    w.mul_(2)                      # a reload in place: the version counter moves
    again = taps_major(w)
    assert again is not first and torch.equal(again, w.t())
    w.data = _weight(seed=2)       # new storage behind the same tensor object
    assert torch.equal(taps_major(w), w.t())


def test_strides_and_dtype_are_part_of_the_identity():
    w = _weight(dim=6)
    taps_major(w)
    as_fp16 = w.half()
    assert taps_major(as_fp16).dtype == torch.float16
    strided = torch.zeros(6, 6, dtype=torch.bfloat16)[:, ::2]   # [6, 3] with strides (6, 2)
    strided.copy_(w)
    assert torch.equal(taps_major(strided), w.t())


def test_a_copy_made_inside_a_capture_is_not_kept():
    w = _weight()
    with seam.capture_region():
        inside = taps_major(w)
    assert torch.equal(inside, w.t())
    outside = taps_major(w)
    assert outside is not inside and taps_major(w) is outside   # kept once made outside the capture
    with seam.capture_region():
        assert taps_major(w) is outside                          # a copy made eagerly serves the capture
