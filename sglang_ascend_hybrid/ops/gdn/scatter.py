"""Writing per-row states into a pool without a host sync or a data-dependent shape."""

from __future__ import annotations

import torch

from sglang_ascend_hybrid.ops.row_copy import index_copy_rows_


def scatter_live_rows(target: torch.Tensor, rows: torch.Tensor, live: torch.Tensor, values: torch.Tensor) -> None:
    """``target[rows[i]] = values[i]`` for the live entries, with static shapes only.

    ``rows`` must be in range for every entry (clamp padding first); live entries must not share a
    row.  Padding entries are written to row 0 by the same ``index_copy_`` (their values and the
    order of duplicate writes do not matter), then row 0 is written once more, in order, with the
    value it must end with: the live owner's value if row 0 is live, else its content from before
    the scatter.  So no row changes but those of live entries, at the cost of one extra row, never
    a pass over ``values``.  ``values`` is not modified."""
    if rows.numel() == 0:
        return
    owns0 = live & (rows == 0)
    owner = owns0.to(torch.int32).argmax().view(1)
    keep = torch.where(owns0.any(), values.index_select(0, owner).to(target.dtype), target[:1])  # a copy
    index_copy_rows_(target, torch.where(live, rows, torch.zeros_like(rows)),
                     values if values.dtype == target.dtype else values.to(target.dtype))
    target[:1] = keep
