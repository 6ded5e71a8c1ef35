"""Edges of the GDN verbs the other GDN op tests leave open: the exact texts of the decode and verify
input errors, which exceptions count as a decode kernel's refusal, the static decode plan, the decode
layout probe and the prefill chunk-stride probe (keyed by every field of their signatures, called as
serving calls the kernel, their inputs on the probed device in the probed dtypes), the verify ladder's
initial rows (clamped to the scratch's own row count), the recurrent op's inputs (accepted tokens, no
gates), its refusal line, the torch verify path's writes, and the decode step's block size on a CPU.

Device placement is checked under ``FakeTensorMode`` with a fake ``cuda`` device standing in for the
NPU: a tensor built on another device than its inputs' raises there, as it would on the NPU."""

from __future__ import annotations

import dataclasses
import logging
import math

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from sglang_ascend_hybrid.emulators import gdn_decode, gdn_npu_recurrent, gdn_sets
from sglang_ascend_hybrid.ops import probes, seam
from sglang_ascend_hybrid.ops.gdn import decode, pool_step
from sglang_ascend_hybrid.ops.gdn import verify as gv
from sglang_ascend_hybrid.ops.gdn.contract import OP_NPU_RECURRENT, OP_TRITON
from sglang_ascend_hybrid.ops.gdn.decode import contract as dc
from sglang_ascend_hybrid.ops.gdn.decode import ladder as decode_ladder
from sglang_ascend_hybrid.ops.gdn.decode import probe as decode_probe
from sglang_ascend_hybrid.ops.gdn.prefill import chunk_stride_probe as csp
from sglang_ascend_hybrid.ops.gdn.signature import GdnSignature
from sglang_ascend_hybrid.ops.ladder import Absent
from tests.ops.gdn.decode.test_gdn_decode_ladder import ENTRY, _device
from tests.ops.gdn.decode.test_gdn_decode_ladder import _call as _decode_call
from tests.ops.gdn.decode.test_gdn_decode_ladder import _inputs as _decode_inputs
from tests.ops.gdn.verify.test_gdn_verify import DK, DV, NK, NV, _case, _max_rel, _oracle
from tests.ops.gdn.verify.test_gdn_verify import _call as _verify_call
from tests.support import gdn_inputs


class _Stop(Exception):
    """Raised by a recording stand-in kernel once it has seen its inputs."""


def _fake_device():
    return FakeTensorMode(allow_non_fake_inputs=True)


def _placed(kwargs) -> dict:
    return {n: (t.device.type, t.dtype) for n, t in kwargs.items() if isinstance(t, torch.Tensor)}


def _error(fn, *args, **kwargs) -> str:
    with pytest.raises(ValueError) as exc:
        fn(*args, **kwargs)
    return str(exc.value)


# ================================================================ decode: input checks


def test_a_non_tensor_argument_is_shown_by_its_repr():
    x = _decode_inputs(3)
    for name, value, shown in (("q", 3.5, "3.5"), ("a", "gates", "'gates'"), ("pool", [1, 2], "[1, 2]")):
        call = dataclasses.replace(_decode_call(x, [1, 3, 4]), **{name: value})
        assert _error(decode.check_decode_inputs, call) == f"GDN decode: {name}={shown}: expected a torch.Tensor"


class _Offsets:
    """An offsets object that is not a tensor but passes the dtype rule (a caller's own wrapper)."""

    dtype = torch.int32

    def dim(self):
        return 1

    def numel(self):
        return 2

    def __repr__(self):
        return "_Offsets([0, 1])"


def test_wrong_offsets_that_are_not_a_tensor_are_shown_by_their_repr():
    call = dataclasses.replace(_decode_call(_decode_inputs(3), [1, 3, 4]), query_start_loc=_Offsets())
    assert _error(decode.check_decode_inputs, call) == (
        "GDN decode: query_start_loc=_Offsets([0, 1]): expected [4] (B + 1 offsets, B = 3)")


def test_bad_offsets_error_says_the_whole_rule():
    call = _decode_call(_decode_inputs(3), [1, 3, 4], torch.tensor([0, 1, 1, 2], dtype=torch.int32))
    assert _error(decode.check_decode_values, call) == (
        "GDN decode: query_start_loc=[0, 1, 1, 2]: expected offsets from 0 with lengths 0 or 1, request n's "
        "token in q row n (padding of length 0 only after the last live request)")


# ================================================================ decode: refusals and the static plan


@pytest.mark.parametrize("exc,refusal", [
    (AssertionError("NK > 1 is not supported"), True),
    (RuntimeError("scale must be positive"), True),
    (AssertionError("assert scale must be positive, got -1"), True),
    (ValueError("scale must be positive"), False),        # the kernel's text, not the kernel's exception type
    (TypeError("NK > 1 is not supported"), False),
    (AssertionError("some other assertion"), False),      # the kernel's exception type, not its text
    (RuntimeError("NPU out of memory"), False),
])
def test_only_the_decode_kernels_own_assertions_are_refusals(exc, refusal):
    assert dc.is_decode_refusal(exc) is refusal


def test_static_decode_plan_names_the_triton_rungs_probe_and_gives_none_where_a_rung_serves():
    sig = GdnSignature(4, 2, 128, 128, torch.bfloat16, state_dtype=torch.bfloat16)
    assert decode.decode_static_reasons(sig, "optimized") == [
        ("triton_decode", None, True), ("npu_recurrent", None, False), ("torch", None, False)]
    odd = GdnSignature(3, 1, 128, 128, torch.bfloat16, state_dtype=torch.float32)
    assert decode.decode_static_reasons(odd, "generic") == [
        ("triton_decode", "the generic kernel computes value heads in pairs and skips the last of 3", False),
        ("npu_recurrent", "the op is bf16-only and reinterprets other dtypes silently", False),
        ("torch", None, False)]
    (name, reason, probe), *_ = decode.decode_static_reasons(sig, None)
    assert (name, probe) == ("triton_decode", False) and type(reason) is str
    assert reason == "the installed SGLang imports no sgl-kernel-npu Triton decode entry the plugin knows"


# ================================================================ decode: the layout probe


def test_the_ladder_probes_each_q_dtype_apart():
    with _device("value_first"):
        for dtype in (torch.bfloat16, torch.float32):
            decode.run_decode(_decode_call(_decode_inputs(2, dtype=dtype), [1, 3]))
    assert probes.runs(decode_probe.PROBE.name) == 2
    assert sorted(v.signature for v in probes.all_verdicts()) == [
        "optimized q=bfloat16 pool=float32 K=16 V=16", "optimized q=float32 pool=float32 K=16 V=16"]


def test_the_layout_probe_is_keyed_by_the_key_head_dim():
    with _device("value_first"):
        a = decode_probe.layout_verdict(ENTRY, torch.bfloat16, torch.float32, 16, 16, "cpu", before_serving=True)
        b = decode_probe.layout_verdict(ENTRY, torch.bfloat16, torch.float32, 32, 16, "cpu", before_serving=True)
    assert probes.runs(decode_probe.PROBE.name) == 2
    assert a.signature == "optimized q=bfloat16 pool=float32 K=16 V=16"
    assert b.signature == "optimized q=bfloat16 pool=float32 K=32 V=16"
    assert a.verdict == b.verdict == dc.VALUE_FIRST


def test_the_layout_probe_calls_the_kernel_with_the_serving_calls_settings():
    settings = []
    real = gdn_decode.make_triton_decode_emulator(ENTRY, layout="value_first")

    def kernel(**kw):
        settings.append({n: v for n, v in kw.items() if not isinstance(v, torch.Tensor)})
        return real(**kw)

    with seam.install_emulators({dc.OP_DECODE_OPTIMIZED: kernel}):
        decode.run_decode(_decode_call(_decode_inputs(2), [1, 3]))
    probe_call, serving_call = settings   # the probe runs first, from the rung's predicate
    assert probe_call == serving_call == dict(softplus_beta=1.0, softplus_threshold=20.0,
                                              use_qk_l2norm_in_kernel=True)


def test_the_layout_probe_hands_the_kernel_every_input_on_the_probed_device():
    seen = {}

    def kernel(**kw):
        seen.update(_placed(kw))
        raise _Stop

    with seam.install_emulators({dc.OP_DECODE_OPTIMIZED: kernel}), _fake_device(), pytest.raises(_Stop):
        decode_probe.measure(ENTRY, torch.bfloat16, torch.float32, 16, 16, "cuda")
    bf16, f32, i32 = ("cuda", torch.bfloat16), ("cuda", torch.float32), ("cuda", torch.int32)
    assert seen == dict(A_log=f32, a=bf16, dt_bias=bf16, q=bf16, k=bf16, v=bf16, b=bf16, initial_state_source=f32,
                        initial_state_indices=i32, cu_seqlens=i32)


def test_without_offsets_the_triton_rung_builds_them_on_qs_device():
    x = _decode_inputs(3)
    seen = {}

    def kernel(**kw):
        seen.update(_placed(kw))
        return kw["q"].new_zeros(1, 3, 4, 16)

    with seam.install_emulators({dc.OP_DECODE_OPTIMIZED: kernel}), _fake_device():
        on = {n: t.to("cuda") for n, t in x.items()}
        call = decode.DecodeCall(on["q"], on["k"], on["v"], on["a"], on["b"], on["A_log"], on["dt_bias"], on["pool"],
                                 torch.tensor([1, 3, 4], dtype=torch.int32).to("cuda"), None, entry=ENTRY)
        o = decode_ladder._triton_run(call)
    assert seen["cu_seqlens"] == ("cuda", torch.int32) and o.shape == (3, 4, 16)


# ================================================================ prefill: the chunk-stride probe


def test_the_stride_probes_verdict_carries_every_field_of_its_signature(monkeypatch):
    for name in csp.ENV_READ:
        monkeypatch.delenv(name, raising=False)
    want = "(Hv, Hk)=(2, 1) K=16 V=32 bfloat16 GDN_USE_MEGA_GDN=,GDN_ATTN_BACKEND_TRITON="
    assert csp.signature(2, 1, 16, 32, torch.bfloat16) == want
    with seam.install_emulators(gdn_sets.emulators(triton=True, environ={})):
        v = csp.stride_verdict(2, 1, 16, 32, torch.bfloat16, "cpu", before_serving=True)
    assert (v.signature, v.verdict, v.usable) == (want, csp.STRIDE_64, True)
    assert [r.signature for r in probes.all_verdicts()] == [want]


def test_the_stride_probe_hands_the_entry_its_inputs_on_the_device_in_the_probed_dtype():
    seen = {}

    def entry(q, k, v, g, beta, **kw):
        seen.update(_placed(dict(q=q, k=k, v=v, g=g, beta=beta, cu_seqlens=kw["cu_seqlens"])))
        raise _Stop

    with seam.install_emulators({OP_TRITON: entry}), _fake_device(), pytest.raises(_Stop):
        csp.measure(2, 1, 16, 16, torch.bfloat16, "cuda", environ={})
    bf16 = ("cuda", torch.bfloat16)
    assert seen == dict(q=bf16, k=bf16, v=bf16, g=("cuda", torch.float32), beta=bf16,
                        cu_seqlens=("cuda", torch.int64))


# ================================================================ verify: input checks


def test_verify_input_errors_name_the_argument_the_value_and_what_was_expected():
    call = _verify_call(_case(2, 3))
    assert _error(gv.check_verify_inputs, dataclasses.replace(call, recurrent_state=call.recurrent_state[:, :3])) == (
        "recurrent_state=(5, 3, 16, 32): expected [slots, nv=4, dv, dk]")
    floats = call.ssm_state_indices.float()
    assert _error(gv.check_verify_inputs, dataclasses.replace(call, ssm_state_indices=floats)) == (
        "ssm_state_indices=(2, 3) torch.float32: expected an integer tensor [2, 3]")
    accepted = torch.ones(3, dtype=torch.int32)
    assert _error(gv.check_verify_inputs, dataclasses.replace(call, num_accepted_tokens=accepted)) == (
        "num_accepted_tokens=(3,) torch.int32: expected an integer tensor of 2 entries")


def test_a_state_row_past_the_scratch_is_refused_naming_the_rows():
    c = _case(2, 3)
    c["idx"][1, 2] = 99
    assert _error(gv.check_verify_values, _verify_call(c)) == (
        "ssm_state_indices=[[0, 1, 2], [3, 4, 99]]: expected rows in [0, 9) or -1 (padding)")


# ================================================================ verify: initial rows, the op's inputs


def _scratch_case(dtype, accepted, *, with_g=True):
    """A verify step resuming from the scratch (``accepted - 1`` not a step boundary): the scratch holds
    the previous step's states."""
    c = _case(2, 3, seed=21, dtype=dtype, pool_dtype=dtype, accepted=accepted, with_g=with_g)
    c["inter"] = (torch.randn(c["inter"].shape, generator=torch.Generator().manual_seed(22)) * 0.3).to(dtype)
    return c


@pytest.mark.parametrize("rung,dtype,tol", [("torch", torch.float32, 1e-5),
                                            ("npu_recurrent", torch.bfloat16, 2e-2)])
def test_a_later_accepted_token_starts_from_its_own_scratch_row(rung, dtype, tol):
    """Request 1 resumes from scratch row 5, past the head count (4): the row is clamped to the scratch's
    rows, and the recurrent op is told the accepted tokens."""
    c = _scratch_case(dtype, [2, 3])
    ref_out, _, ref_inter = _oracle(c)
    inter = c["inter"].clone()
    with seam.install_emulators({OP_NPU_RECURRENT: gdn_npu_recurrent.make_npu_recurrent_emulator()}):
        out = gv.recurrent_verify(_verify_call(c, inter=inter), backend=rung)
    assert _max_rel(out, ref_out) < tol and _max_rel(inter, ref_inter) < tol


def test_the_recurrent_op_serves_a_step_without_gates():
    c = _scratch_case(torch.bfloat16, [1, 2], with_g=False)
    ref_out, _, ref_inter = _oracle(c)
    inter = c["inter"].clone()
    with seam.install_emulators({OP_NPU_RECURRENT: gdn_npu_recurrent.make_npu_recurrent_emulator()}):
        out = gv.recurrent_verify(_verify_call(c, inter=inter), backend="npu_recurrent")
    assert _max_rel(out, ref_out) < 2e-2 and _max_rel(inter, ref_inter) < 2e-2


def test_out_of_range_initial_rows_are_read_in_bounds_without_value_checks():
    """Unchecked (a captured step), a slot past the pool reads its last row and a scratch row past the
    scratch its last row: no gather leaves the tensors."""
    c = _case(2, 3, seed=23, dtype=torch.float32, pool_dtype=torch.float32)
    n = c["pool"].shape[0]
    past, last = dict(c, cache=torch.tensor([1, n + 2], dtype=torch.int32)), dict(c, cache=torch.tensor([1, n - 1]))
    outs = []
    for case in (past, last):
        inter = case["inter"].clone()
        outs.append((gv.recurrent_verify(_verify_call(case, inter=inter), backend="torch", check_values=False), inter))
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])

    c = _scratch_case(torch.float32, [1, 2])
    c["idx"][1, 1] = 10                        # scratch of 9 rows; 10 is not a step boundary: read from the scratch
    inter, pool = c["inter"].clone(), c["pool"].clone()
    out = gv.recurrent_verify(_verify_call(c, pool=pool, inter=inter), backend="torch", check_values=False)
    assert torch.isfinite(out).all() and torch.equal(pool, c["pool"])
    assert torch.equal(inter[6:], c["inter"][6:])   # rows no request names: nothing written there


def test_the_torch_verify_path_never_writes_past_its_target():
    """An unchecked state row equal to the scratch's row count is skipped like padding, not clamped onto
    the last row."""
    c = _case(2, 3, seed=24, dtype=torch.float32, pool_dtype=torch.float32)
    rows = c["inter"].shape[0]
    results = []
    for row in (rows, -1):
        idx = c["idx"].clone()
        idx[1, 2] = row
        inter = c["inter"].clone()
        inter[-1] = 5.0
        gv.recurrent_verify(_verify_call(dict(c, idx=idx), inter=inter), backend="torch", check_values=False)
        results.append(inter)
    assert torch.equal(results[0], results[1])
    assert torch.equal(results[0][-1], torch.full_like(results[0][-1], 5.0))


def test_verify_index_helpers_build_their_tensors_on_the_indices_device():
    c = _case(2, 3)
    with _fake_device():
        on = {n: t.to("cuda") if isinstance(t, torch.Tensor) else t for n, t in c.items()}
        call = dataclasses.replace(_verify_call(on), num_accepted_tokens=None)
        pool_rows, scratch_rows, first = gv._initial_rows(call)
        row = gv._padding_row(call.ssm_state_indices, call.intermediate_state.shape[0])
    assert {t.device.type for t in (pool_rows, scratch_rows, first, row)} == {"cuda"}


# ================================================================ verify: the recurrent op's predicate and refusal


def test_a_real_recurrent_op_serves_npu_tensors_only():
    from types import SimpleNamespace as NS

    call = _verify_call(_case(2, 3))
    sig = call.signature()
    on_npu = NS(device=NS(type="npu"), shape=call.mix_qkv.shape, dtype=call.mix_qkv.dtype)
    with seam.install_real_kernels({OP_NPU_RECURRENT: lambda *a, **kw: None}):
        assert gv._npu_supports(sig, dataclasses.replace(call, mix_qkv=on_npu)) is None
        absent = gv._npu_supports(sig, call)
    assert isinstance(absent, Absent) and "is not installed for these tensors" in absent


def test_a_short_scratch_is_refused_in_one_line_naming_its_rows_and_the_kept_dtype(caplog):
    caplog.set_level(logging.INFO, logger="sglang_ascend_hybrid")
    c = _case(2, 3, seed=25)
    c["idx"] = torch.tensor([[0, 1, 2], [3, 4, -1]], dtype=torch.int32)
    call = _verify_call(c, inter=torch.zeros(5, NV, DV, DK, dtype=torch.bfloat16))
    assert call.signature() == GdnSignature(NV, NK, DK, DV, torch.bfloat16, state_dtype=torch.bfloat16)
    with seam.install_emulators({OP_NPU_RECURRENT: gdn_npu_recurrent.make_npu_recurrent_emulator()}):
        gv.recurrent_verify(call)
    assert (
        "sglang-ascend-hybrid: GDN verify (NumValueHeads, NumKeyHeads)=(4, 2) K=32 V=16 bfloat16 state=bfloat16 "
        "cannot use torch.ops.npu.recurrent_gated_delta_rule: the intermediate-state scratch has 5 rows, fewer "
        "than B*S = 6: no row is sure to be free for its padding writes; using the torch verify path (fp32 "
        "compute, states kept in bfloat16)") in caplog.messages


# ================================================================ decode: the step's blocks on a CPU


def test_a_cpu_decode_step_takes_as_many_requests_per_block_as_fp32_states_fit(monkeypatch):
    """The CPU block budget counts fp32 state bytes: a budget of three requests' states gives blocks of three."""
    B, Hk, Hv, K, V = 6, 1, 2, 8, 8
    monkeypatch.setattr(pool_step, "CPU_BLOCK_BYTES", 3 * Hv * V * K * 4)
    blocks = []
    real = pool_step.scatter_live_rows
    monkeypatch.setattr(pool_step, "scatter_live_rows", lambda pool, rows, live, S: blocks.append(len(rows))
                        or real(pool, rows, live, S))
    gen = torch.Generator().manual_seed(26)
    pool = torch.randn(B, Hv, V, K, generator=gen)
    o = pool_step.step_on_pool(torch.randn(B, Hk, K, generator=gen), torch.randn(B, Hk, K, generator=gen),
                               torch.randn(B, Hv, V, generator=gen), -torch.rand(B, Hv, generator=gen),
                               torch.rand(B, Hv, generator=gen), pool, torch.arange(B), torch.ones(B, dtype=torch.bool),
                               scale=K ** -0.5)
    assert blocks == [3] * math.ceil(B / 3) and torch.isfinite(o).all()


def test_host_offsets_stand_for_cu_seqlens_and_are_checked_like_it():
    """``chunk_with_states(host_offsets=...)``: the caller's host copy of cu_seqlens is used instead of
    reading it again, and is checked like it (its length, its values against T)."""
    from sglang_ascend_hybrid.ops.gdn.api import chunk_with_states

    x = gdn_inputs.packed([3, 5], seed=11, hv=2, hk=2, k_dim=8).prefill()
    q, k, v, g, beta, cu, h0 = x
    ref = chunk_with_states(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0, backend="torch")
    got = chunk_with_states(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0, backend="torch",
                            host_offsets=[0, 3, 8])
    assert torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1])
    with pytest.raises(ValueError, match=r"host_offsets=\[0, 8\]: expected cu_seqlens read on the host: 3 offsets"):
        chunk_with_states(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0, host_offsets=[0, 8])
    with pytest.raises(ValueError, match=r"cu_seqlens=\[0, 3, 9\]: expected non-decreasing offsets from 0 to T=8"):
        chunk_with_states(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0, host_offsets=[0, 3, 9])
