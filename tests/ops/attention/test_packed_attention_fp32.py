"""fp32 packed attention on a machine with ``npu_fused_infer_attention_score``: the op takes fp16 /
bf16 queries only (Ascend/op-plugin 517f2e7d ``docs/zh/custom_APIs/torch_npu/
torch_npu-npu_fused_infer_attention_score.md`` line 86), so the contract predicts the refusal, the
op is never called, the torch path serves with one INFO line; the emulator refuses fp32
as the op would (a RuntimeError; the real text could not be read, and the emulator's says so)."""

from __future__ import annotations

import logging

import pytest
import torch

from sglang_ascend_hybrid.emulators import fused_infer_attention as emu
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.attention import contract as fia_contract
from sglang_ascend_hybrid.ops.attention.api import fused_infer_attention_varlen
from sglang_ascend_hybrid.ops.attention.cases import packed_case
from sglang_ascend_hybrid.ops.attention.torch_impl import packed_attention_torch
from tests.support.call_counter import Counting


@pytest.mark.parametrize("one_sided", [False, True], ids=["two-sided", "with-one-sided"])
def test_fp32_never_reaches_the_op_and_the_reference_serves(caplog, one_sided):
    kv = [2, 0 if one_sided else 3, 4]
    case = packed_case([3, 2, 1], kv, num_heads=4, num_kv_heads=2, head_dim=128, dtype=torch.float32)
    op = Counting(emu.npu_fused_infer_attention_score)
    with seam.install_emulators({emu.OP_NAME: op}), caplog.at_level(logging.INFO):
        out, lse = fused_infer_attention_varlen(*case.args(), **case.kwargs(return_softmax_lse=True))
        fused_infer_attention_varlen(*case.args(), **case.kwargs(return_softmax_lse=True))
    assert op.calls == 0
    ref_out, ref_lse = packed_attention_torch(case.q, case.k, case.v, case.q_bounds, case.k_bounds,
                                                     case.scale)
    assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse)
    lines = [r for r in caplog.records if "outside npu_fused_infer_attention_score's contract" in r.getMessage()
             and "float32" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.INFO  # two calls, one line
    # the same case in bf16 does reach the op
    bf16 = packed_case([3, 2, 1], kv, num_heads=4, num_kv_heads=2, head_dim=128, dtype=torch.bfloat16)
    with seam.install_emulators({emu.OP_NAME: op}):
        fused_infer_attention_varlen(*bf16.args(), **bf16.kwargs())
    assert op.calls == 1


def test_the_contract_predicts_the_dtype_refusal():
    assert fia_contract.refusal_reason(4, 2, 128, 128, 128, 3, torch.float32) == \
        "q / k / v dtype float32; the op takes float16 or bfloat16"
    for dtype in (torch.float16, torch.bfloat16, None):
        assert fia_contract.refusal_reason(4, 2, 128, 128, 128, 3, dtype) is None
    assert fia_contract.refusal_reason(4, 2, 128, 128, 128, 3, torch.float64) is not None
