"""Every rule of the GDN kernel contracts (``ops/gdn/contract.py``, with their sgl-kernel-npu
sources) pinned on the GDN emulators (the capability
predicates are checked against the same emulators in tests/ops/gdn/test_gdn_ladder_variants.py)."""

from __future__ import annotations

import logging
import math

import pytest
import torch
import torch.nn.functional as F

from sglang_ascend_hybrid.emulators import gdn_mega, gdn_npu_chunk, gdn_sets
from sglang_ascend_hybrid.ops.gdn.contract import OP_MEGA, OP_NPU_CHUNK, OP_NPU_RECURRENT
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
    op = gdn_npu_chunk.make_npu_chunk_emulator(chip="A3")
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
    assert h.shape[0] == math.ceil(70 / 64) + 2  # the kernel's view of the buffer (the rung allocates it)
    assert not torch.isnan(h[:2]).any() and torch.isnan(h[2:]).all()  # 2 chunks (30, 40 tokens): rest unwritten


@pytest.mark.parametrize("chip,state_dtype,ok", [
    ("A2", torch.bfloat16, True), ("A3", torch.bfloat16, True), ("950", torch.bfloat16, True),
    ("A2", torch.float32, False), ("A3", torch.float32, False), ("950", torch.float32, True),
])
def test_chunk_op_fp32_state_only_on_ascend_950(chip, state_dtype, ok):
    (q, k, v), kw = _chunk_args(state_dtype=state_dtype)
    op = gdn_npu_chunk.make_npu_chunk_emulator(chip=chip)
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
        gdn_npu_chunk.make_npu_chunk_emulator()(q, k, v, **kw)
    assert str(err.value) == TEXTS[text_key]
    nk, nv = change.get("nk", 2), change.get("nv", 4)
    reason = caps.npu_chunk_refusal_reason(nv, nk, change.get("dk", 32), change.get("dv", 16),
                                           change.get("dtype", torch.bfloat16), torch.bfloat16, "A3")
    assert reason == TEXTS[text_key]  # the predicate predicts the same refusal
    assert caps.is_npu_chunk_refusal(err.value)


def test_chunk_op_argument_rules():
    op = gdn_npu_chunk.make_npu_chunk_emulator()
    (q, k, v), kw = _chunk_args()
    for bad, key in ((dict(beta=kw["beta"].float()), "beta_dtype"), (dict(beta=kw["beta"][None]), "beta_2d"),
                     (dict(g=kw["g"][None]), "g_2d"),
                     (dict(chunk_state=kw["chunk_state"].float()), "chunk_state_dtype")):
        with pytest.raises(RuntimeError) as err:
            op(q, k, v, **{**kw, **bad})
        assert str(err.value).startswith(TEXTS[key]), (key, str(err.value))
    for bad, key in ((dict(g=kw["g"].bfloat16()), "g_dtype"),
                     (dict(actual_seq_lengths=kw["actual_seq_lengths"].long()), "lengths_dtype"),
                     (dict(initial_state=kw["initial_state"].half()), "state_dtype"),
                     (dict(beta=None), "beta_provided"), (dict(initial_state=None), "state_provided")):
        with pytest.raises(RuntimeError) as err:  # host TORCH_CHECKs (SKN-747 b878a61a / 0a96db2f), no violation
            op(q, k, v, **{**kw, **bad})
        assert str(err.value) == TEXTS[key], (key, str(err.value))
        assert caps.is_npu_chunk_refusal(err.value)
    assert "161002" not in "".join(TEXTS.values())  # a direct launch: no aclnn error codes
    # the merged head checks neither lengths nor the chunk_state size on the host (no host copy)
    assert not {"lengths", "lengths_sum", "chunk_state_size"} & set(TEXTS)
    assert "FP32" in caps.KERNEL_NOTES[caps.OP_NPU_CHUNK][1] or "fp32" in caps.KERNEL_NOTES[caps.OP_NPU_CHUNK][1]
    assert OP_NPU_CHUNK in gdn_sets.emulators(chip="950")  # registered outside SGL_KERNEL_ENABLE_A3_ONLY_OPS


def test_chunk_op_does_not_normalise_q_and_k():
    (q, k, v), kw = _chunk_args()
    op = gdn_npu_chunk.make_npu_chunk_emulator()
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
    op = gdn_mega.make_mega_emulator(variant=variant)
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
    op = gdn_mega.make_mega_emulator()
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


# The version tables (mega head sets, the Triton entry's mega mode): a known old, the newest known, an unknown
# newer (SGLang's CI pairs 0.5.23 with these) and an unparseable version; no version (no metadata) stays current.
VERSIONS = [
    ("2026.05.01", caps.MEGA_POST3, "supported", False),   # known old (tags 2026.05.01 .. .post3)
    ("2026.5.1", caps.MEGA_POST3, "supported", False),     # the same, as the metadata normalises it
    ("2026.6.0", caps.MEGA_CURRENT, "default", False),
    ("2026.6.1", caps.MEGA_CURRENT, "opt_in", False),      # the newest known (tags 2026.6.1 .. 2026.08.21)
    ("2026.9.0.post4", caps.MEGA_STRICT, "unknown", True),  # unknown newer
    ("2026.9.0.post5", caps.MEGA_STRICT, "unknown", True),
    ("2026.6.2", caps.MEGA_STRICT, "unknown", True),        # no config.ini ever said it
    ("2026.6.1+local", caps.MEGA_STRICT, "unknown", True),  # a local build
    ("not a version", caps.MEGA_STRICT, "unknown", True),   # unparseable
    ("", caps.MEGA_STRICT, "unknown", True),
    (None, caps.MEGA_CURRENT, "opt_in", False),
]


@pytest.mark.parametrize("version,variant,mode,assumed", VERSIONS, ids=[repr(v[0]) for v in VERSIONS])
def test_version_tables_take_the_strictest_contract_for_unknown_versions(version, variant, mode, assumed, caplog):
    from sglang_ascend_hybrid.ops import seam

    with seam.install_device_facts(sgl_kernel_npu_version=version), caplog.at_level(logging.INFO):
        for _ in range(3):
            assert caps.mega_variant() is variant
            assert caps.triton_mega_mode(mega_present=True) == mode
    lines = [r.getMessage() for r in caplog.records if "not a version the GDN contracts know" in r.getMessage()]
    assert len(lines) == (2 if assumed else 0)  # once per table, whatever the number of calls
    if assumed:
        assert any("strictest known set" in x for x in lines) and any("mode 'unknown'" in x for x in lines)
        assert all(r.levelno == logging.WARNING for r in caplog.records if "GDN contracts know" in r.getMessage())


def test_the_strictest_head_set_is_what_every_known_variant_accepts():
    pairs = {(hv, hk) for hv in range(1, 65) for hk in range(1, 65)
             if all(v.supports(hv, hk) for v in caps.MEGA_VARIANTS)}
    assert caps.MEGA_STRICT.pairs == pairs == caps.MEGA_POST3.pairs
    assert not caps.MEGA_STRICT.supports(8, 2) and caps.MEGA_CURRENT.supports(8, 2)  # newest-only pairs: not assumed


def test_an_unknown_version_is_taken_to_run_the_mega_kernel_whatever_the_settings():
    """Mode "unknown": every call is taken to go through the mega kernel, so the Triton rung only serves
    what both of the entry's paths compute rightly (no 64-token chunk states, 16-bit states, head dim 128)."""
    from sglang_ascend_hybrid.ops import seam
    from sglang_ascend_hybrid.ops.gdn import prefill, signature

    for env in ({}, {caps.TRITON_BACKEND_ENV: "1"}, {caps.TRITON_MEGA_ENV: "0"}):
        assert caps.triton_runs_mega("unknown", env, 32, 16, 128, 128)
    sig = signature.GdnSignature(32, 16, 128, 128, torch.bfloat16, chunk_states=True, state_dtype=torch.bfloat16)
    with seam.install_device_facts(sgl_kernel_npu_version="2026.9.0.post4"):
        assert prefill.triton_runs_mega(sig, environ={}, mega_present=True)
        assert "64-token chunk states" in prefill.triton_reason(sig, True, True)
    with seam.install_device_facts(sgl_kernel_npu_version="2026.6.1"):
        assert not prefill.triton_runs_mega(sig, environ={}, mega_present=True)


def test_emulator_sets_by_chip():
    assert OP_NPU_RECURRENT not in gdn_sets.emulators(chip="950")  # not built for Ascend 950
    assert OP_NPU_RECURRENT in gdn_sets.emulators(chip="A2")
    assert OP_MEGA not in gdn_sets.emulators(mega_variant=None)  # tags before 2026.05.01.post3


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
