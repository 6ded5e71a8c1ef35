"""Edges of packed attention the other tests leave open: the LSE of a call with no work (dtype and
device whatever the ambient defaults), no-work batches served by the device rung without a
fallback, the device predicate asked about q, k and v, the contract's sequence and head-count
limits, exact input-error texts naming several tensors, and what the case builders return for
their documented defaults and seeds."""

from __future__ import annotations

import dataclasses
import logging
import random

import pytest
import torch

from sglang_ascend_hybrid.emulators import fused_infer_attention as emu
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.attention import contract as fia_contract
from sglang_ascend_hybrid.ops.attention import dispatch
from sglang_ascend_hybrid.ops.attention.api import fused_infer_attention_varlen
from sglang_ascend_hybrid.ops.attention.cases import packed_case, random_lengths, random_packed_case
from sglang_ascend_hybrid.ops.attention.dispatch import AttentionCall
from sglang_ascend_hybrid.ops.attention.signature import AttentionSignature
from tests.ops.attention.test_packed_attention_dispatch import Recorder

# Batches with no sequence non-empty on both sides: the fast path (every sequence empty on both
# sides) and the compacting path (only one-sided sequences) answer them without calling the op.
NO_WORK = {
    "all_both_empty": ([0, 0], [0, 0]),
    "all_one_sided": ([3, 0, 2], [0, 4, 0]),
}


def _device_case(q_lens, k_lens, **kwargs):
    """A case inside the op's contract (bf16, head dim 128): the device rung serves it."""
    return packed_case(q_lens, k_lens, num_heads=4, num_kv_heads=2, head_dim=128, dtype=torch.bfloat16,
                       **kwargs)


def _check_no_work_result(case, out, lse):
    tq = case.q.shape[0]
    assert tuple(out.shape) == (tq, 4, 128) and out.dtype == torch.bfloat16 and (out == 0).all()
    assert tuple(lse.shape) == (4, tq) and torch.isneginf(lse).all()


@pytest.mark.parametrize("pattern", sorted(NO_WORK))
def test_no_work_batches_are_answered_by_the_device_rung_without_a_fallback(pattern, caplog):
    """The device rung answers such a batch itself: no op call, no WARNING, no refusal learnt (a
    broken empty result would be an 'unexpected failure' and a silent fall back to torch)."""
    case = _device_case(*NO_WORK[pattern])
    rec = Recorder()
    with caplog.at_level(logging.INFO), seam.install_emulators({emu.OP_NAME: rec}):
        out, lse = fused_infer_attention_varlen(*case.args(), **case.kwargs())
        sig = AttentionCall(case.q, case.k, case.v, case.scale, True, case.q_bounds, case.k_bounds).signature()
    _check_no_work_result(case, out, lse)
    assert rec.calls == []
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    assert not dispatch.LADDER.refused("npu_fia", sig)


@pytest.fixture
def float64_default_dtype():
    saved = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(saved)


@pytest.mark.parametrize("pattern", sorted(NO_WORK))
def test_no_work_lse_is_fp32_under_a_float64_default_dtype(pattern, float64_default_dtype):
    case = _device_case(*NO_WORK[pattern])
    with seam.install_emulators(emu.emulators()):
        out, lse = fused_infer_attention_varlen(*case.args(), **case.kwargs())
    assert lse.dtype == torch.float32
    _check_no_work_result(case, out, lse)


@pytest.mark.parametrize("pattern", sorted(NO_WORK))
def test_no_work_lse_is_on_the_query_device_not_the_ambient_default(pattern):
    """On an NPU the LSE must live with q; here q is on the CPU and the ambient default device is
    ``meta``, so an LSE made on the default device would show up on ``meta``."""
    case = _device_case(*NO_WORK[pattern])
    with seam.install_emulators(emu.emulators()), torch.device("meta"):
        out, lse = fused_infer_attention_varlen(*case.args(), **case.kwargs())
    assert out.device == case.q.device and lse.device == case.q.device
    _check_no_work_result(case, out, lse)


def test_device_predicate_is_asked_about_q_k_and_v(monkeypatch):
    asked = []
    real_serves = seam.serves

    def spy(name, *tensors):
        asked.append((name, tensors))
        return real_serves(name, *tensors)

    monkeypatch.setattr(seam, "serves", spy)
    case = packed_case([3, 2], [2, 4])
    fused_infer_attention_varlen(*case.args(), **case.kwargs())
    with seam.install_emulators(emu.emulators()):
        fused_infer_attention_varlen(*case.args(), **case.kwargs())
    assert asked
    for name, tensors in asked:
        assert name == fia_contract.OP_NAME
        assert len(tensors) == 3
        assert tensors[0] is case.q and tensors[1] is case.k and tensors[2] is case.v


@pytest.mark.parametrize("num_seqs,reason", [
    (fia_contract.MAX_SEQUENCES, None),
    (fia_contract.MAX_SEQUENCES + 1, "4097 sequences; the op takes at most 4096"),
])
def test_refusal_counts_the_sequences_of_the_call(num_seqs, reason):
    q = torch.zeros(0, 4, 128, dtype=torch.bfloat16)
    k = v = torch.zeros(0, 2, 128, dtype=torch.bfloat16)
    bounds = (0,) * (num_seqs + 1)
    assert AttentionCall(q, k, v, 0.1, True, bounds, bounds).refusal() == reason


def test_zero_key_value_heads_are_outside_the_contract():
    assert fia_contract.refusal_reason(4, 0, 128, 128, 128, 1) == (
        "4 query / 0 key-value heads; the op takes at most 256")
    assert fia_contract.refusal_reason(4, 1, 128, 128, 128, 1) is None


def test_unexpected_failure_names_the_shape_with_a_bare_dtype(caplog):
    """The signature is what the WARNING shows: the dtype as ``bfloat16``, like every other message."""
    case = _device_case([3, 2], [2, 4])
    call = AttentionCall(case.q, case.k, case.v, case.scale, True, case.q_bounds, case.k_bounds)
    assert call.signature() == AttentionSignature(query_heads=4, key_value_heads=2, head_dim_q=128, head_dim_k=128,
                                                  head_dim_v=128, dtype="bfloat16", device="cpu")
    assert str(call.signature()) == "(4, 2, 128, 128, 128, 'bfloat16', 'cpu')"

    def failing(*args, **kwargs):
        raise RuntimeError("EZ9999 tiling error")

    with caplog.at_level(logging.INFO), seam.install_emulators({emu.OP_NAME: failing}):
        fused_infer_attention_varlen(*case.args(), **case.kwargs())
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "failed unexpectedly on (4, 2, 128, 128, 128, 'bfloat16', 'cpu')" in warnings[0]


def _signature(heads=4, kv_heads=2, dq=128, dk=128, dv=128, dtype=torch.bfloat16, device="cpu"):
    q = torch.zeros(3, heads, dq, dtype=dtype, device=device)
    k = torch.zeros(3, kv_heads, dk, dtype=dtype, device=device)
    v = torch.zeros(3, kv_heads, dv, dtype=dtype, device=device)
    return AttentionCall(q, k, v, 0.1, True, (0, 3), (0, 3)).signature()


# one call fact changed at a time -> the one field of the signature that must tell it apart
_ONE_FACT = {
    "query_heads": dict(heads=8),
    "key_value_heads": dict(kv_heads=4),
    "head_dim_q": dict(dq=64),
    "head_dim_k": dict(dk=64),
    "head_dim_v": dict(dv=64),
    "dtype": dict(dtype=torch.float16),
    "device": dict(device="meta"),
}


@pytest.mark.parametrize("field", sorted(_ONE_FACT))
def test_each_fact_of_a_call_has_its_own_field_in_the_signature_and_its_text(field):
    """A refusal is remembered per signature: a fact that no field holds would let a refusal of one
    shape keep the op from another."""
    base, other = _signature(), _signature(**_ONE_FACT[field])
    differs = {f.name for f in dataclasses.fields(AttentionSignature)
               if getattr(base, f.name) != getattr(other, f.name)}
    assert differs == {field}
    assert base != other and str(base) != str(other)


def test_layout_error_names_the_first_bad_tensor():
    case = packed_case([3, 2], [2, 4])
    q, k = case.q.flatten(1), case.k.flatten(1)
    with pytest.raises(ValueError) as info:
        fused_infer_attention_varlen(q, k, case.v, case.cu_seqlens_q, case.cu_seqlens_k)
    assert str(info.value) == ("fused_infer_attention_varlen: q=shape (5, 64) float32: expected a 3D tensor in "
                               "[T, N, D] layout")


def test_device_error_names_the_first_bad_tensor():
    case = packed_case([3, 2], [2, 4])
    with pytest.raises(ValueError) as info:
        fused_infer_attention_varlen(case.q, case.k.to("meta"), case.v.to("meta"), case.cu_seqlens_q,
                                     case.cu_seqlens_k)
    assert str(info.value) == "fused_infer_attention_varlen: k.device=meta: expected q's device (cpu)"


# ---------------------------------------------------------------------------
# Case builders (the startup probe and selftest use them too)
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("q_lens,k_lens,name,value", [([2, 1], [3, -1], "k_lens", [3, -1]),
                                                      ([-2, 1], [3, 1], "q_lens", [-2, 1])])
def test_packed_case_rejects_negative_lengths_naming_the_side(q_lens, k_lens, name, value):
    with pytest.raises(ValueError) as info:
        packed_case(q_lens, k_lens)
    assert str(info.value) == f"packed_case: {name}={value}: expected sequence lengths >= 0"


def test_packed_case_value_head_dim():
    case = packed_case([2, 1], [3, 0], num_heads=4, num_kv_heads=2, head_dim=8, v_head_dim=12)
    assert tuple(case.q.shape) == (3, 4, 8) and tuple(case.k.shape) == (3, 2, 8)
    assert tuple(case.v.shape) == (3, 2, 12)
    assert tuple(packed_case([2], [3], head_dim=8).v.shape) == (3, 2, 8)


def test_packed_case_kwargs_pass_the_host_boundaries_by_default():
    case = packed_case([3, 0], [1, 2], scale=0.5)
    assert case.kwargs() == {"softmax_scale": 0.5, "return_softmax_lse": True,
                             "cu_seqlens_q_host": (0, 3, 3), "cu_seqlens_k_host": (0, 1, 3)}
    assert case.kwargs(host=False, return_softmax_lse=False) == {"softmax_scale": 0.5,
                                                                  "return_softmax_lse": False}


def test_random_lengths_defaults():
    """Defaults: lengths in 1..16 (16 reached), seed 0, no empty side."""
    assert random_lengths(40) == random_lengths(40, max_len=16, one_sided_fraction=0.0,
                                                 both_empty_fraction=0.0, seed=0)
    q_lens, k_lens = random_lengths(200)
    assert min(q_lens + k_lens) == 1 and max(q_lens + k_lens) == 16
    assert random_lengths(40) != random_lengths(40, seed=1)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_lengths_one_sided_share_is_half_open(seed):
    """A sequence is one-sided when its draw ``u`` is below ``one_sided_fraction``, not at it (so a
    fraction of 0 never makes one)."""
    u = random.Random(seed).random()
    q_lens, k_lens = random_lengths(1, one_sided_fraction=u, seed=seed)
    assert q_lens[0] > 0 and k_lens[0] > 0
    q_lens, k_lens = random_lengths(1, one_sided_fraction=u + 1e-9, seed=seed)
    assert (q_lens[0] == 0) != (k_lens[0] == 0)


@pytest.mark.parametrize("seed", [3, 5])
def test_random_packed_case_seeds_the_tensors_too(seed):
    q_lens, k_lens = random_lengths(8, max_len=16, one_sided_fraction=0.25, both_empty_fraction=0.1, seed=seed)
    expected = packed_case(q_lens, k_lens, seed=seed)
    case = random_packed_case(seed)
    assert case.q_bounds == expected.q_bounds and case.k_bounds == expected.k_bounds
    assert case.q.numel() > 0 and case.k.numel() > 0
    for got, want in zip(case.args(), expected.args()):
        assert torch.equal(got, want)
