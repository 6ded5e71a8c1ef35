"""The ``torch.ops.npu.chunk_gated_delta_rule`` emulator (:mod:`sglang_ascend_hybrid.emulators.gdn_npu_chunk`):
its semantics, limits and argument rules, and against PR #747 as merged, read at its last
readable heads (``csrc/chunk_gated_delta_rule/op_host/chunk_gated_delta_rule.cpp``: sgl-project/
sgl-kernel-npu b878a61a and zhaozx-cn/sgl-kernel-npu 0a96db2f, which no longer copy
``actual_seq_lengths`` to the CPU nor check lengths or the chunk_state size): the host's check order
and texts, the capability predicate predicting the same first failure, what the kernel does with
lengths it does not check (arch22 ``chunk_gated_delta_rule.h`` ``Process`` at 0a96db2f), and the bf16
state rounded to bf16 at every 64-token chunk boundary (``op_kernel/arch22/chunk_gated_delta_rule_stage2.h``
at 3d5a9eef / 0a96db2f, ``CalGCumExp``: ``Cast(stateOut, ..., RoundMode::CAST_RINT)``)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from sglang_ascend_hybrid.emulators import gdn_npu_chunk, gdn_sets
from sglang_ascend_hybrid.ops.errors import EmulatorContractViolation
from sglang_ascend_hybrid.ops.gdn import contract as caps
from sglang_ascend_hybrid.ops.gdn.contract import OP_NPU_CHUNK
from sglang_ascend_hybrid.ops.gdn.naive import naive_recurrent_gated_delta_rule
from sglang_ascend_hybrid.ops.gdn.torch_impl import l2norm
from tests.support import gdn_inputs

TEXTS = caps.NPU_CHUNK_TEXTS


def _args(T=70, lens=(30, 40), nk=2, nv=4, dk=32, dv=16, state_dtype=torch.bfloat16, seed=0, state_scale=0.1):
    return _chunk_args(T, lens, nk, nv, dk, dv, state_dtype=state_dtype, seed=seed, state_scale=state_scale)


def _first_text(op, qkv, kw):
    with pytest.raises(RuntimeError) as err:
        op(*qkv, **kw)
    return str(err.value)


# Pairs of violations: the host reports the one it checks first.
ORDER = [
    # (what is wrong, expected first text)
    ("qkv 2-D and beta fp32", "qkv_3d"),
    ("beta 3-D and q fp16", "beta_2d"),
    ("beta fp32 and beta shape", "beta_dtype"),
    ("q fp16 and 65 heads", "qkv_dtype"),
    ("g bf16 and g 3-D", "g_dtype"),
    ("g 3-D and key shape", "g_2d"),
    ("state fp16 and lengths int64", "state_dtype"),
    ("lengths int64 and 65 heads", "lengths_dtype"),
    ("beta shape and zero length", "beta_shape"),
    ("initial_state shape and chunk_state small", "state_shape"),
    ("65 heads and dk 129", "heads"),
    ("dk 129 and ratio", "dims"),
    ("ratio and zero length", "ratio"),
    ("g shape and zero length", "g_shape"),
    ("zero length and fp32 state on A3", "fp32_state"),     # lengths: not the host's (no host copy)
    ("sum and fp32 state on A3", "fp32_state"),
    ("fp32 state on A3 and chunk_state small", "fp32_state"),
    ("chunk_state small and chunk_state dtype", "chunk_state_dtype"),  # its size: not checked
    ("chunk_state 3-D and its dtype", "chunk_state_4d"),
    ("chunk_state shape and its dtype", "chunk_state_shape"),
    ("no beta and no state", "beta_provided"),
]


def _broken(what):
    nk, nv, dk = 2, 4, 32
    if "65 heads" in what:
        nk, nv = 1, 65
    if "dk 129" in what:
        dk = 129
    if "ratio" in what and "65 heads" not in what:
        nk, nv = 3, 4
    state_dtype = torch.float32 if "fp32 state" in what else torch.bfloat16
    qkv, kw = _args(nk=nk, nv=nv, dk=dk, state_dtype=state_dtype)
    q, k, v = qkv
    T = q.shape[0]
    if "qkv 2-D" in what:
        q = q[:, 0]
    if "q fp16" in what:
        q = q.half()
    if "beta fp32" in what:
        kw["beta"] = kw["beta"].float()
    if "beta 3-D" in what:
        kw["beta"] = kw["beta"][None]
    if "beta shape" in what:
        kw["beta"] = kw["beta"][:-1]
    if "g bf16" in what:
        kw["g"] = kw["g"].bfloat16()
    if "g 3-D" in what:
        kw["g"] = kw["g"][None]
    if "g shape" in what:
        kw["g"] = kw["g"][:-1]
    if "key shape" in what:
        k = k[:-1]
    if "state fp16" in what:
        kw["initial_state"] = kw["initial_state"].half()
    if "initial_state shape" in what:
        kw["initial_state"] = kw["initial_state"][:, :, :, :-1]
    if "lengths int64" in what:
        kw["actual_seq_lengths"] = kw["actual_seq_lengths"].long()
    if "zero length" in what:
        kw["actual_seq_lengths"] = torch.tensor([0, T], dtype=torch.int32)
    if "sum" in what:
        kw["actual_seq_lengths"] = torch.tensor([30, 30], dtype=torch.int32)
    if "chunk_state small" in what:
        kw["chunk_state"] = kw["chunk_state"][:2]
    if "chunk_state 3-D" in what:
        kw["chunk_state"] = kw["chunk_state"][0]
    if "chunk_state shape" in what:
        kw["chunk_state"] = kw["chunk_state"][:, :, :, :-1]
    if "chunk_state dtype" in what or "its dtype" in what:
        kw["chunk_state"] = kw["chunk_state"].half()
    if "no beta" in what:
        kw["beta"] = None
    if "no state" in what:
        kw["initial_state"] = None
    return (q, k, v), kw


@pytest.mark.parametrize("what,key", ORDER, ids=[w for w, _ in ORDER])
def test_the_host_reports_its_first_failing_check(what, key):
    qkv, kw = _broken(what)
    text = _first_text(gdn_npu_chunk.make_npu_chunk_emulator(chip="A3"), qkv, kw)
    assert text == TEXTS[key]
    assert caps.is_npu_chunk_refusal(RuntimeError(text))


@pytest.mark.parametrize("nv,nk,dk,dv,dtype,state,chip,lengths,key", [
    (65, 1, 129, 16, torch.float16, torch.bfloat16, "A3", [5], "qkv_dtype"),
    (4, 2, 32, 16, torch.bfloat16, torch.float16, "A3", [5], "state_dtype"),
    (0, 2, 32, 16, torch.bfloat16, torch.bfloat16, "A3", [5], "positive"),
    (4, 2, 32, 16, torch.bfloat16, torch.bfloat16, "A3", [0, 0], "positive"),  # T == 0
    (65, 1, 129, 16, torch.bfloat16, torch.bfloat16, "A3", [0, 5], "heads"),
    (4, 2, 129, 16, torch.bfloat16, torch.bfloat16, "A3", [0, 5], "dims"),
    (4, 3, 32, 16, torch.bfloat16, torch.float32, "A3", [0, 5], "ratio"),
    (4, 2, 32, 16, torch.bfloat16, torch.float32, "A2", [0, 5], "fp32_state"),
    (4, 2, 32, 16, torch.bfloat16, torch.bfloat16, "A2", [0, 5], "empty"),    # taken, computed wrongly
    (4, 2, 32, 16, torch.bfloat16, torch.float32, "950", [5, 0], "empty"),
    (4, 2, 32, 16, torch.bfloat16, torch.float32, "A2", [3, 5], "fp32_state"),
    (4, 2, 32, 16, torch.bfloat16, torch.float32, "950", [3, 5], None),
    (4, 2, 32, 16, torch.bfloat16, torch.bfloat16, None, [3, 5], None),
    (4, 2, 0, 16, torch.bfloat16, torch.bfloat16, "A3", [5], "positive"),
    (4, 2, 32, 0, torch.bfloat16, torch.bfloat16, "A3", [5], "positive"),
    (64, 64, 128, 128, torch.bfloat16, torch.bfloat16, "A3", [5], None),  # the limits are inclusive
    (64, 1, 128, 128, torch.bfloat16, None, "A3", None, None),
    (4, 65, 32, 16, torch.bfloat16, None, "A3", None, "heads"),
    (4, 2, 32, 129, torch.bfloat16, None, "A3", None, "dims"),
])
def test_the_predicate_predicts_the_hosts_first_failure(nv, nk, dk, dv, dtype, state, chip, lengths, key):
    reason = caps.npu_chunk_refusal_reason(nv, nk, dk, dv, dtype, state, chip, lengths)
    expected = {None: None, "empty": caps.NPU_CHUNK_EMPTY_SEQUENCE}.get(key, TEXTS.get(key))
    assert reason == expected
    assert not caps.is_npu_chunk_refusal(RuntimeError(caps.NPU_CHUNK_EMPTY_SEQUENCE))  # never raised by the op


def test_the_host_checks_no_length_and_no_chunk_state_size():
    """The merged head reads no value on the host (no ``actual_seq_lengths->cpu()``): what the kernel
    then does with lengths it does not check.  An empty sequence: its final state is never written
    (``Process`` walks no chunk group for it; ``finalState`` is ``at::empty``), the others are right.
    Lengths summing below T: the tokens past them are never written.  Lengths summing past T, a
    negative length, or a chunk_state shorter than the ``sum(ceil(len / 64))`` rows the kernel writes:
    out of bounds (contract violations, not refusals)."""
    op = gdn_npu_chunk.make_npu_chunk_emulator(chip="A3")
    (q, k, v), kw = _args(T=70, lens=(30, 40))
    out, final = op(q, k, v, **{**kw, "chunk_state": kw["chunk_state"].clone()})
    out0, final0 = op(q, k, v, **{**kw, "actual_seq_lengths": torch.tensor([0, 30, 40], dtype=torch.int32),
                                 "initial_state": torch.cat([kw["initial_state"][:1], kw["initial_state"]])})
    assert torch.isnan(final0[0].float()).all()
    assert torch.equal(final0[1:], final) and torch.equal(out0, out)
    short, _ = op(q, k, v, **{**kw, "actual_seq_lengths": torch.tensor([30, 30], dtype=torch.int32)})
    assert torch.equal(short[:60], out[:60]) and torch.isnan(short[60:].float()).all()  # causal: same first 60
    for lens, what in (([30, 41], "past the end"), ([-1, 71], "negative")):
        with pytest.raises(EmulatorContractViolation, match=what):
            op(q, k, v, **{**kw, "actual_seq_lengths": torch.tensor(lens, dtype=torch.int32)})
    assert caps.npu_chunk_rows_written([30, 40]) == 2 and caps.npu_chunk_rows_written([65, 64, 0]) == 3
    op(q, k, v, **{**kw, "chunk_state": kw["chunk_state"][:2].clone()})  # exactly the rows it writes: fine
    with pytest.raises(EmulatorContractViolation, match="chunk_state has 1 rows, the kernel writes 2"):
        op(q, k, v, **{**kw, "chunk_state": kw["chunk_state"][:1].clone()})


def test_optional_arguments_as_the_host_treats_them():
    """scale defaults to 1.0, g absent means no gating, chunk_state absent means none written."""
    (q, k, v), kw = _args(lens=(70,), T=70)
    op = gdn_npu_chunk.make_npu_chunk_emulator()
    out_default, _ = op(q, k, v, **{**kw, "scale": None, "chunk_state": None})
    out_one, _ = op(q, k, v, **{**kw, "scale": 1.0, "chunk_state": None})
    assert torch.equal(out_default, out_one)
    out_nog, final_nog = op(q, k, v, **{**kw, "g": None, "chunk_state": None})
    out_zero, final_zero = op(q, k, v, **{**kw, "g": torch.zeros_like(kw["g"]), "chunk_state": None})
    assert torch.equal(out_nog, out_zero) and torch.equal(final_nog, final_zero)
    with pytest.raises(EmulatorContractViolation, match="chunk_state is not contiguous"):
        strided = torch.empty(kw["chunk_state"].shape[::-1], dtype=torch.bfloat16).permute(3, 2, 1, 0)
        op(q, k, v, **{**kw, "chunk_state": strided})


def _rounded_reference(qkv, kw):
    """Independent of the emulator's code: per 64-token chunk the fp32 recurrence from the stored
    state, then the decayed part rounded to bf16 and the sum rounded to bf16."""
    q, k, v = qkv
    lens = kw["actual_seq_lengths"].tolist()
    outs, finals, start = [], [], 0
    for s, length in enumerate(lens):
        S = kw["initial_state"][s]
        for c0 in range(start, start + length, 64):
            c1 = min(c0 + 64, start + length)
            o, end = naive_recurrent_gated_delta_rule(
                    q[None, c0:c1], k[None, c0:c1], v[None, c0:c1], kw["g"][None, c0:c1],
                                         kw["beta"][None, c0:c1], cu_seqlens=torch.tensor([0, c1 - c0]),
                                         initial_state=S.float()[None], scale=kw["scale"])
            decay = torch.exp(kw["g"][c0:c1].sum(0))[:, None, None]
            S = ((S.float() * decay).bfloat16().float() + (end[0] - S.float() * decay)).bfloat16()
            outs.append(o[0])
        finals.append(S)
        start += length
    return torch.cat(outs).bfloat16(), torch.stack(finals)


def test_a_bf16_state_is_rounded_to_bf16_at_every_64_token_chunk():
    (q, k, v), kw = _args(T=300, lens=(200, 100), state_scale=1.0)
    out, final = gdn_npu_chunk.make_npu_chunk_emulator(chip="A3")(q, k, v, **kw)
    ref_out, ref_final = _rounded_reference((q, k, v), kw)
    assert torch.equal(out, ref_out) and torch.equal(final, ref_final)
    # entering states of every chunk, sequence-major, exactly the rounded running state
    h = kw["chunk_state"]
    assert h.dtype == torch.bfloat16 and not torch.isnan(h[: math.ceil(200 / 64) + math.ceil(100 / 64)]).any()
    # the fp32 state of Ascend 950 is not rounded: the two differ, by about bf16's resolution
    kw32 = {**kw, "initial_state": kw["initial_state"].float(), "chunk_state": kw["chunk_state"].float()}
    out32, final32 = gdn_npu_chunk.make_npu_chunk_emulator(chip="950")(q, k, v, **kw32)
    assert final32.dtype == torch.float32 and not torch.equal(final32.bfloat16(), final)
    diff = float((final.float() - final32).abs().max() / final32.abs().max())
    assert 1e-4 < diff < 2e-2, diff


def test_the_rounding_stays_within_the_bf16_tolerances_the_ladder_tests_use():
    """Measured (2026-12-01) against an fp64 loop on bf16-rounded inputs, K = V = 16, one sequence,
    weak decay (mean g -0.0005 per token, the case where a rounded state is forgotten slowest):
    error / max(1, max |ref|) with the per-chunk rounding 2.3e-3 (output) and 3.0e-3 (final) at
    T = 1024 (without it 2.0e-3 / 3.0e-3); with realistic decay (mean g -0.4) both are unchanged.
    The delta rule pulls the state back towards v k^T, so rounding errors do not accumulate: the
    3e-2 (ladder variants) and 6e-2 (fuzz) tolerances keep a margin of 10x or more."""
    T, hk, hv, K = 1024, 2, 4, 16
    gen = torch.Generator().manual_seed(3)
    q = l2norm(torch.randn(1, T, hk, K, generator=gen)).bfloat16()
    k = l2norm(torch.randn(1, T, hk, K, generator=gen)).bfloat16()
    v = torch.randn(1, T, hv, K, generator=gen).bfloat16()
    g = F.logsigmoid(torch.randn(1, T, hv, generator=gen) + 8.0)
    beta = torch.rand(1, T, hv, generator=gen).bfloat16()
    h0 = (torch.randn(1, hv, K, K, generator=gen) * 0.3).bfloat16()
    out, final = gdn_npu_chunk.make_npu_chunk_emulator()(q[0], k[0], v[0], beta=beta[0], initial_state=h0,
                                               actual_seq_lengths=torch.tensor([T], dtype=torch.int32),
                                               scale=K ** -0.5, g=g[0])
    r = hv // hk
    qd, kd = q[0].double().repeat_interleave(r, 1), k[0].double().repeat_interleave(r, 1)
    S, ref = h0[0].double(), torch.empty(T, hv, K, dtype=torch.float64)
    for t in range(T):
        S = S * g[0, t].double().exp()[:, None, None]
        u = beta[0, t].double()[:, None] * (v[0, t].double() - torch.einsum("hvk,hk->hv", S, kd[t]))
        S = S + u[:, :, None] * kd[t][:, None, :]
        ref[t] = torch.einsum("hvk,hk->hv", S, qd[t] * K ** -0.5)
    assert float((out.double() - ref).abs().max()) <= 1e-2 * max(1.0, float(ref.abs().max()))
    assert float((final[0].double() - S).abs().max()) <= 1e-2 * max(1.0, float(S.abs().max()))


TEXTS = caps.NPU_CHUNK_TEXTS


def _chunk_args(T=70, lens=(30, 40), nk=2, nv=4, dk=32, dv=16, dtype=torch.bfloat16, state_dtype=torch.bfloat16,
                seed=0, state_scale=0.1):
    """The op's arguments: flat q / k / v ``[T, H, D]``, bf16 beta and fp32 g ``[T, Hv]``, the state and a
    chunk-state scratch of the op's minimum size."""
    assert T == sum(lens), (T, lens)
    x = gdn_inputs.packed(lens, seed=seed, hv=nv, hk=nk, k_dim=dk, v_dim=dv, dtype=dtype, beta_dtype=torch.bfloat16,
                          state_scale=state_scale, state_dtype=state_dtype, flat_qkv=True)
    B = len(lens)
    chunk_state = torch.empty(caps.npu_chunk_min_chunk_states(T, B), nv, dv, dk, dtype=state_dtype)
    return (x.q, x.k, x.v), dict(beta=x.beta[0], initial_state=x.state,
                                 actual_seq_lengths=torch.tensor(lens, dtype=torch.int32), scale=dk ** -0.5,
                                 chunk_state=chunk_state, g=x.g[0])


def test_chunk_op_semantics_out_final_and_entering_chunk_states():
    (q, k, v), kw = _chunk_args()
    op = gdn_npu_chunk.make_npu_chunk_emulator(chip="A3")
    out, final = op(q, k, v, **kw)
    assert out.dtype == torch.bfloat16 and out.shape == (70, 4, 16)
    assert final.dtype == torch.bfloat16 and final.shape == (2, 4, 16, 32)
    cu = torch.tensor([0, 30, 70])
    ref_o, ref_final = naive_recurrent_gated_delta_rule(q[None], k[None], v[None], kw["g"][None], kw["beta"][None],
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
