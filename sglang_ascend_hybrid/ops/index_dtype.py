"""The one rule for index tensors (slots, offsets, lengths) of every plugin op: an integer
dtype.  ``bool`` is refused by name: a bool mask indexed as rows reads True as row 1 and
False as row 0, which silently writes the wrong slots."""

from __future__ import annotations

import torch

from sglang_ascend_hybrid.ops.errors import bad_input
from sglang_ascend_hybrid.ops.signature import dtype_name

INDEX_DTYPES = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)


def is_index_dtype(dtype: torch.dtype) -> bool:
    return dtype in INDEX_DTYPES


INDEX_EXPECTED = f"an integer index dtype ({', '.join(dtype_name(d) for d in INDEX_DTYPES)})"


def check_index_dtype(name: str, t: torch.Tensor, *, op: str = "") -> None:
    """Raise :func:`~sglang_ascend_hybrid.ops.errors.bad_input` naming ``<name>.dtype`` unless ``t`` has
    an index dtype."""
    if not is_index_dtype(t.dtype):
        why = "a bool mask is not an index" if t.dtype == torch.bool else "indices are whole numbers"
        raise bad_input(f"{name}.dtype", t.dtype, f"{INDEX_EXPECTED}; {why}", op=op)
