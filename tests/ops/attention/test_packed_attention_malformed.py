"""Malformed input to packed attention: a ValueError naming the argument, its value and what was
expected, on every path; and the
host-boundary contract (trusted without a sync; compared under SGLANG_ASCEND_HYBRID_DEBUG_CHECKS=1)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang_ascend_hybrid.emulators import fused_infer_attention as emu
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.attention.api import fused_infer_attention_varlen
from sglang_ascend_hybrid.ops.attention.cases import packed_case
from sglang_ascend_hybrid.ops.attention.inputs import OP
from sglang_ascend_hybrid.ops.attention.torch_impl import packed_attention_torch
from tests.ops.attention import test_packed_attention_dispatch as sync_tools
from tests.support.input_errors import assert_form

INT_DTYPES = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool]
FLOAT_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
NO_HEADS = "expected at least one head and a head dimension >= 1"


def _shape(t) -> str:
    return f"shape {tuple(t.shape)} {str(t.dtype).replace('torch.', '')}"


def _call(args, kwargs, emulated):
    with seam.install_emulators(emu.emulators() if emulated else {}):
        return fused_infer_attention_varlen(*args, **kwargs)


# Each corruption: (data) -> (args, kwargs, the argument the message names, a part of its value or expectation).
def _corrupt(kind, data, case):
    q, k, v, cq, ck = case.args()
    kw = case.kwargs(host=data.draw(st.booleans()))
    tensors = {"q": q, "k": k, "v": v}
    which = data.draw(st.sampled_from(["q", "k", "v"]))
    side = data.draw(st.sampled_from(["q", "k"]))
    cu = {"q": cq, "k": ck}
    bounds = {"q": case.q_bounds, "k": case.k_bounds}

    def with_tensor(name, t):
        return {**tensors, name: t}

    if kind == "int_dtype":
        dt = data.draw(st.sampled_from(INT_DTYPES))
        t = with_tensor(which, tensors[which].to(dt))
        return (t["q"], t["k"], t["v"], cq, ck), kw, f"{which}.dtype", f"={dt}: expected a floating-point dtype"
    if kind == "mixed_float":
        dt = data.draw(st.sampled_from([d for d in FLOAT_DTYPES if d != q.dtype]))
        t = with_tensor(which, tensors[which].to(dt))
        if which == "q":  # then k is the first tensor of another dtype than q's
            return (t["q"], t["k"], t["v"], cq, ck), kw, "k.dtype", f"={k.dtype}: expected q's dtype ({dt})"
        return (t["q"], t["k"], t["v"], cq, ck), kw, f"{which}.dtype", f"={dt}: expected q's dtype ({q.dtype})"
    if kind == "rank":
        bad = tensors[which].unsqueeze(0) if data.draw(st.booleans()) else tensors[which].flatten(1)
        t = with_tensor(which, bad)
        return (t["q"], t["k"], t["v"], cq, ck), kw, which, f"={_shape(bad)}: expected a 3D tensor in [T, N, D] layout"
    if kind == "not_tensor":
        t = with_tensor(which, tensors[which].tolist())
        return (t["q"], t["k"], t["v"], cq, ck), kw, which, "=[["
    if kind == "zero_dim":
        dim = data.draw(st.sampled_from([1, 2]))
        if which == "q" and dim == 2:
            q0, k0 = q.narrow(2, 0, 0), k.narrow(2, 0, 0)  # keep Q/K head dims equal
            return (q0, k0, v, cq, ck), kw, "q", f"={_shape(q0)}: {NO_HEADS}"
        if which in ("k", "v") and dim == 1:
            k0 = k.narrow(1, 0, 0)
            return (q, k0, v.narrow(1, 0, 0), cq, ck), kw, "k", f"={_shape(k0)}: {NO_HEADS}"
        if which == "k":
            which = "v"  # k's D must match q's: take v's
        t = with_tensor(which, tensors[which].narrow(dim, 0, 0))
        return (t["q"], t["k"], t["v"], cq, ck), kw, which, f"={_shape(t[which])}: {NO_HEADS}"
    if kind == "kv_tokens":
        return (q, k, v[:-1], cq, ck), kw, "v", f"={_shape(v[:-1])}: expected k's token and head counts [T, N] = "
    if kind == "gqa":
        return (q[:, :3], k, v, cq, ck), kw, "q", ": expected a head count that is a multiple of the key/value head " \
            "count (2)"
    if kind == "qk_dim":
        k1 = k[..., :-1]
        return (q, k1, v[..., :-1], cq, ck), kw, "k", f"={_shape(k1)}: expected q's head dimension D = "
    name = f"cu_seqlens_{side}"
    if kind == "cu_dtype":
        bad = cu[side].to(data.draw(st.sampled_from([torch.float32, torch.int16, torch.uint8, torch.bool])))
        new = {**cu, side: bad}
        return (q, k, v, new["q"], new["k"]), kw, f"{name}.dtype", f"={bad.dtype}: expected torch.int32 or torch.int64"
    if kind == "cu_rank":
        new = {**cu, side: cu[side][None]}
        return (q, k, v, new["q"], new["k"]), kw, name, f"={_shape(new[side])}: expected a 1D int32 or int64 tensor"
    if kind == "cu_not_tensor":
        new = {**cu, side: list(bounds[side])}
        return (q, k, v, new["q"], new["k"]), kw, name, f"={list(bounds[side])}: expected a 1D int32 or int64 tensor"
    if kind == "cu_missing":
        new = {**cu, side: None}
        return (q, k, v, new["q"], new["k"]), kw, name, "=None: expected a 1D int32 or int64 tensor"
    if kind == "bad_bounds":
        b = list(bounds[side])
        how = data.draw(st.sampled_from(["start", "end", "decrease"]))
        if how == "start":
            b[0] = data.draw(st.sampled_from([1, -1]))
        elif how == "end":
            b[-1] += data.draw(st.sampled_from([1, -1]))
        else:
            b[1] = b[-1] + 1  # bounds[1] > bounds[-1] >= bounds[2]: a decrease (or a wrong end)
        new_cu = torch.tensor(b, dtype=cu[side].dtype)
        new = {**cu, side: new_cu}
        host_kw = {**kw}
        if f"{name}_host" in host_kw:  # the host copy is what is checked: the message names it
            host_kw[f"{name}_host"] = tuple(b)
            name = f"{name}_host"
        return (q, k, v, new["q"], new["k"]), host_kw, name, f"={b}: expected "
    if kind == "host_len":
        return (q, k, v, cq, ck), {**kw, f"{name}_host": tuple(bounds[side][:-1])}, f"{name}_host", \
            f"={list(bounds[side][:-1])}: expected {len(bounds[side])} entries, as many as {name} has"
    if kind == "host_type":
        bad = data.draw(st.sampled_from([
            [float(x) for x in bounds[side]], [str(x) for x in bounds[side]], "0,1", 3,
            [None] * len(bounds[side]), [True] + [0] * (len(bounds[side]) - 1),
            torch.tensor(bounds[side], dtype=torch.float32), torch.tensor([bounds[side]]),
            torch.tensor(bounds[side], device="meta")]))
        on_device = isinstance(bad, torch.Tensor) and bad.device.type != "cpu"
        return (q, k, v, cq, ck), {**kw, f"{name}_host": bad}, f"{name}_host" + (".device" if on_device else ""), \
            ": expected "
    if kind == "batch":
        extra = torch.cat([ck, ck[-1:]])
        kw2 = {**kw, "cu_seqlens_k_host": (*case.k_bounds, case.k_bounds[-1])} if "cu_seqlens_k_host" in kw else kw
        return (q, k, v, cq, extra), kw2, "cu_seqlens_k", \
            f": expected {len(case.q_bounds) - 1} sequences, the batch cu_seqlens_q describes"
    if kind == "scale":
        return (q, k, v, cq, ck), {**kw, "softmax_scale": data.draw(st.sampled_from(
            [math.nan, math.inf, -math.inf, "0.5", True, [0.5]]))}, \
            "softmax_scale", ": expected a finite number or None"
    raise AssertionError(kind)


KINDS = ["int_dtype", "mixed_float", "rank", "not_tensor", "zero_dim", "kv_tokens", "gqa", "qk_dim",
         "cu_dtype", "cu_rank", "cu_not_tensor", "cu_missing", "bad_bounds", "host_len", "host_type",
         "batch", "scale"]


@pytest.mark.parametrize("kind", KINDS)
def test_fuzzed_malformed_inputs_raise_value_error_naming_the_argument(kind):
    ran = [0]

    @settings(max_examples=25, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(lens=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)), min_size=1, max_size=3),
           dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float16]),
           emulated=st.booleans(), data=st.data())
    def check(lens, dtype, emulated, data):
        lens = [(2, 2), *lens]  # at least one query and one key token, so slicing removes something
        case = packed_case([a for a, _ in lens], [b for _, b in lens], num_heads=4, num_kv_heads=2,
                           head_dim=8, dtype=dtype, seed=len(lens))
        args, kwargs, name, needle = _corrupt(kind, data, case)
        with pytest.raises(ValueError) as info:
            _call(args, kwargs, emulated)
        assert_form(info.value, OP, name)
        assert needle in str(info.value), (kind, str(info.value))
        ran[0] += 1

    check()
    assert ran[0] >= 20


@pytest.mark.parametrize("dtype", INT_DTYPES)
@pytest.mark.parametrize("emulated", [False, True])
def test_integer_qkv_are_refused_on_every_path(dtype, emulated):
    """The CPU reference path used to compute attention on integer tensors."""
    case = packed_case([3, 2], [2, 4])
    args = (case.q.to(dtype), case.k.to(dtype), case.v.to(dtype), case.cu_seqlens_q, case.cu_seqlens_k)
    with pytest.raises(ValueError, match=rf"^{OP}: q\.dtype={dtype}: expected a floating-point dtype$"):
        _call(args, case.kwargs(), emulated)


# ---------------------------------------------------------------------------
# Host-boundary contract
# ---------------------------------------------------------------------------

def _disagreeing():
    """Host copies that pass every check but disagree with the device tensors."""
    case = packed_case([3, 2], [2, 4], dtype=torch.bfloat16, seed=3)
    host_q, host_k = (0, 1, 5), (0, 5, 6)
    return case, host_q, host_k


@pytest.mark.parametrize("emulated", [False, True])
def test_host_copy_is_trusted_without_debug_checks(monkeypatch, emulated):
    monkeypatch.delenv("SGLANG_ASCEND_HYBRID_DEBUG_CHECKS", raising=False)
    case, host_q, host_k = _disagreeing()
    out, lse = _call(case.args(), {"cu_seqlens_q_host": host_q, "cu_seqlens_k_host": host_k,
                                   "softmax_scale": case.scale, "return_softmax_lse": True}, emulated)
    # the documented result: attention over the boundaries the host copies describe
    ref_out, ref_lse = packed_attention_torch(case.q, case.k, case.v, host_q, host_k, case.scale)
    torch.testing.assert_close(out, ref_out, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(lse, ref_lse, atol=1e-3, rtol=1e-3)
    dev_out, _ = packed_attention_torch(case.q, case.k, case.v, case.q_bounds, case.k_bounds, case.scale)
    assert not torch.allclose(out.float(), dev_out.float(), atol=1e-2)  # so the test can tell them apart


@pytest.mark.parametrize("emulated", [False, True])
@pytest.mark.parametrize("side", ["q", "k"])
def test_debug_checks_compare_the_host_copy(monkeypatch, emulated, side):
    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_DEBUG_CHECKS", "1")
    case, host_q, host_k = _disagreeing()
    kwargs = case.kwargs()
    kwargs[f"cu_seqlens_{side}_host"] = host_q if side == "q" else host_k
    device = list(case.q_bounds if side == "q" else case.k_bounds)
    host = list(kwargs[f"cu_seqlens_{side}_host"])
    with pytest.raises(ValueError) as info:
        _call(case.args(), kwargs, emulated)
    assert str(info.value) == (
        f"{OP}: cu_seqlens_{side}_host={host}: expected the values of cu_seqlens_{side}, {device} "
        "(SGLANG_ASCEND_HYBRID_DEBUG_CHECKS=1 compares them; without it the host copy is trusted)")
    # agreeing copies pass, with the same result as without the checks
    out, lse = _call(case.args(), case.kwargs(), emulated)
    monkeypatch.delenv("SGLANG_ASCEND_HYBRID_DEBUG_CHECKS")
    out2, lse2 = _call(case.args(), case.kwargs(), emulated)
    assert torch.equal(out, out2) and torch.equal(lse, lse2)


@pytest.mark.parametrize("debug,expected", [("0", []), ("1", ["tolist", "tolist"])])
def test_host_copies_cost_no_sync_unless_debug_checks(monkeypatch, debug, expected):
    """Without DEBUG_CHECKS a host copy means no device read at all; with it, one .tolist() per
    side (the comparison).  Device tensors are stand-ins recording every host read."""
    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_DEBUG_CHECKS", debug)
    case = packed_case([3, 0, 2, 4], [1, 4, 0, 2], dtype=torch.bfloat16, seed=8)
    args = [sync_tools._standin(t) for t in case.args()]
    sync_tools.SYNCS.clear()
    with seam.install_emulators({emu.OP_NAME: sync_tools.PausingEmulator()}):
        sync_tools.COUNTING[0] = True
        try:
            fused_infer_attention_varlen(*args, **case.kwargs(host=True))
        finally:
            sync_tools.COUNTING[0] = False
    assert sync_tools.SYNCS == expected


def test_host_copy_may_be_a_cpu_tensor_or_a_list():
    case = packed_case([3, 2], [2, 4])
    ref = fused_infer_attention_varlen(*case.args(), **case.kwargs(host=False))
    for host_q, host_k in ((torch.tensor(case.q_bounds), torch.tensor(case.k_bounds)),
                           (list(case.q_bounds), list(case.k_bounds))):
        out = fused_infer_attention_varlen(*case.args(), cu_seqlens_q_host=host_q, cu_seqlens_k_host=host_k,
                                           softmax_scale=case.scale, return_softmax_lse=True)
        assert torch.equal(out[0], ref[0]) and torch.equal(out[1], ref[1])


def test_zero_heads_message_names_the_shape():
    q = torch.zeros(3, 0, 8)
    with pytest.raises(ValueError, match=rf"^{OP}: q=shape \(3, 0, 8\) float32: {NO_HEADS}$"):
        fused_infer_attention_varlen(q, q, q, torch.tensor([0, 3]), torch.tensor([0, 3]))
