"""Gated DeltaNet on every head layout: fast NPU kernels when they fit, exact fallbacks otherwise.

Public ops: :func:`chunk_gated_delta_rule` (packed varlen prefill) and
:func:`recurrent_gated_delta_rule` (one decode step on a state pool).
:func:`plan_for` is the head planner shared with the ``plan`` CLI.
"""

from sglang_ascend_hybrid.ops.gdn.api import chunk_gated_delta_rule, chunk_with_states, recurrent_gated_delta_rule
from sglang_ascend_hybrid.ops.gdn.planner import Plan, plan_for

__all__ = ["chunk_gated_delta_rule", "chunk_with_states", "recurrent_gated_delta_rule", "Plan", "plan_for"]
