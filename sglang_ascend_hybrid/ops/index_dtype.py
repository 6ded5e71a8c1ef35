"""The one rule for index tensors (slots, offsets, lengths) of every plugin op: an integer
dtype.  ``bool`` is refused by name: a bool mask indexed as rows reads True as row 1 and
False as row 0, which silently writes the wrong slots."""

from __future__ import annotations

import torch

from sglang_ascend_hybrid.ops.signature import dtype_name

INDEX_DTYPES = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)


def is_index_dtype(dtype: torch.dtype) -> bool:
    return dtype in INDEX_DTYPES


def index_dtype_problem(name: str, t: torch.Tensor) -> str | None:
    """None when ``t`` has an index dtype, else one line naming the argument and its dtype."""
    if is_index_dtype(t.dtype):
        return None
    return (f"{name} has dtype {t.dtype}: expected an integer index dtype "
            f"({', '.join(dtype_name(d) for d in INDEX_DTYPES)}); "
            f"{'a bool mask is not an index' if t.dtype == torch.bool else 'indices are whole numbers'}")
