"""The ``npu_fused_infer_attention_score`` emulator (:mod:`sglang_ascend_hybrid.emulators.fused_infer_attention`):
the call shapes it takes, the refusals and limits of the real op, fp32 refused like the op."""

from __future__ import annotations

import pytest
import torch

from sglang_ascend_hybrid.emulators import fused_infer_attention as emu
from sglang_ascend_hybrid.ops.attention import contract as fia_contract
from sglang_ascend_hybrid.ops.attention.cases import packed_case as _packed_case
from sglang_ascend_hybrid.ops.attention.torch_impl import packed_attention_torch


def packed_case(*args, head_dim=128, **kwargs):
    """Cases at the op's head dim (it takes 128, or 192 / 128): the device path runs."""
    return _packed_case(*args, head_dim=head_dim, **kwargs)


def _op_kwargs(**overrides):
    kw = dict(num_heads=4, num_key_value_heads=2, scale=0.25, input_layout="TND",
              actual_seq_lengths=[3, 5], actual_seq_lengths_kv=[2, 6], softmax_lse_flag=True)
    kw.update(overrides)
    return kw


def _op_tensors(dtype=torch.bfloat16):
    case = packed_case([3, 2], [2, 4], num_heads=4, num_kv_heads=2, dtype=dtype, scale=0.25)
    return case


def test_emulator_valid_call_shapes():
    case = _op_tensors()
    out, lse = emu.npu_fused_infer_attention_score(case.q, case.k, case.v, **_op_kwargs())
    assert out.shape == (5, 4, 128) and out.dtype == torch.bfloat16
    assert lse.shape == (5, 4, 1) and lse.dtype == torch.float32
    ref_out, ref_lse = packed_attention_torch(case.q, case.k, case.v, case.q_bounds,
                                                     case.k_bounds, case.scale)
    assert torch.equal(out, ref_out) and torch.equal(lse[..., 0].T, ref_lse)
    _, lse_off = emu.npu_fused_infer_attention_score(
        case.q, case.k, case.v, **_op_kwargs(softmax_lse_flag=False))
    assert torch.equal(lse_off, torch.zeros(1))  # documented: a (1,) zero tensor without the flag


@pytest.mark.parametrize("overrides,match", [
    ({"actual_seq_lengths": [4, 3, 5], "actual_seq_lengths_kv": [2, 4, 6]}, "non-decreasing"),
    ({"actual_seq_lengths": [3, 5], "actual_seq_lengths_kv": [6, 5]}, "non-decreasing"),
    ({"actual_seq_lengths": [5], "actual_seq_lengths_kv": [2, 6]}, "sequences but"),
    ({"actual_seq_lengths": [3, 4]}, "must end at the packed token count 5"),
    ({"actual_seq_lengths": None}, "requires actual_seq_lengths"),
    ({"actual_seq_lengths": [], "actual_seq_lengths_kv": []}, "at least one"),
    ({"num_heads": 2}, "num_heads=2"),
    ({"num_key_value_heads": 4}, "num_key_value_heads=4"),
])
def test_emulator_refuses_like_the_real_op(overrides, match):
    case = _op_tensors()
    with pytest.raises(RuntimeError, match=match):
        emu.npu_fused_infer_attention_score(case.q, case.k, case.v, **_op_kwargs(**overrides))


def test_emulator_refuses_fp32_non_contiguous_and_unmodelled_arguments():
    case = _op_tensors(torch.float32)
    with pytest.raises(RuntimeError, match="float16 or bfloat16"):
        emu.npu_fused_infer_attention_score(case.q, case.k, case.v, **_op_kwargs())
    case = _op_tensors()
    strided = case.q.transpose(0, 1).contiguous().transpose(0, 1)
    with pytest.raises(RuntimeError, match="contiguous"):
        emu.npu_fused_infer_attention_score(strided, case.k, case.v, **_op_kwargs())
    with pytest.raises(NotImplementedError, match="TND"):
        emu.npu_fused_infer_attention_score(case.q, case.k, case.v,
                                            **_op_kwargs(input_layout="BNSD"))
    with pytest.raises(NotImplementedError, match="atten_mask"):
        emu.npu_fused_infer_attention_score(case.q, case.k, case.v,
                                            atten_mask=torch.ones(1), **_op_kwargs())
    with pytest.raises(TypeError, match="bogus"):
        emu.npu_fused_infer_attention_score(case.q, case.k, case.v, bogus=1, **_op_kwargs())
    # defaults of unmodelled arguments are fine
    emu.npu_fused_infer_attention_score(case.q, case.k, case.v, sparse_mode=0,
                                        pre_tokens=2147483647, **_op_kwargs())


def test_emulator_enforces_the_documented_limits():
    case = packed_case([3, 2], [2, 4], num_heads=4, num_kv_heads=2, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="head dims"):
        emu.npu_fused_infer_attention_score(case.q[..., :64].contiguous(), case.k[..., :64].contiguous(),
                                            case.v[..., :64].contiguous(), **_op_kwargs())
    assert fia_contract.refusal_reason(257, 1, 128, 128, 128, 1) is not None
    assert fia_contract.refusal_reason(4, 2, 128, 128, 128, 4097) is not None
    ends = list(range(1, 4098))
    q = torch.zeros(4097, 1, 128, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="at most 4096"):
        emu.npu_fused_infer_attention_score(q, q, q, num_heads=1, num_key_value_heads=1, input_layout="TND",
                                            actual_seq_lengths=ends, actual_seq_lengths_kv=ends)


@pytest.mark.parametrize("which", ["query", "key", "value"])
def test_the_emulator_refuses_fp32_like_the_op(which):
    case = packed_case([3, 2], [2, 4], num_heads=4, num_kv_heads=2, head_dim=128, dtype=torch.bfloat16)
    tensors = {"query": case.q, "key": case.k, "value": case.v}
    tensors[which] = tensors[which].float()
    with pytest.raises(RuntimeError) as err:
        emu.npu_fused_infer_attention_score(
            tensors["query"], tensors["key"], tensors["value"], num_heads=4, num_key_value_heads=2,
            scale=case.scale, input_layout="TND", actual_seq_lengths=list(case.q_bounds[1:]),
            actual_seq_lengths_kv=list(case.k_bounds[1:]))
    text = str(err.value)
    assert f"{which} dtype torch.float32" in text and "float16 or bfloat16" in text
    assert "could not be read" in text  # says the text is the emulator's own
