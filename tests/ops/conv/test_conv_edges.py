"""Edges of the short-conv ops the other conv tests leave open: what the call signature is keyed
by (pools, dtypes), which tensors the device predicates read, what the rungs hand the kernels
(bias dtype, offsets dtype and device), the tiling record against the op's own cache, the
refusal and input-error texts, the accepted activation names, and the fp64 oracle's history."""

from __future__ import annotations

import dataclasses
import logging
import re
from types import SimpleNamespace as NS

import pytest
import torch

from sglang_ascend_hybrid.emulators import causal_conv1d as emu
from sglang_ascend_hybrid.integration.conv_state_layout import cuda_layout_view
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.conv import api as ops
from sglang_ascend_hybrid.ops.conv import dispatch
from sglang_ascend_hybrid.ops.conv.inputs import activation_is_silu
from sglang_ascend_hybrid.ops.conv.naive import naive_causal_conv1d_fn
from sglang_ascend_hybrid.ops.conv.signature import ConvSignature
from sglang_ascend_hybrid.ops.conv.torch_impl import causal_conv1d_update_torch
from sglang_ascend_hybrid.ops.ladder import ForcedRungUnavailable
from tests.ops.conv.conv_oracle import assert_close_to_oracle, forced_backend, naive_causal_conv1d_update
from tests.ops.conv.test_causal_conv1d_ladder import _spy

DIM = 24


@pytest.fixture(autouse=True)
def _no_forced_backend(monkeypatch):
    monkeypatch.delenv("SGLANG_ASCEND_HYBRID_CONV_BACKEND", raising=False)
    monkeypatch.delenv("SGLANG_ASCEND_HYBRID_DEBUG_CHECKS", raising=False)


def _refusing(calls, text=emu.ERR_DTYPE):
    def run(*a, **k):
        calls.append(a[0].dtype)
        raise RuntimeError(text)
    return run


def _qsl(lens):
    return torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)


# --------------------------------------------------------------------------- the call signature


def test_a_refusal_for_one_pool_does_not_mark_a_pool_of_another_state_length():
    """The prefill signature carries the state (its length): a kernel that refused the
    ``W-1``-row pool is still asked for a pool with more rows per slot."""
    gen = torch.Generator().manual_seed(1)
    width, lens = 3, [2, 3]
    weight = torch.randn(DIM, width, generator=gen).half()
    asked = []
    with seam.install_emulators({emu.OP_ACLNN: _refusing(asked)}):
        for rows in (width - 1, width + 1):
            pool = torch.randn(4, rows, DIM, generator=gen).half()
            view = pool.transpose(1, 2)                       # state columns [0, W-1) of a contiguous pool
            x = torch.randn(DIM, sum(lens), generator=gen).half()
            expect, scale, new_view = naive_causal_conv1d_fn(x, weight, None, _qsl(lens), torch.tensor([0, 2]),
                                                             None, view, True)
            out = ops.causal_conv1d_fn(x, weight, None, query_start_loc=_qsl(lens),
                                       cache_indices=torch.tensor([0, 2], dtype=torch.int32),
                                       conv_states=view, activation="silu")
            assert_close_to_oracle(out, expect, scale, torch.float16, f"{rows} rows", global_scale=8.0)
            assert torch.equal(view, new_view)
    assert asked == [torch.float16, torch.float16]


def test_a_refusal_in_one_dtype_does_not_mark_the_same_shape_in_another_dtype():
    gen = torch.Generator().manual_seed(2)
    asked = []
    idx = torch.tensor([1, 3], dtype=torch.int32)
    with seam.install_emulators({emu.OP_ACLNN: _refusing(asked)}):
        for dtype in (torch.float16, torch.bfloat16):
            pool = torch.randn(5, 2, DIM, generator=gen).to(dtype)
            ops.causal_conv1d_update(torch.randn(2, DIM, generator=gen).to(dtype), cuda_layout_view(pool),
                                     torch.randn(DIM, 3, generator=gen).to(dtype), conv_state_indices=idx)
    assert asked == [torch.float16, torch.bfloat16]


def test_the_signature_names_dtypes_and_layouts():
    x, w = torch.randn(2, DIM).half(), torch.randn(DIM, 3).half()
    pool = torch.randn(4, 2, DIM).half()
    sig = dispatch.UpdateCall(x, cuda_layout_view(pool), w, None, None, None, -1).signature()
    assert sig == ConvSignature(kind="update", width=3, dim=DIM, x_dtype="float16", weight_dtype="float16",
                                state_dtype="float16", layout="window-major", state_len=2)
    assert str(sig) == f"('update', 3, {DIM}, 'float16', 'float16', 'float16', 'window-major', 2)"
    fn = dispatch.FnCall(x.t(), w, None, None, None, None, None, None, -1).signature()
    assert fn == ConvSignature("fn", 3, DIM, "float16", "float16", "none", "none", None)
    assert str(fn) == f"('fn', 3, {DIM}, 'float16', 'float16', 'none', 'none', None)"


def _update_signature(width=3, dim=DIM, x=torch.float16, weight=torch.float16, state=torch.float16, rows=3,
                      channel_major=False) -> ConvSignature:
    pool = torch.zeros(4, rows, dim, dtype=state)
    view = pool.transpose(1, 2).contiguous() if channel_major else cuda_layout_view(pool)
    return dispatch.UpdateCall(torch.zeros(2, dim, dtype=x), view, torch.zeros(dim, width, dtype=weight), None, None,
                               None, -1).signature()


# one call fact changed at a time -> the one field of the signature that must tell it apart
_ONE_FACT = {
    "width": (dict(width=4), "width"),
    "dim": (dict(dim=DIM + 8), "dim"),
    "x_dtype": (dict(x=torch.bfloat16), "x_dtype"),
    "weight_dtype": (dict(weight=torch.bfloat16), "weight_dtype"),
    "state_dtype": (dict(state=torch.bfloat16), "state_dtype"),
    "layout": (dict(channel_major=True), "layout"),
    "state_len": (dict(rows=5), "state_len"),
}


@pytest.mark.parametrize("fact", sorted(_ONE_FACT))
def test_each_fact_of_a_call_has_its_own_field_in_the_signature_and_its_text(fact):
    """A refusal is remembered per signature: a fact that no field holds would let a refusal of one
    shape keep a kernel from another."""
    changes, field = _ONE_FACT[fact]
    base, other = _update_signature(), _update_signature(**changes)
    differs = {f.name for f in dataclasses.fields(ConvSignature) if getattr(base, f.name) != getattr(other, f.name)}
    assert differs == {field}
    assert base != other and str(base) != str(other)


def test_each_op_has_its_own_kind():
    x, w = torch.zeros(2, DIM).half(), torch.zeros(DIM, 3).half()
    window = torch.zeros(4, 3, DIM).half()   # W-1 rows and one draft row
    kinds = {dispatch.FnCall(x.t(), w, None, None, None, None, cuda_layout_view(window), None, -1).signature().kind,
             dispatch.UpdateCall(x, cuda_layout_view(window), w, None, None, None, -1).signature().kind,
             dispatch.VerifyCall(x, window, w, None, None, torch.zeros(1), -1, 2).signature().kind}
    assert kinds == {"fn", "update", "verify"}


def test_forced_rung_messages_name_the_state_layout():
    gen = torch.Generator().manual_seed(3)
    weight = torch.randn(DIM, 3, generator=gen).half()
    with seam.install_emulators(emu.emulators()):
        with forced_backend("npu_v2"), pytest.raises(ForcedRungUnavailable) as none_info:
            ops.causal_conv1d_fn(torch.randn(DIM, 3, generator=gen).half(), weight, None,
                                 query_start_loc=_qsl([3]), conv_states=None)
        draft_pool = torch.randn(4, 2 + 2, DIM, generator=gen).half()   # W-1 rows and two draft rows
        with forced_backend("npu_aclnn"), pytest.raises(ForcedRungUnavailable) as strided_info:
            ops.causal_conv1d_update(torch.randn(1, DIM, generator=gen).half(), cuda_layout_view(draft_pool, 2),
                                     weight, conv_state_indices=torch.tensor([1]))
    assert f"('fn', 3, {DIM}, 'float16', 'float16', 'none', 'none', None)" in str(none_info.value)
    assert f"('update', 3, {DIM}, 'float16', 'float16', 'float16', 'window-major-strided', 2)" in \
        str(strided_info.value)


def test_torch_path_line_says_a_rung_refused_the_signature_earlier(caplog):
    """The torch-path line gives each device rung's reason for this signature, a call-time
    refusal recorded for it included."""
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(2, DIM, generator=gen).half()
    weight = torch.randn(DIM, 3, generator=gen).half()
    view = cuda_layout_view(torch.randn(4, 2, DIM, generator=gen).half())
    sig = dispatch.UpdateCall(x, view, weight, None, None, None, -1).signature()
    dispatch.UPDATE_LADDER.mark_refused("npu_aclnn", sig)
    with seam.install_emulators(emu.emulators(**emu.VARIANTS["conv_op_only"])), caplog.at_level(logging.INFO):
        ops.causal_conv1d_update(x, view, weight, conv_state_indices=torch.tensor([0, 3]))
    lines = [r.getMessage() for r in caplog.records if "outside every installed NPU conv kernel" in r.getMessage()]
    assert len(lines) == 1
    assert f"npu_aclnn: it refused {sig} earlier in this process" in lines[0]


# --------------------------------------------------------------------------- device predicates


def test_prefill_device_predicate_reads_x_dtype():
    """fp32 x with an fp16 weight and pool is refused by the conv op's host: predicted, never called."""
    gen = torch.Generator().manual_seed(5)
    width, lens = 3, [3, 2]
    weight = torch.randn(DIM, width, generator=gen).half()
    view = cuda_layout_view(torch.randn(4, width - 1, DIM, generator=gen).half())
    x = torch.randn(DIM, sum(lens), generator=gen)
    idx = torch.tensor([3, 1], dtype=torch.int32)
    his = torch.tensor([True, True])
    call = dispatch.FnCall(x, weight, None, _qsl(lens), idx, his, view, None, -1)
    assert dispatch._fn_device_reason(call) == "x, weight and the state are not of one dtype fp16 or bf16"
    expect, scale, new_view = naive_causal_conv1d_fn(x, weight, None, _qsl(lens), idx, his, view, False)
    calls = []
    with seam.install_emulators(_spy(emu.emulators(**emu.VARIANTS["conv_op_only"]), calls)):
        out = ops.causal_conv1d_fn(x, weight, None, query_start_loc=_qsl(lens), cache_indices=idx,
                                   has_initial_state=his, conv_states=view, activation=None)
    assert calls == []
    assert_close_to_oracle(out, expect, scale, torch.float32, "fp32 x", global_scale=8.0)
    assert torch.equal(view, new_view.to(view.dtype))


def test_prefill_v2_takes_only_a_pool_of_exactly_w_minus_1_rows():
    """A contiguous pool with more rows per slot goes to the conv op (which reads rows [0, W-1)),
    never to the unmerged v2 op, whose semantics are known for W-1 rows only."""
    gen = torch.Generator().manual_seed(6)
    width, lens = 3, [2, 3]
    weight = torch.randn(DIM, width, generator=gen).half()
    pool = torch.randn(4, width + 1, DIM, generator=gen).half()
    view = pool.transpose(1, 2)
    x = torch.randn(DIM, sum(lens), generator=gen).half()
    idx = torch.tensor([2, 0], dtype=torch.int32)
    his = torch.tensor([True, False])
    call = dispatch.FnCall(x, weight, None, _qsl(lens), idx, his, view, None, -1)
    with seam.install_emulators(emu.emulators()):
        assert dispatch._fn_v2_ok(call) == "the pool has 4 rows per slot; it takes exactly width - 1 = 2"
    expect, scale, new_view = naive_causal_conv1d_fn(x, weight, None, _qsl(lens), idx, his, view, False)
    calls = []
    with seam.install_emulators(_spy(emu.emulators(), calls)):
        out = ops.causal_conv1d_fn(x, weight, None, query_start_loc=_qsl(lens), cache_indices=idx,
                                   has_initial_state=his, conv_states=view, activation=None)
    assert calls == [emu.OP_ACLNN]
    assert_close_to_oracle(out, expect, scale, torch.float16, "longer pool")
    assert torch.equal(view, new_view)


def test_pool_reason_texts():
    assert dispatch._pool_reason(None, 3, exact=False) == "the call has no 3-D conv state"
    assert dispatch._pool_reason(torch.zeros(4, 2), 3, exact=True) == "the call has no 3-D conv state"


def test_decode_v2_predicate_serves_npu_x_and_state(monkeypatch):
    """Without an emulator the unmerged v2 decode op serves when x and the state are NPU tensors."""
    monkeypatch.setattr(seam, "available", lambda name: True)
    weight = torch.randn(DIM, 3).half()
    npu = NS(type="npu")
    x = NS(device=npu, dtype=torch.float16, shape=(2, DIM))
    pool = NS(is_contiguous=lambda: True, shape=(4, 2, DIM))
    state = NS(device=npu, dtype=torch.float16, shape=(4, DIM, 2), dim=lambda: 3, transpose=lambda a, b: pool)
    assert dispatch._update_v2_ok(dispatch.UpdateCall(x, state, weight, None, None, None, -1)) is None
    cpu_x = torch.randn(2, DIM).half()
    reason = dispatch._update_v2_ok(dispatch.UpdateCall(cpu_x, state, weight, None, None, None, -1))
    assert isinstance(reason, dispatch.Absent)


# --------------------------------------------------------------------------- what the rungs hand the kernels


def test_decode_conv_op_gets_the_bias_in_x_dtype():
    """The conv op reads the bias as x's dtype unchecked: an fp32 bias is cast first."""
    gen = torch.Generator().manual_seed(7)
    pool = torch.randn(5, 2, DIM, generator=gen).half()
    view = cuda_layout_view(pool)
    weight = torch.randn(DIM, 3, generator=gen).half()
    bias = torch.randn(DIM, generator=gen)
    x = torch.randn(2, DIM, generator=gen).half()
    idx = torch.tensor([4, 0], dtype=torch.int32)
    expect, scale, new_view = naive_causal_conv1d_update(x, view, weight, bias.half(), idx, True)
    calls = []
    with seam.install_emulators(_spy(emu.emulators(**emu.VARIANTS["conv_op_only"]), calls)):
        out = ops.causal_conv1d_update(x, view, weight, bias, "silu", conv_state_indices=idx)
    assert calls == [emu.OP_ACLNN]
    assert_close_to_oracle(out, expect, scale, torch.float16, "fp32 bias")
    assert torch.equal(view, new_view)


def test_batched_prefill_hands_the_kernel_int32_offsets_on_x_device():
    """``x [batch, dim, L]`` without query_start_loc: the offsets built for the kernel are int32
    (SGLang's dtype) on x's device (a meta tensor stands in for an NPU one)."""
    seen = []

    def kernel(x, weight, bias, qsl, idx, his, pool, act, pad):
        seen.append((qsl.dtype, qsl.device, idx.device))
        return torch.empty_like(x)

    x = torch.empty(2, DIM, 3, dtype=torch.float16, device="meta")
    weight = torch.empty(DIM, 3, dtype=torch.float16, device="meta")
    pool = torch.empty(2, 2, DIM, dtype=torch.float16, device="meta")
    with seam.install_emulators({emu.OP_FN_V2: kernel}):
        out = ops.causal_conv1d_fn(x, weight, conv_states=pool.transpose(1, 2), check_values=False)
    assert out.shape == x.shape
    assert seen == [(torch.int32, x.device, x.device)]


def test_tiling_record_holds_the_conv_ops_own_tiling_keys():
    """The plugin's record of the conv op's tiling cache uses the op's own keys for prefill,
    decode and verify calls."""
    gen = torch.Generator().manual_seed(8)
    table = emu.emulators(**emu.VARIANTS["conv_op_only"])
    op = table[emu.OP_ACLNN]
    with seam.install_emulators(table):
        pool = torch.randn(6, 3, DIM, generator=gen).half()
        weight = torch.randn(DIM, 4, generator=gen).half()
        ops.causal_conv1d_fn(torch.randn(DIM, 5, generator=gen).half(), weight, torch.randn(DIM).half(),
                             query_start_loc=_qsl([2, 3]), cache_indices=torch.tensor([1, 4]),
                             conv_states=cuda_layout_view(pool), activation="silu")
        ops.causal_conv1d_update(torch.randn(3, DIM, 2, generator=gen).half(), cuda_layout_view(pool), weight,
                                 None, "silu", conv_state_indices=torch.tensor([0, 5, 2]))
        window = torch.randn(6, 3 + 2, DIM, generator=gen).half()
        ops.causal_conv1d_verify(torch.randn(2 * 3, DIM, generator=gen).half(), window, weight, None, "silu",
                                 torch.tensor([3, 1]), draft_token_num=3)
    assert op.calls == 3
    assert dispatch._TILING_SEEN == op._tiling
    assert len(op._tiling) == 3


def test_decode_tiling_key_carries_the_activation():
    """A silu call is another tiling key than an identity call of the same shape: a bf16 silu call
    after an fp16 identity call still runs on the conv op."""
    gen = torch.Generator().manual_seed(9)
    calls = []
    idx = torch.tensor([0, 2], dtype=torch.int32)
    with seam.install_emulators(_spy(emu.emulators(**emu.VARIANTS["conv_op_only"]), calls)):
        for dtype, act in ((torch.float16, None), (torch.bfloat16, "silu")):
            pool = torch.randn(4, 2, DIM, generator=gen).to(dtype)
            ops.causal_conv1d_update(torch.randn(2, DIM, generator=gen).to(dtype), cuda_layout_view(pool),
                                     torch.randn(DIM, 3, generator=gen).to(dtype), None, act,
                                     conv_state_indices=idx)
    assert calls == [emu.OP_ACLNN, emu.OP_ACLNN]


# --------------------------------------------------------------------------- activation and input errors


def test_swish_is_silu():
    assert activation_is_silu("swish") is True
    gen = torch.Generator().manual_seed(10)
    x, weight = torch.randn(3, DIM, generator=gen), torch.randn(DIM, 3, generator=gen)
    state = torch.randn(4, DIM, 2, generator=gen)
    a, b = state.clone(), state.clone()
    idx = torch.tensor([2, 0, 3])
    out_swish = ops.causal_conv1d_update(x, a, weight, None, "swish", conv_state_indices=idx)
    out_silu = ops.causal_conv1d_update(x, b, weight, None, "silu", conv_state_indices=idx)
    assert torch.equal(out_swish, out_silu) and torch.equal(a, b)


def test_update_checks_the_activation_even_for_an_empty_batch():
    state = torch.randn(4, DIM, 2)
    with pytest.raises(ValueError, match=re.escape("causal_conv1d_update: activation='gelu': expected None, "
                                                   "'silu' or 'swish'")):
        ops.causal_conv1d_update(torch.randn(0, DIM), state, torch.randn(DIM, 3), None, "gelu")


def test_a_conv_state_that_is_not_3d_names_its_shape():
    x = torch.randn(DIM, 4)
    with pytest.raises(ValueError, match=re.escape(
            f"causal_conv1d_fn: conv_states=shape (5, {DIM}) float32: expected shape (slots, dim={DIM}, "
            "state_len>=2)")):
        ops.causal_conv1d_fn(x, torch.randn(DIM, 3), query_start_loc=_qsl([4]),
                             cache_indices=torch.tensor([0]), conv_states=torch.randn(5, DIM))


def test_a_uint8_slot_255_is_not_pad_slot_minus_1():
    """Slot indices are compared as int64: uint8 255 is slot 255 (out of range), not pad -1."""
    state = torch.randn(4, DIM, 2)
    with pytest.raises(ValueError, match=re.escape(
            "causal_conv1d_update: conv_state_indices=[1, 255]: expected slots in [0, 4) or pad_slot_id (-1); "
            "255 is neither")):
        ops.causal_conv1d_update(torch.randn(2, DIM), state, torch.randn(DIM, 3),
                                 conv_state_indices=torch.tensor([1, 255], dtype=torch.uint8))


def test_torch_update_checks_slot_values_by_default():
    gen = torch.Generator().manual_seed(11)
    x, weight = torch.randn(2, DIM, generator=gen), torch.randn(DIM, 3, generator=gen)
    state = torch.randn(4, DIM, 2, generator=gen)
    before = state.clone()
    with pytest.raises(ValueError, match=re.escape(
            "causal_conv1d_update_torch: conv_state_indices=[1, 7]: expected slots in [0, 4) or pad_slot_id (-1); "
            "7 is neither")):
        causal_conv1d_update_torch(x, state, weight, conv_state_indices=torch.tensor([1, 7]))
    assert torch.equal(state, before)
    idx = torch.tensor([3, 1])
    expect, scale, new_state = naive_causal_conv1d_update(x, state, weight, None, idx, False)
    out = causal_conv1d_update_torch(x, state, weight, conv_state_indices=idx)
    assert_close_to_oracle(out, expect, scale, torch.float32, "valid slots")
    assert torch.equal(state, new_state)


# --------------------------------------------------------------------------- the oracle


def test_oracle_history_is_the_first_w_minus_1_state_columns():
    """A state longer than ``W-1``: the history is its columns ``[0, W-1)`` (hand-computed)."""
    x = torch.tensor([[10.0, 20.0]])                         # dim 1, one sequence of 2 tokens
    weight = torch.tensor([[1.0, 100.0]])                    # width 2: history of one column
    states = torch.tensor([[[1.0, 2.0, 3.0]]])               # [slots 1, dim 1, state_len 3]
    out, _, new = naive_causal_conv1d_fn(x, weight, None, [0, 2], None, torch.tensor([True]), states, False)
    assert out.tolist() == [[1.0 + 100.0 * 10.0, 10.0 + 100.0 * 20.0]]
    assert new.tolist() == [[[20.0, 2.0, 3.0]]]
