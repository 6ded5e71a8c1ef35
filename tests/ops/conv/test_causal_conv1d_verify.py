"""The short-conv speculative verify op (``causal_conv1d_verify``) on SGLang's NPU draft pool:
every rung against the fp64 oracle, the rollback SGLang's NPU commit applies afterwards against
the plain per-step state, pads, graph safety and bad input."""

from __future__ import annotations

import logging
import re

import pytest
import torch

from sglang_ascend_hybrid.emulators import causal_conv1d as emu
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.conv import dispatch
from sglang_ascend_hybrid.ops.conv.api import causal_conv1d_verify
from sglang_ascend_hybrid.ops.conv.naive import naive_causal_conv1d_update, naive_causal_conv1d_verify
from tests.ops.conv.conv_oracle import assert_close_to_oracle, forced_backend
from tests.support.sync_counter import SyncCounter


def _case(width, draft, dtype, batch=3, slots=6, dim=24, seed=0, idx=None):
    g = torch.Generator().manual_seed(seed)
    rows = (width - 1) + (draft - 1)
    x = torch.randn(batch * draft, dim, generator=g).to(dtype)
    window = torch.randn(slots, rows, dim, generator=g).to(dtype)
    weight = torch.randn(dim, width, generator=g).to(dtype)
    bias = torch.randn(dim, generator=g).to(dtype)
    idx = torch.tensor(idx if idx is not None else [4, 1, 2][:batch], dtype=torch.int32)
    return x, window, weight, bias, idx


def _rollback(window, slot, step, draft):
    """sgl-kernel-npu ``conv_state_rollback`` for one slot: rows [0, R - shift) move to [shift, R)."""
    shift = (draft - 1) - step
    out = window.clone()
    if shift > 0:
        out[slot, shift:] = window[slot, :window.shape[1] - shift].clone()
    return out


@pytest.mark.parametrize("width,draft,dtype", [(3, 4, torch.float32), (3, 4, torch.bfloat16), (4, 3, torch.float16),
                                               (2, 5, torch.float32), (4, 1, torch.float32), (3, 16, torch.float32)])
def test_torch_rung_matches_oracle_and_leaves_the_rollback_scheme(width, draft, dtype):
    x, window, weight, bias, idx = _case(width, draft, dtype)
    exp_out, scale, exp_window = naive_causal_conv1d_verify(x, window, weight, bias, idx, draft, silu=False)
    got_window = window.clone()
    with forced_backend("torch"):
        out = causal_conv1d_verify(x, got_window, weight, bias, None, idx, draft)
    assert_close_to_oracle(out, exp_out, scale, dtype, "verify output")
    assert torch.equal(got_window, exp_window)
    assert torch.equal(got_window[0], window[0]) and torch.equal(got_window[3], window[3])  # untouched slots
    # after SGLang's rollback to any accepted step, the last W-1 rows are the state a plain decode of
    # the accepted tokens leaves (the CUDA path's tape entry for that step)
    for step in range(draft):
        rolled = _rollback(got_window, 4, step, draft)
        plain = window[4, window.shape[1] - (width - 1):].t().unsqueeze(0).clone()      # [1, dim, W-1]
        _, _, plain_new = naive_causal_conv1d_update(x[:step + 1].t().unsqueeze(0), plain, weight, bias, None, False)
        assert torch.equal(rolled[4, rolled.shape[1] - (width - 1):], plain_new[0].t()), step


def test_pad_rows_are_skipped_and_a_batch_of_pads_writes_nothing():
    x, window, weight, bias, _ = _case(3, 4, torch.float32)
    idx = torch.tensor([-1, 2, -1], dtype=torch.int32)
    got = window.clone()
    with forced_backend("torch"):
        out = causal_conv1d_verify(x, got, weight, bias, None, idx, 4)
    exp_out, scale, exp_window = naive_causal_conv1d_verify(x, window, weight, bias, idx, 4, silu=False)
    assert torch.equal(got, exp_window)
    assert_close_to_oracle(out, exp_out, scale, torch.float32, "pads")
    only_pads = torch.full((3,), -1, dtype=torch.int32)
    got = window.clone()
    with forced_backend("torch"):
        causal_conv1d_verify(x, got, weight, bias, None, only_pads, 4)
    assert torch.equal(got, window)


@pytest.mark.parametrize("rung,width,dtype", [("npu_aclnn", 4, torch.bfloat16), ("npu_aclnn", 4, torch.float16),
                                              ("npu_update_v2", 3, torch.float16),
                                              ("npu_update_v2", 4, torch.float16)])
def test_device_rungs_through_their_emulators_match_the_oracle(rung, width, dtype):
    dispatch.reset_state()
    draft = 4
    x, window, weight, bias, idx = _case(width, draft, dtype, idx=[4, -1, 2])
    exp_out, scale, exp_window = naive_causal_conv1d_verify(x, window, weight, bias, idx, draft, silu=True)
    got = window.clone()
    calls = []
    table = {n: (lambda f, n=n: lambda *a, **k: (calls.append(n), f(*a, **k))[1])(f)
             for n, f in emu.emulators().items()}
    with seam.install_emulators(table), forced_backend(rung):
        out = causal_conv1d_verify(x, got, weight, bias, "silu", idx, draft)
    assert calls == [dispatch.OP_ACLNN if rung == "npu_aclnn" else dispatch.OP_UPDATE_V2_MAIN]
    mask = idx.repeat_interleave(draft) != -1
    if rung == "npu_update_v2":   # history and tokens rounded to fp16 inside: compare at fp16 precision
        assert torch.allclose(out[mask].double(), exp_out[mask], rtol=4e-3, atol=4e-3)
    else:
        assert_close_to_oracle(out[mask], exp_out[mask], scale[mask], dtype, rung)
    assert torch.equal(got, exp_window)


def test_auto_takes_the_npu_op_at_width_4_and_the_torch_path_at_width_3_with_the_reason(caplog):
    dispatch.reset_state()
    x, window, weight, bias, idx = _case(3, 4, torch.bfloat16)
    call = dispatch.VerifyCall(x, window, weight, bias, None, idx, -1, 4)
    with seam.install_emulators(emu.emulators()), caplog.at_level(logging.INFO):
        why = dispatch.VERIFY_LADDER.why_not(dispatch.VERIFY_LADDER.rungs[0], call.signature(), call)
        assert "takes width 4 only" in str(why)
        assert dispatch.VERIFY_LADDER.choose(call.signature(), call).name == "torch"
        causal_conv1d_verify(x, window.clone(), weight, bias, None, idx, 4)
    assert "causal_conv1d_verify" in caplog.text and "using the torch path" in caplog.text
    x4, window4, weight4, bias4, idx4 = _case(4, 4, torch.bfloat16)
    call4 = dispatch.VerifyCall(x4, window4, weight4, bias4, None, idx4, -1, 4)
    with seam.install_emulators(emu.emulators()):
        assert dispatch.VERIFY_LADDER.choose(call4.signature(), call4).name == "npu_aclnn"
        assert "not contiguous" in str(dispatch._verify_aclnn_ok(
            dispatch.VerifyCall(x4, window4.transpose(1, 2).contiguous().transpose(1, 2), weight4, bias4,
                                 None, idx4, -1, 4)))


def test_serving_call_reads_no_tensor_value_on_the_host():
    x, window, weight, bias, idx = _case(3, 4, torch.float32)
    with forced_backend("torch"), SyncCounter(device_of_interest="cpu") as counter:
        causal_conv1d_verify(x, window, weight, bias, None, idx, 4, check_values=False)
    assert counter.total == 0, counter.counts


@pytest.mark.parametrize("mutate,text", [
    (lambda a: a.update(draft_token_num=0), "draft_token_num=0: expected an int >= 1"),
    (lambda a: a.update(x=a["x"][:-1]),
     "x=shape (11, 24) float32: expected batch (3) * draft_token_num (4) = 12 tokens"),
    (lambda a: a.update(x=a["x"][:, 0]), "x=shape (12,) float32: expected shape (batch * draft_token_num, dim)"),
    (lambda a: a.update(x=None), "x=None: expected shape (batch * draft_token_num, dim)"),
    (lambda a: a.update(x=a["x"].to(torch.int64)), "x.dtype=torch.int64: expected a floating-point dtype"),
    (lambda a: a.update(conv_window=a["conv_window"][:, 1:]),
     "conv_window=shape (6, 4, 24) float32: expected shape (slots, 5, 24) (window major, (W-1) + (draft_token_num-1) "
     "rows)"),
    (lambda a: a.update(conv_window=None), "conv_window=None: expected shape (slots, 5, 24)"),
    (lambda a: a.update(conv_window=a["conv_window"].to(torch.int64)),
     "conv_window.dtype=torch.int64: expected a floating-point dtype"),
    (lambda a: a.update(cache_indices=None), "cache_indices=None: expected a tensor of shape (batch,)"),
    (lambda a: a.update(cache_indices=torch.tensor([[4, 1, 2]])),
     "cache_indices=shape (1, 3) int64: expected a tensor of shape (batch,)"),
    (lambda a: a.update(cache_indices=[4, 1, 2]), "cache_indices=[4, 1, 2]: expected a tensor of shape (batch,)"),
    (lambda a: a.update(cache_indices=torch.tensor([4.0, 1.0, 2.0])),
     "cache_indices.dtype=torch.float32: expected an integer index dtype"),
    (lambda a: a.update(cache_indices=torch.tensor([4, 4, 1], dtype=torch.int32)),
     "cache_indices=[4, 4, 1]: expected distinct slots (or pad_slot_id -1); slot 4 is given to more than one "
     "sequence"),
    (lambda a: a.update(cache_indices=torch.tensor([4, 9, 1], dtype=torch.int32)),
     "cache_indices=[4, 9, 1]: expected slots in [0, 6) or pad_slot_id (-1); 9 is neither"),
    (lambda a: a.update(activation="relu"), "activation='relu': expected None, 'silu' or 'swish'"),
])
def test_bad_input_names_the_argument_and_leaves_the_pool(mutate, text):
    x, window, weight, bias, idx = _case(3, 4, torch.float32)
    args = dict(x=x, conv_window=window.clone(), weight=weight, bias=bias, cache_indices=idx, draft_token_num=4)
    mutate(args)
    before = None if args["conv_window"] is None else args["conv_window"].clone()
    with pytest.raises(ValueError, match="^causal_conv1d_verify: " + re.escape(text)):
        causal_conv1d_verify(**args)
    assert before is None or torch.equal(args["conv_window"], before)


# --------------------------------------------------------------------------- the NPU rungs' predicates


def _counting_emulators(calls, refuse_first=()):
    """The CPU emulators, recording each op called; ops in ``refuse_first`` refuse their first call."""
    from sglang_ascend_hybrid.ops.conv.contract import ERR_DTYPE

    def wrap(name, fn):
        def op(*a, **k):
            calls.append(name)
            if name in refuse_first and calls.count(name) == 1:
                raise RuntimeError(ERR_DTYPE)
            return fn(*a, **k)
        return op
    return {n: wrap(n, f) for n, f in emu.emulators().items()}


def test_a_refusal_is_remembered_per_draft_window_shape():
    """The ladder remembers a call-time refusal by signature, which carries the window's row count: a
    refusal at one draft length leaves the op tried again at another of the same width and channels."""
    dispatch.reset_state()
    calls = []
    with seam.install_emulators(_counting_emulators(calls, refuse_first=(dispatch.OP_ACLNN,))):
        for draft in (4, 4, 3):
            x, window, weight, bias, idx = _case(4, draft, torch.bfloat16)
            got = window.clone()
            out = causal_conv1d_verify(x, got, weight, bias, None, idx, draft)
            exp_out, scale, exp_window = naive_causal_conv1d_verify(x, window, weight, bias, idx, draft, silu=False)
            assert_close_to_oracle(out, exp_out, scale, torch.bfloat16, f"draft {draft}")
            assert torch.equal(got, exp_window)
    # draft 4: refused, then the torch path; draft 4 again: not asked; draft 3: asked and served
    assert calls == [dispatch.OP_ACLNN, dispatch.OP_ACLNN]
    dispatch.reset_state()


def _call(width=4, draft=4, dtype=torch.float16, slots=6, bias=True, window_dtype=None, activation=None):
    x, window, weight, b, idx = _case(width, draft, dtype, slots=slots)
    window = window if window_dtype is None else window.to(window_dtype)
    return dispatch.VerifyCall(x, window, weight, b if bias else None, activation, idx, -1, draft)


def test_aclnn_verify_takes_one_dtype_and_remembers_tiling_shapes_per_dtype():
    dispatch.reset_state()
    with seam.install_emulators(emu.emulators()):
        assert dispatch._verify_aclnn_ok(_call()) is None
        assert "not of one dtype" in dispatch._verify_aclnn_ok(_call(window_dtype=torch.bfloat16))
        assert "not of one dtype" in dispatch._verify_aclnn_ok(_call(dtype=torch.float32))
        c = _call()
        for x, weight in ((c.x.bfloat16(), c.weight), (c.x, c.weight.bfloat16())):   # x or weight the odd one
            odd = dispatch.VerifyCall(x, c.conv_window, weight, None, None, c.cache_indices, -1, 4)
            assert "not of one dtype" in dispatch._verify_aclnn_ok(odd)
        dispatch._verify_aclnn(_call())                                   # fp16: its tiling shape recorded
        assert dispatch._verify_aclnn_ok(_call()) is None                 # the same shape, the same dtype
        assert "tiling cache holds this shape for float16" in dispatch._verify_aclnn_ok(_call(dtype=torch.bfloat16))
        # the tiling key carries the pool's slot count and whether there is a bias: other shapes are free
        assert dispatch._verify_aclnn_ok(_call(dtype=torch.bfloat16, slots=7)) is None
        assert dispatch._verify_aclnn_ok(_call(dtype=torch.bfloat16, bias=False)) is None
        assert dispatch._verify_aclnn_ok(_call(dtype=torch.bfloat16, activation="silu")) is None
    dispatch.reset_state()


def test_device_verify_rungs_serve_only_npu_tensors(monkeypatch):
    """Without emulators a real NPU op serves only when x AND the draft window are NPU tensors."""
    from types import SimpleNamespace as NS

    monkeypatch.setattr(seam, "available", lambda name: True)
    c = _call()
    npu_x = NS(device=NS(type="npu"), dtype=c.x.dtype, shape=c.x.shape)
    npu_window = NS(device=NS(type="npu"), dtype=c.conv_window.dtype, shape=c.conv_window.shape,
                    is_contiguous=lambda: True)
    for ok in (dispatch._verify_aclnn_ok, dispatch._verify_update_v2_ok):
        for x, window in ((npu_x, c.conv_window), (c.x, npu_window), (c.x, c.conv_window)):
            call = dispatch.VerifyCall(x, window, c.weight, c.bias, None, c.cache_indices, -1, 4)
            assert isinstance(ok(call), dispatch.Absent), ok.__name__
        reason = ok(dispatch.VerifyCall(npu_x, npu_window, c.weight, c.bias, None, c.cache_indices, -1, 4))
        assert not isinstance(reason, dispatch.Absent), ok.__name__
        assert "is not installed for these tensors" in str(ok(c))


def test_bad_bias_names_the_argument():
    x, window, weight, bias, idx = _case(3, 4, torch.float32)
    with pytest.raises(ValueError, match=re.escape("causal_conv1d_verify: bias=shape (23,) float32: "
                                                   "expected shape (24,)")):
        causal_conv1d_verify(x, window, weight, bias[:-1], None, idx, 4)


def test_torch_rung_applies_silu_and_the_default_is_one_draft_token():
    x, window, weight, bias, idx = _case(3, 4, torch.float32)
    exp_out, scale, exp_window = naive_causal_conv1d_verify(x, window, weight, bias, idx, 4, silu=True)
    got = window.clone()
    with forced_backend("torch"):
        out = causal_conv1d_verify(x, got, weight, bias, "silu", idx, 4)
    assert_close_to_oracle(out, exp_out, scale, torch.float32, "silu")
    assert torch.equal(got, exp_window)
    x1, window1, weight1, bias1, idx1 = _case(3, 1, torch.float32)
    exp_out, scale, _ = naive_causal_conv1d_verify(x1, window1, weight1, bias1, idx1, 1, silu=False)
    with forced_backend("torch"):
        out = causal_conv1d_verify(x1, window1.clone(), weight1, bias1, None, idx1)   # draft_token_num: 1
    assert_close_to_oracle(out, exp_out, scale, torch.float32, "one draft token")


@pytest.mark.parametrize("batch", [0, 1])
def test_empty_and_single_request_batches(batch):
    x, window, weight, bias, idx = _case(3, 4, torch.float32, batch=max(batch, 1))
    x, idx = x[:4 * batch], idx[:batch]
    got = window.clone()
    with forced_backend("torch"):
        out = causal_conv1d_verify(x, got, weight, bias, None, idx, 4)
    assert out.shape == x.shape
    exp_out, scale, exp_window = naive_causal_conv1d_verify(x, window, weight, bias, idx, 4, silu=False)
    if batch:
        assert_close_to_oracle(out, exp_out, scale, torch.float32, "one request")
    assert torch.equal(got, exp_window)


@pytest.mark.parametrize("rung,width", [("npu_aclnn", 4), ("npu_update_v2", 3)])
def test_device_rungs_without_bias_or_silu_and_another_pad_id(rung, width):
    dispatch.reset_state()
    x, window, weight, _, _ = _case(width, 4, torch.float16)
    idx = torch.tensor([4, -7, 2], dtype=torch.int32)
    exp_out, scale, exp_window = naive_causal_conv1d_verify(
            x, window, weight, None, torch.tensor([4, -1, 2]), 4, silu=False)
    got = window.clone()
    with seam.install_emulators(emu.emulators()), forced_backend(rung):
        out = causal_conv1d_verify(x, got, weight, None, None, idx, 4, pad_slot_id=-7)
    mask = idx.repeat_interleave(4) != -7
    assert torch.allclose(out[mask].double(), exp_out[mask], rtol=4e-3, atol=4e-3)
    assert torch.equal(got, exp_window)
    dispatch.reset_state()


def test_update_v2_verify_takes_fp16_x_and_window_only_and_widths_2_to_4():
    with seam.install_emulators(emu.emulators()):
        assert dispatch._verify_update_v2_ok(_call(width=3)) is None
        assert "takes fp16 x and state only" in dispatch._verify_update_v2_ok(_call(window_dtype=torch.bfloat16))
        assert "takes fp16 x and state only" in dispatch._verify_update_v2_ok(_call(dtype=torch.bfloat16,
                                                                                    window_dtype=torch.float16))
        assert dispatch._verify_update_v2_ok(_call(width=5)) == "width 5; the NPU conv kernels take 2-4"
