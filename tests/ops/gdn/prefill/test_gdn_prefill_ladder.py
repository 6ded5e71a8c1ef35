"""The GDN prefill ladder on CPU emulators: head plans, call-time refusals, forced rungs."""

from __future__ import annotations

import logging

import pytest
import torch

from sglang_ascend_hybrid.emulators import gdn_mega, gdn_npu_chunk
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.gdn import chunk_gated_delta_rule, prefill
from sglang_ascend_hybrid.ops.gdn.contract import OP_MEGA, OP_NPU_CHUNK
from sglang_ascend_hybrid.ops.gdn.prefill.plan_exec import execute_plan
from sglang_ascend_hybrid.ops.gdn.prefill.planner import plan_for
from sglang_ascend_hybrid.ops.gdn.torch_impl import chunk_gdn_torch
from tests.support import gdn_inputs
from tests.support.call_counter import Counting as _Counting

D = 128


def _inputs(lens, hv, hk, dtype=torch.float16, seed=0, with_state=True, state_dtype=None):
    """Inputs in ``dtype``; the initial state in ``state_dtype`` (default: the input dtype, a
    16-bit pool that the 16-bit kernels may serve without lowering its precision)."""
    return gdn_inputs.packed(lens, seed=seed, hv=hv, hk=hk, k_dim=D, dtype=dtype, with_state=with_state,
                             state_dtype=state_dtype or dtype).prefill()


def _torch_result(q, k, v, g, beta, cu, h0):
    o, final, _ = chunk_gdn_torch(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0)
    return o, final


def test_mega_runs_6_2_through_a_pad_plan(caplog):
    q, k, v, g, beta, cu, h0 = _inputs([5, 17, 1], 6, 2)
    mega = _Counting(gdn_mega.make_mega_emulator())
    with seam.install_emulators({OP_MEGA: mega}), caplog.at_level(logging.INFO):
        o, final = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0)
    assert mega.calls == 1  # one (8, 2) launch
    ref_o, ref_final = _torch_result(q, k, v, g, beta, cu, h0)
    torch.testing.assert_close(o.float(), ref_o.float(), atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(final, ref_final, atol=2e-3, rtol=2e-3)
    assert any("mega kernel via pad plan launches=[(8, 2)]" in r.getMessage() for r in caplog.records)


def test_mega_runs_128_32_as_two_launches():
    q, k, v, g, beta, cu, h0 = _inputs([6, 3], 128, 32, seed=1)
    mega = _Counting(gdn_mega.make_mega_emulator())
    with seam.install_emulators({OP_MEGA: mega}):
        o, final = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0)
    assert mega.calls == 2
    ref_o, ref_final = _torch_result(q, k, v, g, beta, cu, h0)
    torch.testing.assert_close(o.float(), ref_o.float(), atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(final, ref_final, atol=2e-3, rtol=2e-3)


def test_split_plus_pad_with_inert_groups_equals_unpadded():
    """A kernel taking only (8, 4): (6, 3) needs an inert key group, (12, 12) three padded launches."""
    only = lambda hv, hk: (hv, hk) == (8, 4)
    kernel = gdn_mega.make_mega_emulator(only)

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
    refusing = _Counting(gdn_mega.make_mega_emulator(lambda hv, hk: hv != 8))
    h0_before = h0.clone()
    with seam.install_emulators({OP_MEGA: refusing}), caplog.at_level(logging.INFO):
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
    npu_chunk = _Counting(gdn_npu_chunk.make_npu_chunk_emulator(refuse=lambda hv, hk: (hv, hk) == (6, 2)))
    mega = _Counting(gdn_mega.make_mega_emulator())
    with seam.install_emulators({OP_NPU_CHUNK: npu_chunk, OP_MEGA: mega}):
        o, final = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0)
    assert (npu_chunk.calls, mega.calls) == (1, 1)
    ref_o, ref_final = _torch_result(q, k, v, g, beta, cu, h0)
    torch.testing.assert_close(o.float(), ref_o.float(), atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(final, ref_final, atol=2e-2, rtol=2e-2)


def test_npu_chunk_serves_its_pairs_with_chunk_states():
    q, k, v, g, beta, cu, h0 = _inputs([3, 70], 4, 2, seed=5, dtype=torch.bfloat16)
    with seam.install_emulators({OP_NPU_CHUNK: gdn_npu_chunk.make_npu_chunk_emulator()}):
        call = prefill.ChunkCall(q, k, v, g, beta, cu, h0, D ** -0.5, chunk_states=True)
        o, final, h = prefill.run_prefill(call)
    ref_o, ref_final, ref_h = chunk_gdn_torch(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0, chunk_states=True)
    torch.testing.assert_close(o.float(), ref_o.float(), atol=2e-3, rtol=2e-3)
    assert final.dtype == h.dtype == h0.dtype   # the op's state dtype, no fp32 round trip
    torch.testing.assert_close(final.float(), ref_final, atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(h.float(), ref_h, atol=2e-3, rtol=2e-3)


def test_forced_backend_and_unknown_rung():
    q, k, v, g, beta, cu, h0 = _inputs([4], 8, 2, seed=6)
    with seam.install_emulators({OP_MEGA: gdn_mega.make_mega_emulator()}):
        o, _ = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0, backend="mega")
    ref_o, _ = _torch_result(q, k, v, g, beta, cu, h0)
    torch.testing.assert_close(o.float(), ref_o.float(), atol=2e-3, rtol=2e-3)
    with pytest.raises(ValueError, match="backend='npu'"):
        chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, backend="npu")
