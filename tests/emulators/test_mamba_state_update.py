"""The commit emulator copies physical memory, as sgl-kernel-npu's ``move_intermediate_cache`` does."""

from __future__ import annotations

import pytest
import torch

from sglang_ascend_hybrid.emulators.mamba_state_update import (
    DST_LENGTH_TEXT,
    SRC_LENGTH_TEXT,
    emulate_move_intermediate_cache,
)
from sglang_ascend_hybrid.ops.errors import EmulatorContractViolation

L, SLOTS, D, H, V, K = 2, 5, 3, 2, 4, 4


def _scratch(dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return torch.randn(L, SLOTS, D, H, V, K, generator=g).to(dtype)


def _pool(dtype=torch.float32):
    return torch.randn(L, SLOTS, H, V, K, generator=torch.Generator().manual_seed(1)).to(dtype)


def test_a_contiguous_pool_receives_the_accepted_step():
    scratch, pool = _scratch(), _pool()
    before = pool.clone()
    dst, src, steps = torch.tensor([3, 1, 4]), torch.tensor([0, 1, SLOTS - 1]), torch.tensor([2, -1, 0])
    emulate_move_intermediate_cache(pool, scratch, dst, src, steps)
    assert torch.equal(pool[:, 3], scratch[:, 0, 2])
    assert torch.equal(pool[:, 4], scratch[:, SLOTS - 1, 0])  # any scratch row (SLOTS > draft)
    for untouched in (0, 1, 2):  # a negative step is skipped; other slots keep their bits
        assert torch.equal(pool[:, untouched], before[:, untouched])


def test_a_transposed_destination_view_gets_the_scratch_bytes_not_a_logical_copy():
    """SGLang 0.5.20's speculative NPU pool is ``temporal.transpose(-1, -2)``: the kernel ignores the
    view's element strides, so the physical (contiguous) pool receives the scratch's bytes as laid out."""
    scratch, physical = _scratch(), _pool()
    view = physical.transpose(-1, -2)  # logically [.., K, V]
    emulate_move_intermediate_cache(view, scratch, torch.tensor([2]), torch.tensor([1]), torch.tensor([1]))
    assert torch.equal(physical[:, 2], scratch[:, 1, 1])  # bytes in the scratch's order
    assert not torch.equal(view[:, 2], scratch[:, 1, 1])  # a logical copy would have put them here


def test_the_store_converts_to_the_destination_dtype():
    scratch, pool = _scratch(torch.float32), _pool(torch.bfloat16)
    emulate_move_intermediate_cache(pool, scratch, torch.tensor([0]), torch.tensor([0]), torch.tensor([0]))
    assert pool.dtype == torch.bfloat16 and torch.equal(pool[:, 0], scratch[:, 0, 0].bfloat16())


@pytest.mark.parametrize("dst,src,step", [(SLOTS, 0, 0), (0, SLOTS, 0), (0, 0, D), (-1, 0, 0)])
def test_an_index_outside_the_tensors_is_a_violation(dst, src, step):
    with pytest.raises(EmulatorContractViolation, match="out of bounds"):
        emulate_move_intermediate_cache(_pool(), _scratch(), torch.tensor([dst]), torch.tensor([src]),
                                        torch.tensor([step]))


def test_a_destination_smaller_than_the_scratch_rows_is_a_violation():
    """Raw offsets past the destination's storage (a pool with fewer heads than the scratch)."""
    pool = torch.zeros(L, SLOTS, 1, V, K)
    with pytest.raises(EmulatorContractViolation, match=r"elements \[144, 176\) are outside the tensor's storage"):
        emulate_move_intermediate_cache(pool, _scratch(), torch.tensor([SLOTS - 1]), torch.tensor([0]),
                                        torch.tensor([0]))


def test_index_vectors_of_different_lengths_are_refused_with_the_host_texts():
    with pytest.raises(AssertionError, match=DST_LENGTH_TEXT):
        emulate_move_intermediate_cache(_pool(), _scratch(), torch.tensor([0, 1]), torch.tensor([0]),
                                        torch.tensor([0]))
    with pytest.raises(AssertionError, match=SRC_LENGTH_TEXT):
        emulate_move_intermediate_cache(_pool(), _scratch(), torch.tensor([0]), torch.tensor([0, 1]),
                                        torch.tensor([0]))
