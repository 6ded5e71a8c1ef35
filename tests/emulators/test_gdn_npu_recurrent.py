"""The ``recurrent_gated_delta_rule`` emulator (:mod:`sglang_ascend_hybrid.emulators.gdn_npu_recurrent`)
against the fp64 verify oracle (``tests/ops/gdn/naive_verify.py``), its refusals and contract
violations, and the rows two requests write in one call."""

from __future__ import annotations

import pytest
import torch

from sglang_ascend_hybrid.emulators import gdn_npu_recurrent
from sglang_ascend_hybrid.ops.errors import EmulatorContractViolation
from tests.ops.gdn.verify.test_gdn_verify import DK, NK, NV, _case, _max_rel, _oracle
from tests.ops.gdn.verify.test_gdn_verify_padding import _padded


@pytest.mark.parametrize("S", [1, 2, 4, 8])
@pytest.mark.parametrize("scratch", [True, False])
def test_recurrent_emulator_matches_the_fp64_oracle(S, scratch):
    B = 3
    c = _case(B, S, seed=S, lens=[S, max(1, S - 1), 1], with_g=S != 2)
    if not scratch:
        c["inter"] = None
        c["idx"] = torch.tensor([[1 + b] * S for b in range(B)], dtype=torch.int32)  # decode-style: pool rows
    ref_out, ref_pool, ref_inter = _oracle(c)
    pool, inter = c["pool"].clone(), None if c["inter"] is None else c["inter"].clone()
    out = gdn_npu_recurrent.make_npu_recurrent_emulator()(c["mix"], pool, c["beta"].bfloat16(), DK ** -0.5,
                                                          c["lengths"], c["idx"], NK, NV, intermediate_state=inter,
                                                          cache_indices=c["cache"] if scratch else None,
                                                          num_accepted_tokens=c["nat"], g=c["g"])
    assert torch.equal(torch.isnan(out), torch.isnan(ref_out))  # unwritten rows are NaN, and only those
    assert _max_rel(out, ref_out) < 2e-2                        # bf16 inputs, states and outputs
    if scratch:
        assert _max_rel(inter, ref_inter) < 2e-2 and torch.equal(pool, c["pool"])  # pool never written
    else:
        assert _max_rel(pool, ref_pool) < 2e-2


@pytest.mark.parametrize("accepted", [1, 2, 3, 4])
def test_emulator_initial_state_follows_num_accepted_tokens(accepted):
    """r0 = ssm_state_indices[b, accepted-1]: row b*S on the first step (-> the pool via cache_indices),
    a scratch row otherwise."""
    S = 4
    c = _case(2, S, seed=11, accepted=[accepted, 1])
    c["inter"] = (torch.randn(c["inter"].shape, generator=torch.Generator().manual_seed(3)) * 0.3).bfloat16()
    ref_out, _, ref_inter = _oracle(c)
    inter = c["inter"].clone()
    out = gdn_npu_recurrent.make_npu_recurrent_emulator()(c["mix"], c["pool"].clone(), c["beta"].bfloat16(), DK ** -0.5,
                                            c["lengths"], c["idx"], NK, NV, intermediate_state=inter,
                                            cache_indices=c["cache"], num_accepted_tokens=c["nat"], g=c["g"])
    assert _max_rel(out, ref_out) < 2e-2 and _max_rel(inter, ref_inter) < 2e-2


def test_emulator_refuses_and_flags_undefined_behaviour():
    c = _case(2, 2)
    op = gdn_npu_recurrent.make_npu_recurrent_emulator()
    args = (c["mix"], c["pool"].clone(), c["beta"].bfloat16(), DK ** -0.5, c["lengths"], c["idx"], NK, NV)
    kw = dict(intermediate_state=c["inter"].clone(), cache_indices=c["cache"], num_accepted_tokens=c["nat"],
              g=c["g"])
    with pytest.raises(RuntimeError, match="mix_qkv width mismatch. Expected: "):
        op(c["mix"][..., 1:], *args[1:], **kw)
    with pytest.raises(RuntimeError, match=r"Beta must be 3-dimensional \(B, S, nv\)"):
        op(*args[:2], c["beta"][0].bfloat16(), *args[3:], **kw)
    with pytest.raises(RuntimeError, match="vStep should be bigger than 8, shape is too big"):
        gdn_npu_recurrent.make_npu_recurrent_emulator(ub_bytes=6000)(*args, **kw)
    with pytest.raises(EmulatorContractViolation, match="bf16-only"):  # fp32 pool: read as bf16 on the device
        op(args[0], c["pool"].float(), *args[2:], **dict(kw, intermediate_state=c["inter"].float()))
    with pytest.raises(EmulatorContractViolation, match="pre-sigmoid|bf16-only"):
        op(*args[:2], c["beta"], *args[3:], **kw)  # fp32 beta
    bad = c["idx"].clone()
    bad[1, 1] = -1
    with pytest.raises(EmulatorContractViolation, match="no pad skip"):
        op(*args[:5], bad, *args[6:], **kw)
    with pytest.raises(EmulatorContractViolation, match="int32"):
        op(*args[:5], c["idx"].long(), *args[6:], **kw)


def test_the_emulator_leaves_a_row_two_requests_write_undefined():
    """The op splits (request, head) work over AI cores with no order between them: a row two requests
    write, or one reads while another writes it, has no defined value (NaN in the emulator)."""
    c = _padded([[0, 1], [4, 5], [4, 5]], rows=6)
    inter = c["inter"].clone()
    out = gdn_npu_recurrent.make_npu_recurrent_emulator()(c["mix"], c["pool"].clone(), c["beta"].bfloat16(), DK ** -0.5,
                                            c["lengths"], c["idx"], NK, NV, intermediate_state=inter,
                                            cache_indices=c["cache"], num_accepted_tokens=c["nat"], g=c["g"])
    assert torch.isnan(inter[4:6].float()).all() and torch.isfinite(inter[:2].float()).all()
    assert torch.isfinite(out[0].float()).all()
    # a scratch read (r0 % S != 0) of a row another request writes in the same call
    c = _padded([[0, 1], [2, 1], [4, 5]], rows=6, accepted=[1, 2, 1], lens=[2, 1, 2])  # request 1 starts from
    # row 1 and writes only row 2; request 0 writes row 1
    out = gdn_npu_recurrent.make_npu_recurrent_emulator()(c["mix"], c["pool"].clone(), c["beta"].bfloat16(), DK ** -0.5,
                                            c["lengths"], c["idx"], NK, NV, intermediate_state=c["inter"].clone(),
                                            cache_indices=c["cache"], num_accepted_tokens=c["nat"], g=c["g"])
    assert torch.isnan(out[1].float()).all() and torch.isfinite(out[0].float()).all()
