"""The sync counter sees what it must see (else every zero-sync claim would be vacuous)."""

import torch

from tests.support.sync_counter import SyncCounter


def test_counts_item_nonzero_bool_and_mask_indexing():
    x = torch.arange(6.0)
    with SyncCounter() as c:
        x.sum().item()
        x.nonzero()
        bool((x > 2).any())
        x[x > 2]
    assert c.counts["aten._local_scalar_dense.default"] == 2
    assert c.counts["aten.nonzero.default"] == 1
    assert c.counts["aten.index.Tensor (boolean mask)"] == 1


def test_capture_safe_ops_count_zero():
    x = torch.arange(6.0)
    idx = torch.tensor([0, 2])
    with SyncCounter() as c:
        y = torch.where(x > 2, x, torch.zeros_like(x))
        y.index_copy_(0, idx, x[:2])
        x.index_select(0, idx).clamp_(min=0)
    assert c.total == 0
