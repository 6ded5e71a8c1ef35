"""GDN verify: the cases the mutation run of the decode / verify state paths found untested."""

from __future__ import annotations

import logging

import pytest
import torch

from sglang_ascend_hybrid.emulators import gdn_npu_recurrent
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.gdn import verify as gv
from sglang_ascend_hybrid.ops.gdn.contract import OP_NPU_RECURRENT
from tests.ops.gdn.verify.test_gdn_verify import DK, DV, NV, _call, _case, _max_rel, _oracle


@pytest.mark.parametrize("rows_per_block", [None, 1])
def test_torch_verify_without_g_is_the_undecayed_recurrence(monkeypatch, rows_per_block):
    """``g=None`` means no decay (alpha = 1): the oracle with g omitted, per block and whole."""
    if rows_per_block is not None:
        monkeypatch.setattr(gv, "_BLOCK_BYTES", rows_per_block * NV * DV * DK * 4)
    c = _case(3, 2, seed=11, dtype=torch.float32, pool_dtype=torch.float32, lens=[2, 1, 2], with_g=False)
    ref_out, _, ref_inter = _oracle(c)
    decayed_out, _, _ = _oracle(dict(c, g=torch.full((3, 2, NV), -0.5)))
    inter = c["inter"].clone()
    out = gv.recurrent_verify(_call(c, inter=inter), backend="torch")
    assert _max_rel(out, ref_out) < 1e-5 and _max_rel(inter, ref_inter) < 1e-5
    assert _max_rel(out, decayed_out) > 1e-2          # the oracle does tell decay from none


def test_npu_rung_serves_batches_whose_size_differs_from_the_draft_length(caplog):
    c = _case(3, 2, seed=12, lens=[2, 1, 0])
    ref_out, _, ref_inter = _oracle(c)
    inter = c["inter"].clone()
    calls = []
    real = gdn_npu_recurrent.make_npu_recurrent_emulator()
    with seam.install_emulators({OP_NPU_RECURRENT: lambda *a, **k: calls.append(1) or real(*a, **k)}), \
            caplog.at_level(logging.INFO):
        out = gv.recurrent_verify(_call(c, inter=inter))
    assert calls == [1]
    # served by the op, not by the torch rung after an error of ours was taken for a refusal
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    assert out.shape == (3, 2, NV, DV)
    assert torch.equal(out[1, 1], torch.zeros_like(out[1, 1])) and torch.equal(out[2], torch.zeros_like(out[2]))
    assert _max_rel(out, ref_out) < 2e-2 and _max_rel(inter, ref_inter) < 2e-2


def test_non_contiguous_pool_never_reaches_the_npu_op():
    c = _case(2, 2, seed=13)
    wide = torch.zeros(c["pool"].shape[0], NV, DV, 2 * DK, dtype=c["pool"].dtype)
    pool = wide[..., :DK]
    pool.copy_(c["pool"])                              # same values, rows not contiguous
    assert not pool.is_contiguous()
    calls = []
    with seam.install_emulators({OP_NPU_RECURRENT: lambda *a, **k: calls.append(1)}):
        inter = c["inter"].clone()
        out = gv.recurrent_verify(_call(c, pool=pool, inter=inter))
    assert calls == []
    assert "not contiguous" in gv._npu_reason(_call(c, pool=pool))
    ref_inter = c["inter"].clone()
    ref = gv.recurrent_verify(_call(c, inter=ref_inter), backend="torch")
    assert torch.equal(out, ref) and torch.equal(inter, ref_inter)


def test_shape_errors_name_the_argument():
    c = _case(2, 2, dtype=torch.float32, pool_dtype=torch.float32)
    with pytest.raises(ValueError, match=r"^mix_qkv=\(2, 2, 3, 4\): expected \[B, S"):
        gv.recurrent_verify(_call(dict(c, mix=torch.zeros(2, 2, 3, 4))))
    with pytest.raises(ValueError, match=r"^mix_qkv=\(2, 2, 5\): expected last dim 2\*nk\*dk \+ nv\*dv"):
        gv.recurrent_verify(_call(dict(c, mix=torch.zeros(2, 2, 5))))
    with pytest.raises(ValueError, match=r"^actual_seq_lengths=\(2,\) torch.float32: expected an integer tensor"):
        gv.recurrent_verify(_call(dict(c, lengths=torch.ones(2))))


def test_value_errors_name_the_argument_and_its_values():
    c = _case(2, 2, dtype=torch.float32, pool_dtype=torch.float32, lens=[2, 3])
    with pytest.raises(ValueError, match=r"^actual_seq_lengths=\[2, 3\]: expected entries in \[0, S=2\]"):
        gv.recurrent_verify(_call(c))
    c = _case(2, 2, dtype=torch.float32, pool_dtype=torch.float32, slots=[1, 99])
    with pytest.raises(ValueError, match=r"^cache_indices=\[1, 99\]: expected slots in \[0, 5\) or -1"):
        gv.recurrent_verify(_call(c))
