"""Writing per-row states into a pool without a host sync or a data-dependent shape."""

from __future__ import annotations

import torch


def scatter_agreeing(target: torch.Tensor, rows: torch.Tensor, valid: torch.Tensor, values: torch.Tensor) -> None:
    """``target[rows[i]] = values[i]`` for the valid entries, in one static-shape ``index_copy_``.

    ``rows`` must be in range for every entry (clamp padding first).  Invalid entries write row 0
    with the value row 0 ends up with (a valid entry's value if one owns row 0, else its current
    value), so duplicate writes agree whatever their order.  ``values`` is overwritten in place
    for the invalid entries (callers pass fresh tensors)."""
    owns0 = valid & (rows == 0)
    owner = owns0.to(torch.int32).argmax()
    fill = torch.where(owns0.any(), values.index_select(0, owner.view(1))[0], target[0].to(values.dtype))
    mask = valid.view(-1, *([1] * (values.dim() - 1)))
    torch.where(mask, values, fill, out=values)
    target.index_copy_(0, torch.where(valid, rows, torch.zeros_like(rows)),
                       values if values.dtype == target.dtype else values.to(target.dtype))
