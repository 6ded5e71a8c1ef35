"""GDN kernel ladder on CPU emulators: head plans, call-time refusals, untouched state pools."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F

from sglang_ascend_hybrid.emulators import gdn as emu
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.gdn import chunk_gated_delta_rule, recurrent_gated_delta_rule
from sglang_ascend_hybrid.ops.gdn import dispatch
from sglang_ascend_hybrid.ops.gdn.plan_exec import execute_plan
from sglang_ascend_hybrid.ops.gdn.planner import plan_for
from sglang_ascend_hybrid.ops.gdn.torch_impl import chunk_gdn_torch, l2norm
from tests.call_counter import Counting as _Counting

D = 128



def _inputs(lens, hv, hk, dtype=torch.float16, seed=0, with_state=True, state_dtype=None):
    """Inputs in ``dtype``; the initial state in ``state_dtype`` (default: the input dtype, a
    16-bit pool that the 16-bit kernels may serve without lowering its precision)."""
    gen = torch.Generator().manual_seed(seed)
    T = sum(lens)
    q = l2norm(torch.randn(1, T, hk, D, generator=gen)).to(dtype)
    k = l2norm(torch.randn(1, T, hk, D, generator=gen)).to(dtype)
    v = torch.randn(1, T, hv, D, generator=gen).to(dtype)
    g = F.logsigmoid(torch.randn(1, T, hv, generator=gen) + 2.0)
    beta = torch.rand(1, T, hv, generator=gen).to(dtype)
    cu = torch.tensor([0] + lens).cumsum(0)
    h0 = torch.randn(len(lens), hv, D, D, generator=gen) * 0.1 if with_state else None
    if h0 is not None:
        h0 = h0.to(state_dtype or dtype)
    return q, k, v, g, beta, cu, h0


def _torch_result(q, k, v, g, beta, cu, h0):
    o, final, _ = chunk_gdn_torch(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0)
    return o, final


def test_mega_runs_6_2_through_a_pad_plan(caplog):
    q, k, v, g, beta, cu, h0 = _inputs([5, 17, 1], 6, 2)
    mega = _Counting(emu.make_mega_emulator())
    with seam.install_emulators({emu.OP_MEGA: mega}), caplog.at_level(logging.INFO):
        o, final = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0)
    assert mega.calls == 1  # one (8, 2) launch
    ref_o, ref_final = _torch_result(q, k, v, g, beta, cu, h0)
    torch.testing.assert_close(o.float(), ref_o.float(), atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(final, ref_final, atol=2e-3, rtol=2e-3)
    assert any("mega kernel via pad plan launches=[(8, 2)]" in r.getMessage() for r in caplog.records)


def test_mega_runs_128_32_as_two_launches():
    q, k, v, g, beta, cu, h0 = _inputs([6, 3], 128, 32, seed=1)
    mega = _Counting(emu.make_mega_emulator())
    with seam.install_emulators({emu.OP_MEGA: mega}):
        o, final = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0)
    assert mega.calls == 2
    ref_o, ref_final = _torch_result(q, k, v, g, beta, cu, h0)
    torch.testing.assert_close(o.float(), ref_o.float(), atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(final, ref_final, atol=2e-3, rtol=2e-3)


def test_split_plus_pad_with_inert_groups_equals_unpadded():
    """A kernel taking only (8, 4): (6, 3) needs an inert key group, (12, 12) three padded launches."""
    only = lambda hv, hk: (hv, hk) == (8, 4)
    kernel = emu.make_mega_emulator(only)

    def launch(q, k, v, g, beta, state):
        out = kernel(q, k, v, g, beta, None, None if state is None else state.transpose(-1, -2).contiguous(),
                     True, cu)
        return out[1], out[3].transpose(-1, -2)

    for hv, hk, strategy in ((6, 3, "pad"), (12, 12, "split+pad")):
        q, k, v, g, beta, cu, h0 = _inputs([4, 9], hv, hk, seed=hv)
        plan = plan_for(hv, hk, D, torch.float16, only, max_overhead=2.0)
        assert plan.strategy == strategy
        o, final = execute_plan(plan, launch, q, k, v, g, beta, h0, num_sequences=2)
        ref_o, ref_final = _torch_result(q, k, v, g, beta, cu, h0)
        torch.testing.assert_close(o.float(), ref_o.float(), atol=2e-3, rtol=2e-3)
        torch.testing.assert_close(final, ref_final, atol=2e-3, rtol=2e-3)


def test_call_time_refusal_falls_through_once_and_logs(caplog):
    """The table says (8, 2) runs natively; this kernel build refuses it at call time."""
    q, k, v, g, beta, cu, h0 = _inputs([7, 2], 8, 2, seed=3)
    refusing = _Counting(emu.make_mega_emulator(lambda hv, hk: hv != 8))
    h0_before = h0.clone()
    with seam.install_emulators({emu.OP_MEGA: refusing}), caplog.at_level(logging.INFO):
        o, final = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0)
        o2, final2 = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0)
    assert refusing.calls == 1  # second call goes straight to the next rung
    ref_o, ref_final = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0, backend="torch")
    assert torch.equal(o, ref_o) and torch.equal(final, ref_final)
    assert torch.equal(o2, ref_o) and torch.equal(final2, ref_final)
    assert torch.equal(h0, h0_before)
    lines = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(lines) == 1
    assert "(NumValueHeads, NumKeyHeads)=(8, 2)" in lines[0]
    assert "kernel mega refused" in lines[0] and "unsupported mega_chunk_gdn" in lines[0]
    assert "using torch" in lines[0]


def test_npu_chunk_refusal_goes_to_mega_plan():
    q, k, v, g, beta, cu, h0 = _inputs([3, 70], 6, 2, seed=4, dtype=torch.bfloat16)
    npu_chunk = _Counting(emu.make_npu_chunk_emulator(refuse=lambda hv, hk: (hv, hk) == (6, 2)))
    mega = _Counting(emu.make_mega_emulator())
    with seam.install_emulators({emu.OP_NPU_CHUNK: npu_chunk, emu.OP_MEGA: mega}):
        o, final = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0)
    assert (npu_chunk.calls, mega.calls) == (1, 1)
    ref_o, ref_final = _torch_result(q, k, v, g, beta, cu, h0)
    torch.testing.assert_close(o.float(), ref_o.float(), atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(final, ref_final, atol=2e-2, rtol=2e-2)


def test_npu_chunk_serves_its_pairs_with_chunk_states():
    q, k, v, g, beta, cu, h0 = _inputs([3, 70], 4, 2, seed=5, dtype=torch.bfloat16)
    with seam.install_emulators({emu.OP_NPU_CHUNK: emu.make_npu_chunk_emulator()}):
        call = dispatch.ChunkCall(q, k, v, g, beta, cu, h0, D ** -0.5, chunk_states=True)
        o, final, h = dispatch.run_prefill(call)
    ref_o, ref_final, ref_h = chunk_gdn_torch(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0, chunk_states=True)
    torch.testing.assert_close(o.float(), ref_o.float(), atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(final, ref_final, atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(h, ref_h, atol=2e-3, rtol=2e-3)


def test_forced_backend_and_unknown_rung():
    q, k, v, g, beta, cu, h0 = _inputs([4], 8, 2, seed=6)
    with seam.install_emulators({emu.OP_MEGA: emu.make_mega_emulator()}):
        o, _ = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0, backend="mega")
    ref_o, _ = _torch_result(q, k, v, g, beta, cu, h0)
    torch.testing.assert_close(o.float(), ref_o.float(), atol=2e-3, rtol=2e-3)
    with pytest.raises(ValueError, match="backend='npu'"):
        chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, backend="npu")


def test_decode_refusal_leaves_the_state_pool_untouched(caplog):
    """A kernel that scribbles on the states it was given and then refuses must not
    reach the pool: the next rung gives exactly the torch result."""
    gen = torch.Generator().manual_seed(8)
    B, hk, hv, K = 3, 2, 6, 16
    pool = torch.randn(5, hv, K, K, generator=gen).bfloat16()
    idx = torch.tensor([3, 0, -1])
    q = torch.randn(1, B, hk, K, generator=gen).bfloat16()
    k = torch.randn(1, B, hk, K, generator=gen).bfloat16()
    v = torch.randn(1, B, hv, K, generator=gen).bfloat16()
    g = F.logsigmoid(torch.randn(1, B, hv, generator=gen))
    beta = torch.rand(1, B, hv, generator=gen).bfloat16()

    def scribble_then_refuse(mix, states, *a, **kw):
        states.fill_(1e4)
        raise RuntimeError("vStep should be bigger than 8, shape is too big")

    ref_pool = pool.clone()
    ref = recurrent_gated_delta_rule(q, k, v, g, beta, state_pool=ref_pool, state_indices=idx,
                                     use_qk_l2norm=True, backend="torch")
    with seam.install_emulators({emu.OP_NPU_RECURRENT: scribble_then_refuse}), caplog.at_level(logging.INFO):
        o = recurrent_gated_delta_rule(q, k, v, g, beta, state_pool=pool, state_indices=idx, use_qk_l2norm=True)
    assert torch.equal(o, ref) and torch.equal(pool, ref_pool)
    assert any("kernel npu_recurrent refused" in r.getMessage() for r in caplog.records)


def _bf16_decode_step(seed: int, slots: int, idx: list, hk: int = 2, hv: int = 4, K: int = 32):
    """q, k, v, g, beta of one bf16 decode step and a bf16 pool of ``slots`` rows."""
    gen = torch.Generator().manual_seed(seed)
    B = len(idx)
    pool = (torch.randn(slots, hv, K, K, generator=gen) * 0.3).bfloat16()
    q = torch.randn(1, B, hk, K, generator=gen).bfloat16()
    k = torch.randn(1, B, hk, K, generator=gen).bfloat16()
    v = torch.randn(1, B, hv, K, generator=gen).bfloat16()
    g = F.logsigmoid(torch.randn(1, B, hv, generator=gen))
    beta = torch.rand(1, B, hv, generator=gen).bfloat16()
    return (q, k, v, g, beta), pool, torch.tensor(idx)


def test_decode_npu_recurrent_emulator_matches_torch():
    (q, k, v, g, beta), pool, idx = _bf16_decode_step(9, 6, [5, 1, -1, 2])
    ref_pool = pool.clone()
    ref = recurrent_gated_delta_rule(q, k, v, g, beta, state_pool=ref_pool, state_indices=idx,
                                     use_qk_l2norm=True, backend="torch")
    kernel = _Counting(emu.make_npu_recurrent_emulator())
    with seam.install_emulators({emu.OP_NPU_RECURRENT: kernel}):
        o = recurrent_gated_delta_rule(q, k, v, g, beta, state_pool=pool, state_indices=idx, use_qk_l2norm=True)
    assert kernel.calls == 1
    # bf16 inputs, bf16 state rounding, and beta handed over as a bf16 logit
    torch.testing.assert_close(o.float(), ref.float(), atol=3e-2, rtol=3e-2)
    torch.testing.assert_close(pool.float(), ref_pool.float(), atol=3e-2, rtol=3e-2)


def test_decode_without_qk_l2norm_never_reaches_the_op_that_always_normalises(caplog):
    """torch.ops.npu.recurrent_gated_delta_rule l2-normalises q and k itself: a call with
    use_qk_l2norm=False must go to torch (bit-equal to the forced torch rung), with the reason said."""
    (q, k, v, g, beta), pool, idx = _bf16_decode_step(19, 5, [4, 0, 2])
    ref_pool = pool.clone()
    ref = recurrent_gated_delta_rule(q, k, v, g, beta, state_pool=ref_pool, state_indices=idx, backend="torch")
    kernel = _Counting(emu.make_npu_recurrent_emulator())
    with seam.install_emulators({emu.OP_NPU_RECURRENT: kernel}), caplog.at_level(logging.INFO):
        o = recurrent_gated_delta_rule(q, k, v, g, beta, state_pool=pool, state_indices=idx, use_qk_l2norm=False)
    assert kernel.calls == 0
    assert torch.equal(o, ref) and torch.equal(pool, ref_pool)
    assert any("cannot use the npu_recurrent kernel: it always l2-normalises q and k" in r.getMessage()
               for r in caplog.records)


def test_mega_emulator_keeps_the_real_contract():
    q, k, v, g, beta, cu, h0 = _inputs([4], 6, 2)
    run = emu.make_mega_emulator()
    text = (r"unsupported mega_chunk_gdn \(NumValueHeads, NumKeyHeads\) pair "
            r"Try running the alternative backend by setting GDN_ATTN_BACKEND_TRITON=1\.")
    with pytest.raises(RuntimeError, match=text):
        run(q, k, v, g, beta, None, None, True, cu)
    q2, k2, v2, g2, b2, cu2, _ = _inputs([4], 8, 2)
    with pytest.raises(RuntimeError, match="g must be float32"):
        run(q2, k2, v2, g2.half(), b2, None, None, True, cu2)
