"""What the packed-attention ladder keys its decisions on: :class:`AttentionSignature`."""

from __future__ import annotations

from dataclasses import dataclass

from sglang_ascend_hybrid.ops.signature import Signature


@dataclass(frozen=True)
class AttentionSignature(Signature):
    """Shape facts ``npu_fused_infer_attention_score``'s acceptance depends on (never the sequence
    lengths).  Its text is the base's field tuple: ``(4, 2, 128, 128, 128, 'bfloat16', 'cpu')``."""

    query_heads: int
    key_value_heads: int
    head_dim_q: int
    head_dim_k: int
    head_dim_v: int
    dtype: str    # q's dtype name (the input checks make k's and v's the same)
    device: str   # q's device type
