"""Tests that kill the mutants a sampled mutation run found after the last changes to ops/
(docs/mutation-report.md, "Re-run after the final merge")."""

from __future__ import annotations

import logging

import pytest
import torch

from sglang_ascend_hybrid.emulators import fused_infer_attention as fia_emu
from sglang_ascend_hybrid.ops.attention import api as pa
from sglang_ascend_hybrid.ops.attention.torch_impl import packed_attention_torch
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.gdn import contract as caps
from sglang_ascend_hybrid.ops.attention.cases import packed_case


@pytest.mark.parametrize("shape,vstep", [((16, 128, 128), 112), ((64, 128, 128), 104), ((48, 128, 128), 112),
                                         ((64, 256, 256), 48), ((8, 64, 64), 232)])
def test_recurrent_vstep_values_from_the_host_formula(shape, vstep):
    """vStep of sgl-kernel-npu's recurrent host (f425bdf1), worked by hand for a 192 KiB UB."""
    assert caps.recurrent_vstep(*shape) == vstep


def test_zero_heads_message_names_the_shape():
    q = torch.zeros(3, 0, 8)
    with pytest.raises(ValueError, match=r"got q of shape \[3, 0, 8\]"):
        pa.fused_infer_attention_varlen(q, q, q, torch.tensor([0, 3]), torch.tensor([0, 3]))


def test_compaction_log_counts_each_kind_of_one_sided_sequence(caplog):
    case = packed_case([3, 0, 0, 2, 4, 1], [2, 4, 5, 0, 1, 0], num_heads=4, num_kv_heads=2, head_dim=128,
                       dtype=torch.bfloat16)
    with seam.install_emulators(fia_emu.emulators()), caplog.at_level(logging.INFO):
        pa.fused_infer_attention_varlen(*case.args(), **case.kwargs())
    assert "(first seen: 2 KV-only, 2 query-only)" in caplog.text


def test_fast_path_makes_different_shaped_non_contiguous_inputs_contiguous():
    case = packed_case([3, 2], [4, 1], num_heads=4, num_kv_heads=2, head_dim=128, dtype=torch.bfloat16)
    q, k, v = (t.transpose(0, 1).contiguous().transpose(0, 1) for t in (case.q, case.k, case.v))
    assert not q.is_contiguous() and q.shape != k.shape
    with seam.install_emulators(fia_emu.emulators()):
        out, _ = pa.fused_infer_attention_varlen(q, k, v, case.cu_seqlens_q, case.cu_seqlens_k, **case.kwargs())
    ref, _ = packed_attention_torch(case.q, case.k, case.v, case.q_bounds, case.k_bounds, case.scale)
    torch.testing.assert_close(out.float(), ref.float(), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("host,ok", [
    (torch.tensor([0, 3, 5]), True),
    (torch.tensor([0, 3, 5], dtype=torch.int32), True),
    (torch.tensor([[0, 3, 5]]), False),
    (torch.tensor([False, True, True]), False),
    (torch.tensor([0.0, 3.0, 5.0]), False),
])
def test_host_copies_given_as_cpu_tensors(host, ok):
    case = packed_case([3, 2], [3, 2], num_heads=2, num_kv_heads=1, head_dim=16)
    call = lambda: pa.fused_infer_attention_varlen(  # noqa: E731
        case.q, case.k, case.v, case.cu_seqlens_q, case.cu_seqlens_k, cu_seqlens_q_host=host,
        cu_seqlens_k_host=case.k_bounds)
    if ok:
        ref, _ = packed_attention_torch(case.q, case.k, case.v, case.q_bounds, case.k_bounds, case.scale)
        torch.testing.assert_close(call(), ref)
    else:
        with pytest.raises(ValueError, match="cu_seqlens_q_host is a .* tensor: expected a 1D integer tensor"):
            call()
