"""Gated DeltaNet on every head layout: fast NPU kernels when they fit, exact fallbacks otherwise.

Public ops: :func:`chunk_gated_delta_rule` (packed varlen prefill) and
:func:`recurrent_gated_delta_rule` (one decode step on a state pool), checked in :mod:`.api`.
:func:`plan_for` is the head planner shared with the ``plan`` CLI.

Laid out by SGLang's three linear-attention verbs, one ladder each:

- :mod:`.prefill` (``extend``): chunked prefill, the ``gdn_prefill`` ladder, the mega kernel's head
  planner, the Triton chunk entry and its stride probe;
- :mod:`.decode` (``decode``): one token per request, the ``gdn_serving_decode`` ladder serving both
  SGLang's gated decode and :func:`recurrent_gated_delta_rule`, the Triton decode kernels' contract
  and layout probe;
- :mod:`.verify` (``target_verify``): speculative verify (MTP), the ``gdn_verify`` ladder, and
  :mod:`.verify_gates`, the ``gdn_verify_gates`` ladder of the gates SGLang computes just before it.

Shared by them: :mod:`.signature` (what the ladders key on), :mod:`.contract` (the NPU GDN ops),
:mod:`.gating` (a step's decay for the decode and verify gates ladders),
:mod:`.torch_impl` / :mod:`.pool_step` (torch rungs), :mod:`.naive` (the `naive_*` oracles),
:mod:`.pool_layout`, :mod:`.recurrent_rows`, :mod:`.scatter`.
"""

from sglang_ascend_hybrid.ops.gdn.api import chunk_gated_delta_rule, chunk_with_states, recurrent_gated_delta_rule
from sglang_ascend_hybrid.ops.gdn.prefill.planner import Plan, plan_for

__all__ = ["chunk_gated_delta_rule", "chunk_with_states", "recurrent_gated_delta_rule", "Plan", "plan_for"]
