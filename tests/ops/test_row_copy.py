"""``ops.row_copy.index_copy_rows_``: the result of ``index_copy_(0, ...)`` bit for bit, through
16-byte words on CPU where the rows allow it, and the plain op everywhere else."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from sglang_ascend_hybrid.ops.conv import torch_impl as ref
from sglang_ascend_hybrid.ops.row_copy import index_copy_rows_


class _IndexCopyDtypes(TorchDispatchMode):
    """Records the dtype of every ``index_copy_`` dispatched."""

    def __init__(self):
        super().__init__()
        self.dtypes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket in (torch.ops.aten.index_copy_, torch.ops.aten.index_copy):
            self.dtypes.append(args[0].dtype)
        return func(*args, **(kwargs or {}))


def _bits(shape, dtype, gen):
    """Random bit patterns (NaN payloads, infinities and subnormals included) as ``dtype``."""
    raw = torch.randint(-2 ** 15, 2 ** 15, shape, generator=gen, dtype=torch.int32).to(torch.int16)
    return raw.view(dtype)      # the last dim scales with the element size


def _check(target, index, source, words: bool):
    expected = target.clone().index_copy_(0, index, source)
    with _IndexCopyDtypes() as seen:
        got = index_copy_rows_(target, index, source)
    assert got is target
    as_bytes = (lambda t: t.contiguous().view(torch.uint8))
    assert torch.equal(as_bytes(target), as_bytes(expected))          # bit for bit
    assert seen.dtypes == [torch.complex128 if words else target.dtype]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.int8])
def test_rows_copied_as_words_bit_for_bit(dtype):
    gen = torch.Generator().manual_seed(0)
    pool = _bits((11, 3, 64), dtype, gen)
    rows = _bits((5, 3, 64), dtype, gen)
    _check(pool, torch.tensor([7, 0, 10, 3, 4]), rows, words=True)


def test_row_slices_of_a_window_major_pool_use_words():
    """``pool[:, :2]`` of ``[slots, 3, dim]``: strided rows, still whole words."""
    gen = torch.Generator().manual_seed(1)
    pool = _bits((9, 3, 32), torch.bfloat16, gen)
    before = pool.clone()
    _check(pool[:, :2], torch.tensor([8, 1]), _bits((2, 2, 32), torch.bfloat16, gen), words=True)
    assert torch.equal(pool[:, 2], before[:, 2])                       # the third row untouched


@pytest.mark.parametrize("case", ["odd last dim", "transposed", "one dim", "mixed dtypes"])
def test_plain_index_copy_where_rows_are_not_whole_words(case):
    gen = torch.Generator().manual_seed(2)
    index = torch.tensor([2, 0])
    if case == "odd last dim":          # 3 bf16 = 6 bytes per row end
        target, source = _bits((4, 5, 3), torch.bfloat16, gen), _bits((2, 5, 3), torch.bfloat16, gen)
    elif case == "transposed":          # a dim-major view: last dim not contiguous
        target = _bits((4, 16, 8), torch.bfloat16, gen).transpose(1, 2)
        source = _bits((2, 8, 16), torch.bfloat16, gen)
    elif case == "one dim":             # dim 0 is the last dim: a view would change the rows
        index = torch.tensor([9, 0, 63, 17, 5, 40, 2, 33])     # 8 bf16 = one 16-byte word
        target, source = _bits((64,), torch.bfloat16, gen), _bits((8,), torch.bfloat16, gen)
    else:                               # int32 rows into float32 ones: index_copy_'s own dtype
        target = torch.zeros(4, 8)      # error, never the same-sized words copied bit for bit
        source = torch.ones(2, 8, dtype=torch.int32)
        with pytest.raises(RuntimeError):
            index_copy_rows_(target, index, source)
        return
    _check(target, index, source, words=False)


def test_plain_index_copy_off_cpu():
    target = torch.empty(4, 2, 8, device="meta", dtype=torch.bfloat16)
    with _IndexCopyDtypes() as seen:
        index_copy_rows_(target, torch.tensor([1], device="meta"),
                         torch.empty(1, 2, 8, device="meta", dtype=torch.bfloat16))
    assert seen.dtypes == [torch.bfloat16]


def test_decode_step_writes_the_window_major_pool_as_words():
    """The short-conv decode rung's one state write takes the fast path on a window-major pool."""
    gen = torch.Generator().manual_seed(3)
    dim, width, batch = 64, 4, 5
    pool = torch.randn(8, width - 1, dim, generator=gen).to(torch.bfloat16)     # window-major
    x = torch.randn(batch, dim, generator=gen).to(torch.bfloat16)
    weight = torch.randn(dim, width, generator=gen).to(torch.bfloat16)
    with _IndexCopyDtypes() as seen:
        ref.causal_conv1d_update_torch(x, pool.transpose(1, 2), weight, None, None,
                                       torch.tensor([3, 0, -1, 7, 5]), check_values=False)
    assert seen.dtypes == [torch.complex128]
