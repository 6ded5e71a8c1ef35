"""The GDN emulator sets per machine (:mod:`sglang_ascend_hybrid.emulators.gdn_sets`): which ops a chip
generation and release have, and what a missing registered op does."""

from __future__ import annotations

import pytest

from sglang_ascend_hybrid.emulators import causal_conv1d as conv_emu
from sglang_ascend_hybrid.emulators import gdn_sets
from sglang_ascend_hybrid.ops.gdn.contract import (
    OP_GATING,
    OP_L2NORM,
    OP_MEGA,
    OP_NPU_CHUNK,
    OP_NPU_RECURRENT,
    OP_TRITON,
)


def test_emulator_sets_by_chip():
    assert OP_NPU_RECURRENT not in gdn_sets.emulators(chip="950")  # not built for Ascend 950
    assert OP_NPU_RECURRENT in gdn_sets.emulators(chip="A2")
    assert OP_MEGA not in gdn_sets.emulators(mega_variant=None)  # tags before 2026.05.01.post3


def test_the_emulated_ascend_950_build_offers_what_such_a_build_has():
    a3 = gdn_sets.emulators(chip="A3", triton=True)
    n950 = gdn_sets.emulators(chip="950", triton=True)
    assert set(a3) == {OP_MEGA, OP_NPU_CHUNK, OP_NPU_RECURRENT, OP_TRITON, OP_L2NORM, OP_GATING}
    assert set(n950) == {OP_NPU_CHUNK, OP_TRITON, OP_L2NORM, OP_GATING}  # no mega, no recurrent op
    # Triton kernels: every build (the gating one from 2026.01.09 on)
    assert set(gdn_sets.emulators(chip="950", npu_chunk=False)) == {OP_L2NORM, OP_GATING}
    assert set(gdn_sets.emulators(chip="950", npu_chunk=False, l2norm=False)) == {OP_GATING}
    assert set(gdn_sets.emulators(chip="950", npu_chunk=False, l2norm=False, gating=False)) == set()
    conv = conv_emu.emulators(**conv_emu.VARIANTS["ascend950"])
    assert conv_emu.OP_ACLNN not in conv  # no torch.ops.npu.causal_conv1d either
    with pytest.raises(AttributeError, match="has no attribute 'mega_chunk_gdn'"):
        gdn_sets.missing_torch_op("mega_chunk_gdn")()


def test_the_set_mega_op_is_of_the_variant_asked_for():
    """(Hv, Hk) = (8, 2): the current kernel takes it, post3's compiled pair list does not (and post3's
    texts carry no hint)."""
    import torch

    from sglang_ascend_hybrid.ops.gdn import contract as caps

    T, D = 2, caps.MEGA_HEAD_DIM
    q = torch.randn(1, T, 2, D) * 0.1
    v = torch.randn(1, T, 8, D) * 0.1
    g = -torch.rand(1, T, 8)
    beta = torch.rand(1, T, 8)
    cu = torch.tensor([0, T], dtype=torch.int32)
    current = gdn_sets.emulators(mega_variant=caps.MEGA_CURRENT)[OP_MEGA]
    assert current(q, q, v, g, beta, None, None, True, cu)[1].shape == v.shape  # (g, o, ...)
    post3 = gdn_sets.emulators(mega_variant=caps.MEGA_POST3)[OP_MEGA]
    with pytest.raises(RuntimeError) as err:
        post3(q, q, v, g, beta, None, None, True, cu)
    assert str(err.value) == caps.MEGA_PAIR_TEXT
