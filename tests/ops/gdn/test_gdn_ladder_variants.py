"""The GDN prefill ladder against every emulated machine: chip generation, the chunk op present or
not, the mega kernel of each release (and a wheel whose version names another release than the
kernel it ships), bf16 and fp32 pools.  The rung expected is derived here from the contracts;
the result must equal a forced run of that rung bit for bit (so the pool written from it is
identical), match the torch reference, and a refusal found at call time is logged once."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F

from sglang_ascend_hybrid.emulators import gdn_mega, gdn_npu_chunk, gdn_sets
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.gdn import chunk_gated_delta_rule, prefill
from sglang_ascend_hybrid.ops.gdn import contract as caps
from sglang_ascend_hybrid.ops.gdn.contract import OP_MEGA, OP_NPU_CHUNK, OP_NPU_RECURRENT
from tests.support import gdn_inputs
from tests.support.call_counter import Counting as _Counting

D = 128
MEGA = {  # name -> (installed variant, the version string the wheel reports)
    "none": (None, "2026.05.01"),
    "post3": (caps.MEGA_POST3, "2026.05.01"),
    "current": (caps.MEGA_CURRENT, "2026.6.1"),
    "post3-as-current": (caps.MEGA_POST3, "2026.6.1"),  # the table is wrong for the build
}



def _inputs(hv, hk, pool_dtype, seed=0):
    return gdn_inputs.packed([3, 4], seed=seed, hv=hv, hk=hk, k_dim=D, dtype=torch.bfloat16,
                             state_dtype=pool_dtype).prefill()


def _expected(chip, chunk_present, mega, pool_dtype, pair):
    installed, version = MEGA[mega]
    if chunk_present and (pool_dtype == torch.bfloat16 or chip == "950"):
        return "npu_chunk", False
    if installed is not None and pool_dtype == torch.bfloat16:
        believed = caps.mega_variant(version)
        plan = prefill.plan_for_layout(*pair, D, D, torch.bfloat16, predicate=believed.supports)
        if plan.strategy != "none":
            if all(installed.supports(*p) for p in plan.launches):
                return "mega", False
            return "torch", True  # refused at call time (no Triton entry here)
    return "torch", False


@pytest.mark.parametrize("pair", [(6, 2), (16, 8)], ids=str)
@pytest.mark.parametrize("pool_dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("mega", list(MEGA))
@pytest.mark.parametrize("chunk_present", [True, False], ids=["chunk-op", "no-chunk-op"])
@pytest.mark.parametrize("chip", ["A2", "950"])
def test_prefill_ladder_on_every_machine(chip, chunk_present, mega, pool_dtype, pair, caplog):
    installed, version = MEGA[mega]
    ops = {}
    if chunk_present:
        ops[OP_NPU_CHUNK] = _Counting(gdn_npu_chunk.make_npu_chunk_emulator(chip=chip))
    if installed is not None:
        ops[OP_MEGA] = _Counting(gdn_mega.make_mega_emulator(variant=installed))
    q, k, v, g, beta, cu, h0 = _inputs(*pair, pool_dtype)
    h0_before = h0.clone()
    rung, refused_at_call = _expected(chip, chunk_present, mega, pool_dtype, pair)
    with seam.install_device_facts(chip=chip, sgl_kernel_npu_version=version), seam.install_emulators(ops), \
            caplog.at_level(logging.INFO):
        o, final = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0)
        o2, final2 = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0)
        forced_o, forced_final = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0,
                                                        backend=rung)
    calls = {name: fn.calls for name, fn in ops.items()}
    if rung == "npu_chunk":
        assert calls[OP_NPU_CHUNK] == 3
    elif rung == "mega":
        assert calls.get(OP_NPU_CHUNK, 0) == 0 and calls[OP_MEGA] >= 3
    else:
        assert calls.get(OP_NPU_CHUNK, 0) == 0
        assert calls.get(OP_MEGA, 0) == (1 if refused_at_call else 0)  # refused once, then remembered
    assert torch.equal(o, forced_o) and torch.equal(final, forced_final)  # what the pool receives
    assert torch.equal(o2, o) and torch.equal(final2, final)
    assert torch.equal(h0, h0_before)
    ref_o, ref_final = chunk_gated_delta_rule(q.float(), k.float(), v.float(), g, beta.float(), cu_seqlens=cu,
                                              initial_state=h0.float(), backend="torch")
    torch.testing.assert_close(o.float(), ref_o, atol=3e-2, rtol=3e-2)
    torch.testing.assert_close(final, ref_final, atol=3e-2, rtol=3e-2)
    refusals = [r for r in caplog.records if "refused" in r.getMessage()]
    assert len(refusals) == (1 if refused_at_call else 0)
    if refused_at_call:
        assert caps.MEGA_PAIR_TEXT in refusals[0].getMessage()
    if pool_dtype == torch.float32 and chunk_present and chip != "950":
        assert "cannot use the npu_chunk kernel" in caplog.text


@pytest.mark.parametrize("chip", ["A2", "A3", "950"])
@pytest.mark.parametrize("pool_dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_decode_ladder_on_every_chip(chip, pool_dtype):
    from sglang_ascend_hybrid.ops.gdn import recurrent_gated_delta_rule

    gen = torch.Generator().manual_seed(3)
    B, hk, hv, K = 3, 2, 6, 64
    pool = (torch.randn(5, hv, K, K, generator=gen) * 0.3).to(pool_dtype)
    idx = torch.tensor([3, -1, 0])
    q, k = (torch.randn(1, B, hk, K, generator=gen).bfloat16() for _ in range(2))
    v = torch.randn(1, B, hv, K, generator=gen).bfloat16()
    g = F.logsigmoid(torch.randn(1, B, hv, generator=gen))
    beta = torch.rand(1, B, hv, generator=gen).bfloat16()
    ops = {n: _Counting(fn) for n, fn in gdn_sets.emulators(chip=chip).items()}
    ref_pool = pool.clone()
    ref = recurrent_gated_delta_rule(q, k, v, g, beta, state_pool=ref_pool, state_indices=idx, use_qk_l2norm=True,
                                     backend="torch")
    with seam.install_device_facts(chip=chip), seam.install_emulators(ops):
        out = recurrent_gated_delta_rule(q, k, v, g, beta, state_pool=pool, state_indices=idx, use_qk_l2norm=True)
    on_npu = chip != "950" and pool_dtype == torch.bfloat16
    assert ops.get(OP_NPU_RECURRENT, _Counting(None)).calls == int(on_npu)
    if on_npu:
        torch.testing.assert_close(out.float(), ref.float(), atol=3e-2, rtol=3e-2)
        torch.testing.assert_close(pool.float(), ref_pool.float(), atol=3e-2, rtol=3e-2)
    else:  # the torch rung: bit-identical to the reference, the pool's dtype kept
        assert torch.equal(out, ref) and torch.equal(pool, ref_pool)
    assert pool.dtype == pool_dtype and torch.equal(pool[[1, 2, 4]], ref_pool[[1, 2, 4]])
