"""The public decode op (precomputed gates) on the GDN decode ladder, on CPU emulators: refusals leave the
pool untouched, the recurrent op's emulator agrees with the torch rung, ``use_qk_l2norm=False`` stays off
the op; and the public op and SGLang's gated decode go through the one ladder object."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F

from sglang_ascend_hybrid.emulators import gdn_decode as decode_emu
from sglang_ascend_hybrid.emulators import gdn_npu_recurrent
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.gdn import decode, recurrent_gated_delta_rule
from sglang_ascend_hybrid.ops.gdn.contract import OP_NPU_RECURRENT
from tests.support.call_counter import Counting as _Counting


def _refusal_case():
    gen = torch.Generator().manual_seed(8)
    B, hk, hv, K = 3, 2, 6, 16
    pool = torch.randn(5, hv, K, K, generator=gen).bfloat16()
    idx = torch.tensor([3, 0, -1])
    q = torch.randn(1, B, hk, K, generator=gen).bfloat16()
    k = torch.randn(1, B, hk, K, generator=gen).bfloat16()
    v = torch.randn(1, B, hv, K, generator=gen).bfloat16()
    g = F.logsigmoid(torch.randn(1, B, hv, generator=gen))
    beta = torch.rand(1, B, hv, generator=gen).bfloat16()
    ref_pool = pool.clone()
    ref = recurrent_gated_delta_rule(q, k, v, g, beta, state_pool=ref_pool, state_indices=idx,
                                     use_qk_l2norm=True, backend="torch")
    return (q, k, v, g, beta, idx), pool, ref, ref_pool


def test_decode_refusal_leaves_the_state_pool_untouched(caplog):
    """The op's host check refuses before it writes anything (its vStep check, in the op's host code):
    the pool handed to it in place is untouched and the next rung gives exactly the torch result."""
    (q, k, v, g, beta, idx), pool, ref, ref_pool = _refusal_case()
    seen = []

    def refuse(mix, states, *a, **kw):
        seen.append(states.data_ptr())
        raise RuntimeError("vStep should be bigger than 8, shape is too big")

    with seam.install_emulators({OP_NPU_RECURRENT: refuse}), caplog.at_level(logging.INFO):
        o = recurrent_gated_delta_rule(q, k, v, g, beta, state_pool=pool, state_indices=idx, use_qk_l2norm=True)
    assert seen == [pool.data_ptr()]  # a contiguous pool goes to the op in place
    assert torch.equal(o, ref) and torch.equal(pool, ref_pool)
    assert any("kernel npu_recurrent refused" in r.getMessage() for r in caplog.records)


def test_decode_refusal_on_a_gathered_copy_leaves_the_pool_untouched():
    """A pool the op cannot address in place (not contiguous) is served on a gathered copy of the rows: a
    kernel that scribbles on the states it was given and then refuses never reaches the pool."""
    (q, k, v, g, beta, idx), pool, ref, ref_pool = _refusal_case()
    wide = torch.zeros(pool.shape[0], 2 * pool.shape[1], *pool.shape[2:], dtype=pool.dtype)
    strided = wide[:, ::2]   # the same values, not contiguous
    strided.copy_(pool)

    def scribble_then_refuse(mix, states, *a, **kw):
        assert states.data_ptr() != strided.data_ptr()
        states.fill_(1e4)
        raise RuntimeError("vStep should be bigger than 8, shape is too big")

    with seam.install_emulators({OP_NPU_RECURRENT: scribble_then_refuse}):
        o = recurrent_gated_delta_rule(q, k, v, g, beta, state_pool=strided, state_indices=idx, use_qk_l2norm=True)
    assert torch.equal(o, ref) and torch.equal(strided, ref_pool)
    assert torch.equal(wide[:, 1::2], torch.zeros_like(ref_pool))  # the bytes between the rows untouched


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


def _strided(pool):
    """``pool``'s values in a pool the op cannot address in place (every other row of a wider tensor)."""
    wide = torch.zeros(pool.shape[0], 2 * pool.shape[1], *pool.shape[2:], dtype=pool.dtype)
    wide[:, ::2].copy_(pool)
    return wide, wide[:, ::2]


@pytest.mark.parametrize("in_place", [True, False], ids=["contiguous pool", "strided pool (gathered copy)"])
def test_decode_npu_recurrent_emulator_matches_torch(in_place, caplog):
    (q, k, v, g, beta), pool, idx = _bf16_decode_step(9, 6, [5, 1, -1, 2])
    ref_pool = pool.clone()
    ref = recurrent_gated_delta_rule(q, k, v, g, beta, state_pool=ref_pool, state_indices=idx,
                                     use_qk_l2norm=True, backend="torch")
    wide = None
    if not in_place:
        wide, pool = _strided(pool)
    kernel = _Counting(gdn_npu_recurrent.make_npu_recurrent_emulator())
    with seam.install_emulators({OP_NPU_RECURRENT: kernel}), caplog.at_level(logging.INFO):
        o = recurrent_gated_delta_rule(q, k, v, g, beta, state_pool=pool, state_indices=idx, use_qk_l2norm=True)
    assert kernel.calls == 1
    said = [r.getMessage() for r in caplog.records]
    assert any("runs on the npu_recurrent kernel" in m for m in said), said   # it served: no fallback
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    if wide is not None:
        assert torch.equal(wide[:, 1::2], torch.zeros_like(ref_pool))   # the bytes between the rows untouched
    # bf16 inputs, bf16 state rounding, and beta handed over as a bf16 logit
    torch.testing.assert_close(o.float(), ref.float(), atol=3e-2, rtol=3e-2)
    torch.testing.assert_close(pool.float(), ref_pool.float(), atol=3e-2, rtol=3e-2)


def test_decode_without_qk_l2norm_never_reaches_the_op_that_always_normalises(caplog):
    """torch.ops.npu.recurrent_gated_delta_rule l2-normalises q and k itself: a call with
    use_qk_l2norm=False must go to torch (bit-equal to the forced torch rung), with the reason said."""
    (q, k, v, g, beta), pool, idx = _bf16_decode_step(19, 5, [4, 0, 2])
    ref_pool = pool.clone()
    ref = recurrent_gated_delta_rule(q, k, v, g, beta, state_pool=ref_pool, state_indices=idx, backend="torch")
    kernel = _Counting(gdn_npu_recurrent.make_npu_recurrent_emulator())
    with seam.install_emulators({OP_NPU_RECURRENT: kernel}), caplog.at_level(logging.INFO):
        o = recurrent_gated_delta_rule(q, k, v, g, beta, state_pool=pool, state_indices=idx, use_qk_l2norm=False)
    assert kernel.calls == 0
    assert torch.equal(o, ref) and torch.equal(pool, ref_pool)
    assert any("cannot use the npu_recurrent kernel: it always l2-normalises q and k" in r.getMessage()
               for r in caplog.records)


def test_the_public_op_and_sglangs_gated_decode_walk_the_same_ladder(monkeypatch):
    """One decode ladder: both callers build a DecodeCall and hand it to the same Ladder object
    (``decode.DECODE``, op ``gdn_serving_decode``), which serves each on its own rung."""
    seen = []
    real = decode.DECODE.__class__.__call__

    def spy(self, sig, call, *a, **kw):
        seen.append((self, type(call), call.precomputed_gates is not None))
        return real(self, sig, call, *a, **kw)

    monkeypatch.setattr(decode.DECODE.__class__, "__call__", spy)
    (q, k, v, g, beta), pool, idx = _bf16_decode_step(29, 5, [4, 0, -1])
    recurrent_gated_delta_rule(q, k, v, g, beta, state_pool=pool, state_indices=idx, use_qk_l2norm=True)
    B, hv = q.shape[1], v.shape[2]
    gated = decode.DecodeCall(q, k, v, torch.randn(B, hv), torch.randn(B, hv), torch.zeros(hv), torch.zeros(hv),
                              pool, idx)
    decode.run_decode(gated)
    assert [(ladder is decode.DECODE, kind, precomputed) for ladder, kind, precomputed in seen] == [
        (True, decode.DecodeCall, True), (True, decode.DecodeCall, False)]
    assert decode.DECODE.op == "gdn_serving_decode"


def test_the_public_op_serves_on_the_decode_ladders_recurrent_rung():
    """The recurrent op's rung of ``gdn_serving_decode`` is the one that serves the public op (there is no
    second decode ladder); the Triton decode rung, which computes SGLang's gates itself, never does."""
    (q, k, v, g, beta), pool, idx = _bf16_decode_step(31, 4, [1, 3])
    call = decode.DecodeCall.with_gates(q, k, v, g[0], beta[0], pool, idx, qk_l2norm=True)
    ops = {OP_NPU_RECURRENT: gdn_npu_recurrent.make_npu_recurrent_emulator(),
           **decode_emu.emulators("optimized", layout="value_first")}
    with seam.install_emulators(ops):
        assert decode.DECODE.choose(call.signature(), call).name == "npu_recurrent"
        assert "precomputed gates" in decode.DECODE.why_not(decode.DECODE.rung("triton_decode"), call.signature(),
                                                                call)


def test_a_given_scale_reaches_the_step():
    """``scale`` scales q inside the step (``o = S (scale q)``): without l2norm, o(q, scale=s) equals
    o(q * s / K ** -0.5) at the default scale, and differs from the default-scale output."""
    gen = torch.Generator().manual_seed(31)
    B, hk, hv, K = 3, 2, 4, 16
    pool = torch.randn(5, hv, K, K, generator=gen) * 0.3
    idx = torch.tensor([4, 0, 2])
    q, k = torch.randn(1, B, hk, K, generator=gen), torch.randn(1, B, hk, K, generator=gen) * K ** -0.5
    v = torch.randn(1, B, hv, K, generator=gen)
    g = F.logsigmoid(torch.randn(1, B, hv, generator=gen))
    beta = torch.rand(1, B, hv, generator=gen)
    s = 0.3
    run = lambda qq, **kw: recurrent_gated_delta_rule(qq, k, v, g, beta, state_pool=pool.clone(),  # noqa: E731
                                                      state_indices=idx, backend="torch", **kw)
    scaled = run(q, scale=s)
    torch.testing.assert_close(scaled, run(q * (s / K ** -0.5)), atol=1e-6, rtol=1e-5)
    assert not torch.allclose(scaled, run(q), atol=1e-3)
