"""Every rule of the GDN kernel contracts (``ops/gdn/contract.py``, with their sgl-kernel-npu
sources) pinned on the GDN emulators (the capability
predicates are checked against the same emulators in tests/ops/gdn/test_gdn_ladder_variants.py)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from sglang_ascend_hybrid.emulators import gdn as emu
from sglang_ascend_hybrid.ops.gdn import contract as caps
from sglang_ascend_hybrid.ops.gdn.torch_impl import l2norm
from sglang_ascend_hybrid.ops.gdn.reference import recurrent_reference

TEXTS = caps.NPU_CHUNK_TEXTS


def _chunk_args(T=70, lens=(30, 40), nk=2, nv=4, dk=32, dv=16, dtype=torch.bfloat16, state_dtype=torch.bfloat16,
                seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = l2norm(torch.randn(T, nk, dk, generator=gen)).to(dtype)
    k = l2norm(torch.randn(T, nk, dk, generator=gen)).to(dtype)
    v = torch.randn(T, nv, dv, generator=gen).to(dtype)
    beta = torch.rand(T, nv, generator=gen).to(torch.bfloat16)
    g = F.logsigmoid(torch.randn(T, nv, generator=gen) + 2)
    B = len(lens)
    state = (torch.randn(B, nv, dv, dk, generator=gen) * 0.1).to(state_dtype)
    chunk_state = torch.empty(caps.npu_chunk_min_chunk_states(T, B), nv, dv, dk, dtype=state_dtype)
    return (q, k, v), dict(beta=beta, initial_state=state, actual_seq_lengths=torch.tensor(lens, dtype=torch.int32),
                           scale=dk ** -0.5, chunk_state=chunk_state, g=g)


# ----------------------------------------------------------------------------- chunk op


def test_chunk_op_semantics_out_final_and_entering_chunk_states():
    (q, k, v), kw = _chunk_args()
    op = emu.make_npu_chunk_emulator(chip="A3")
    out, final = op(q, k, v, **kw)
    assert out.dtype == torch.bfloat16 and out.shape == (70, 4, 16)
    assert final.dtype == torch.bfloat16 and final.shape == (2, 4, 16, 32)
    cu = torch.tensor([0, 30, 70])
    ref_o, ref_final = recurrent_reference(q[None], k[None], v[None], kw["g"][None], kw["beta"][None],
                                           cu_seqlens=cu, initial_state=kw["initial_state"], scale=kw["scale"])
    torch.testing.assert_close(out.float(), ref_o[0].float(), atol=1e-2, rtol=1e-2)
    torch.testing.assert_close(final.float(), ref_final, atol=1e-2, rtol=1e-2)
    h = kw["chunk_state"]
    # sequence-major entering states: seq 0 chunk 0, seq 1 chunk 0 (their initial states)
    assert torch.equal(h[0], kw["initial_state"][0]) and torch.equal(h[1], kw["initial_state"][1])
    assert h.shape[0] == math.ceil(70 / 64) + 2  # the size the host asks for
    assert not torch.isnan(h[:2]).any() and torch.isnan(h[2:]).all()  # 2 chunks (30, 40 tokens): rest unwritten


@pytest.mark.parametrize("chip,state_dtype,ok", [
    ("A2", torch.bfloat16, True), ("A3", torch.bfloat16, True), ("950", torch.bfloat16, True),
    ("A2", torch.float32, False), ("A3", torch.float32, False), ("950", torch.float32, True),
])
def test_chunk_op_fp32_state_only_on_ascend_950(chip, state_dtype, ok):
    (q, k, v), kw = _chunk_args(state_dtype=state_dtype)
    op = emu.make_npu_chunk_emulator(chip=chip)
    if ok:
        _, final = op(q, k, v, **kw)
        assert final.dtype == state_dtype
    else:
        with pytest.raises(RuntimeError, match="^FP32 initial_state is only supported on Ascend950 \\(arch35\\)$"):
            op(q, k, v, **kw)
    assert (caps.npu_chunk_refusal_reason(4, 2, 32, 16, torch.bfloat16, state_dtype, chip) is None) == ok


@pytest.mark.parametrize("change,text_key", [
    (dict(nk=1, nv=65), "heads"), (dict(nk=65, nv=65), "heads"), (dict(dk=129), "dims"), (dict(dv=130), "dims"),
    (dict(nk=3, nv=4), "ratio"), (dict(dtype=torch.float16), "qkv_dtype"), (dict(dtype=torch.float32), "qkv_dtype"),
])
def test_chunk_op_limits_and_texts(change, text_key):
    (q, k, v), kw = _chunk_args(**change)
    with pytest.raises(RuntimeError) as err:
        emu.make_npu_chunk_emulator()(q, k, v, **kw)
    assert str(err.value) == TEXTS[text_key]
    nk, nv = change.get("nk", 2), change.get("nv", 4)
    reason = caps.npu_chunk_refusal_reason(nv, nk, change.get("dk", 32), change.get("dv", 16),
                                           change.get("dtype", torch.bfloat16), torch.bfloat16, "A3")
    assert reason == TEXTS[text_key]  # the predicate predicts the same refusal
    assert caps.is_npu_chunk_refusal(err.value)


def test_chunk_op_argument_rules():
    op = emu.make_npu_chunk_emulator()
    (q, k, v), kw = _chunk_args()
    for bad, key in ((dict(beta=kw["beta"].float()), "beta_dtype"), (dict(beta=kw["beta"][None]), "beta_2d"),
                     (dict(g=kw["g"][None]), "g_2d"),
                     (dict(chunk_state=kw["chunk_state"].float()), "chunk_state_dtype"),
                     (dict(actual_seq_lengths=torch.tensor([0, 70], dtype=torch.int32)), "lengths"),
                     (dict(chunk_state=kw["chunk_state"][:2]), "chunk_state_size")):
        with pytest.raises(RuntimeError) as err:
            op(q, k, v, **{**kw, **bad})
        assert str(err.value).startswith(TEXTS[key]), (key, str(err.value))
    for bad, key in ((dict(actual_seq_lengths=torch.tensor([30, 30], dtype=torch.int32)), "lengths_sum"),
                     (dict(g=kw["g"].bfloat16()), "g_dtype"),
                     (dict(actual_seq_lengths=kw["actual_seq_lengths"].long()), "lengths_dtype"),
                     (dict(initial_state=kw["initial_state"].half()), "state_dtype"),
                     (dict(beta=None), "beta_provided"), (dict(initial_state=None), "state_provided")):
        with pytest.raises(RuntimeError) as err:  # host TORCH_CHECKs now (SKN-747 c811ba3f), no violation
            op(q, k, v, **{**kw, **bad})
        assert str(err.value) == TEXTS[key], (key, str(err.value))
        assert caps.is_npu_chunk_refusal(err.value)
    assert "161002" not in "".join(TEXTS.values())  # a direct launch: no aclnn error codes


def test_chunk_op_does_not_normalise_q_and_k():
    (q, k, v), kw = _chunk_args()
    op = emu.make_npu_chunk_emulator()
    out1, _ = op(q, k, v, **{**kw, "chunk_state": kw["chunk_state"].clone()})
    out2, _ = op((q.float() * 2).bfloat16(), k, v, **{**kw, "chunk_state": kw["chunk_state"].clone()})
    torch.testing.assert_close(out2.float(), 2 * out1.float(), atol=2e-2, rtol=2e-2)


# ----------------------------------------------------------------------------- mega kernel


def _mega_args(hv=16, hk=8, T=40, D=128, seed=1):
    gen = torch.Generator().manual_seed(seed)
    q = l2norm(torch.randn(1, T, hk, D, generator=gen)).half()
    k = l2norm(torch.randn(1, T, hk, D, generator=gen)).half()
    v = torch.randn(1, T, hv, D, generator=gen).half()
    g = F.logsigmoid(torch.randn(1, T, hv, generator=gen) + 2)
    beta = torch.rand(1, T, hv, generator=gen).half()
    return q, k, v, g, beta


@pytest.mark.parametrize("variant", caps.MEGA_VARIANTS, ids=lambda v: v.name)
@pytest.mark.parametrize("pair", [(16, 16), (32, 16), (16, 8), (16, 4), (8, 2), (12, 4), (24, 8), (6, 2), (16, 3),
                                  (64, 16), (48, 16), (32, 8), (4, 4)])
def test_mega_head_sets_and_hint_by_variant(variant, pair):
    hv, hk = pair
    q, k, v, g, beta = _mega_args(hv, hk, T=8)
    expected = {
        "post3": pair in {(16, 16), (32, 16), (48, 16), (64, 16), (16, 8), (32, 8), (16, 4)},
        "pr517": hv % hk == 0 and hv in {16, 24, 32, 48, 64},
        "current": hv % hk == 0 and hv in {8, 12, 16, 24, 32, 48, 64},
    }[variant.name]
    assert variant.supports(hv, hk) == expected
    op = emu.make_mega_emulator(variant=variant)
    if expected:
        out = op(q, k, v, g, beta, None, None, True, None)
        assert len(out) == 7 and out[3].dtype == torch.float32 and out[5].shape == (1, 1, hv, 128, 128)
    else:
        with pytest.raises(RuntimeError) as err:
            op(q, k, v, g, beta, None, None, True, None)
        text = str(err.value)
        assert text.startswith(caps.MEGA_PAIR_TEXT)
        assert text.endswith(caps.MEGA_HINT) == variant.hint
        assert caps.is_mega_refusal(err.value)


def test_mega_wrapper_casts_and_keeps_an_fp16_state():
    q, k, v, g, beta = _mega_args()
    h0 = torch.randn(1, 16, 128, 128, generator=torch.Generator().manual_seed(2)) * 0.1 + 1e-4
    op = emu.make_mega_emulator()
    out = op(q.bfloat16(), k.bfloat16(), v.bfloat16(), g, beta.bfloat16(), None, h0, True, None)
    assert out[1].dtype == torch.bfloat16  # (out * scale).to(q.dtype)
    ref = op(q, k, v, g, beta, None, h0.half().float(), True, None)  # fp32 state: the wrapper halves it
    torch.testing.assert_close(out[3], ref[3], atol=1e-2, rtol=5e-2)  # bf16 vs fp16 inputs
    with pytest.raises(RuntimeError, match="^mega_chunk_gdn supports head dimension 128"):
        op(*(x[..., :64] for x in (q, k, v)), g, beta, None, None, True, None)
    with pytest.raises(RuntimeError, match="^g must be float32"):
        op(q, k, v, g.half(), beta, None, None, True, None)
    with pytest.raises(RuntimeError, match="^mega_chunk_gdn currently supports packed B=1 input"):
        op(q.expand(2, -1, -1, -1), k.expand(2, -1, -1, -1), v.expand(2, -1, -1, -1), g, beta, None, None, True,
           None)
    assert not caps.MEGA_POST3.hint and caps.MEGA_CURRENT.hint


@pytest.mark.parametrize("version,variant", [
    ("2026.05.01", caps.MEGA_POST3), ("2026.6.0", caps.MEGA_CURRENT), ("2026.6.1", caps.MEGA_CURRENT),
    (None, caps.MEGA_CURRENT),
])
def test_mega_variant_from_the_wheel_version(version, variant):
    assert caps.mega_variant(version) is variant if version else caps.mega_variant("2027.1.0") is variant


def test_emulator_sets_by_chip():
    assert emu.OP_NPU_RECURRENT not in emu.emulators(chip="950")  # not built for Ascend 950
    assert emu.OP_NPU_RECURRENT in emu.emulators(chip="A2")
    assert emu.OP_MEGA not in emu.emulators(mega_variant=None)  # tags before 2026.05.01.post3


def test_recurrent_vstep_rule():
    assert caps.recurrent_vstep(16, 128, 128) >= 8  # Qwen3.5/3.6 heads fit
    assert caps.recurrent_vstep(64, 2048, 2048) < 8  # too big for 192 KiB of UB
    assert caps.recurrent_refusal_reason(16, 8, 128, 128, 9, [torch.bfloat16]) is not None  # S > 8
    assert caps.recurrent_refusal_reason(16, 8, 128, 128, 4, [torch.float32]) is not None   # not bf16
    assert caps.recurrent_refusal_reason(16, 8, 128, 128, 4, [torch.bfloat16]) is None


@pytest.mark.parametrize("shape,vstep", [((16, 128, 128), 112), ((64, 128, 128), 104), ((48, 128, 128), 112),
                                         ((64, 256, 256), 48), ((8, 64, 64), 232)])
def test_recurrent_vstep_values_from_the_host_formula(shape, vstep):
    """vStep of sgl-kernel-npu's recurrent host (f425bdf1), worked by hand for a 192 KiB UB."""
    assert caps.recurrent_vstep(*shape) == vstep
