"""The contract of ``torch_npu.npu_fused_infer_attention_score`` with ``input_layout="TND"`` (the
diffusion runtime's packed attention), in one place; the emulator
(:mod:`sglang_ascend_hybrid.emulators.fused_infer_attention`) mirrors it and the packed-attention
ladder (:mod:`.dispatch`) predicts from it.

Source: Ascend/op-plugin 517f2e7d ``docs/zh/custom_APIs/torch_npu/torch_npu-npu_fused_infer_attention_score.md``
and ``op_plugin/config/op_plugin_functions.yaml`` (~6177):

- ``actual_seq_lengths`` / ``actual_seq_lengths_kv``: cumulative ends, non-decreasing, one per
  sequence, at most 4096 sequences; equal consecutive ends (an empty sequence) are allowed;
- head dims: Q_D = K_D = V_D = 128, or Q_D = K_D = 192 with V_D 128 or 192 (512 only with rope,
  which this plugin never passes); at most 256 heads;
- LSE ``(T, N, 1)`` fp32 with ``softmax_lse_flag``, else a ``(1,)`` zero tensor;
- ``query``: ``float16`` or ``bfloat16`` only (same document at 517f2e7d, line 86: "数据类型：
  ``float16``、``bfloat16``"; key / value may also be int8 / int4, quantised, which this plugin never
  passes): fp32 q / k / v are outside the contract, the op is not called for them.

The documentation gives no refusal texts, so the emulator's texts are its own and nothing in the
plugin keys on them: calls outside the contract are predicted here and never made.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang_ascend_hybrid.ops.signature import dtype_name

OP_NAME = "npu_fused_infer_attention_score"  # torch_npu, called through the seam
KERNEL_NOTES = {OP_NAME: ("npu_fused_infer_attention_score", "torch_npu, input_layout TND")}
MAX_HEADS = 256
MAX_SEQUENCES = 4096
HEAD_DIMS = ((128, 128, 128), (192, 192, 128), (192, 192, 192))  # (Q_D, K_D, V_D)
DTYPES = (torch.float16, torch.bfloat16)  # query (and the unquantised key / value) dtypes


def head_dims_supported(q_dim: int, k_dim: int, v_dim: int) -> bool:
    return (q_dim, k_dim, v_dim) in HEAD_DIMS


def dtype_supported(dtype: torch.dtype) -> bool:
    return dtype in DTYPES


def refusal_reason(num_heads: int, num_kv_heads: int, q_dim: int, k_dim: int, v_dim: int,
                   num_sequences: int, dtype: Optional[torch.dtype] = None) -> Optional[str]:
    """Why the op cannot take the call (None: it can); ``dtype``: that of q / k / v (None: not asked)."""
    if dtype is not None and not dtype_supported(dtype):
        return f"q / k / v dtype {dtype_name(dtype)}; the op takes float16 or bfloat16"
    if not head_dims_supported(q_dim, k_dim, v_dim):
        return (f"head dims (Q, K, V) = ({q_dim}, {k_dim}, {v_dim}); the op takes (128, 128, 128) or "
                f"(192, 192, 128 / 192)")
    if not (0 < num_heads <= MAX_HEADS and 0 < num_kv_heads <= MAX_HEADS):
        return f"{num_heads} query / {num_kv_heads} key-value heads; the op takes at most {MAX_HEADS}"
    if num_sequences > MAX_SEQUENCES:
        return f"{num_sequences} sequences; the op takes at most {MAX_SEQUENCES}"
    return None
