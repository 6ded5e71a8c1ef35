"""Calling sgl-kernel-npu's Python kernel entries past the integration hooks that wrap them.

SGLang's Ascend GDN backend calls some of the entries the ladder's rungs also call (the 0.5.20
route hooks ``chunk_gated_delta_rule_npu``).  A rung resolves the entry to its original (a
wrapper carries it in :data:`ORIGINAL_ATTR`) and calls it with :data:`IN_LADDER` set, so a hook
that still sees the call passes it straight through instead of walking the ladder a second time.
"""

from __future__ import annotations

import contextvars

from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.gdn.contract import OP_TRITON

# Attribute a wrapped kernel entry may carry, pointing at the original.
ORIGINAL_ATTR = "__sglang_ascend_hybrid_original__"
# True while a ladder rung calls a kernel entry that an integration hook wraps:
# the hook then passes straight through (no second ladder walk).
IN_LADDER: contextvars.ContextVar[bool] = contextvars.ContextVar("gdn_in_ladder", default=False)


def resolve_entry(name: str):
    """The seam's callable for ``name``, unwrapped to the original entry."""
    fn = seam.lookup(name)
    return getattr(fn, ORIGINAL_ATTR, fn)


def call_triton_entry(q, k, v, g, beta, *, scale: float, initial_state, cu_seqlens):
    """sgl-kernel-npu's Triton prefill entry as the plugin calls it (q / k already normalised, a
    key-first initial state or None), past the integration hook that wraps it: ``(o, final, h)``."""
    fn = resolve_entry(OP_TRITON)
    token = IN_LADDER.set(True)
    try:
        return fn(q, k, v, g.float(), beta, scale=scale, initial_state=initial_state, output_final_state=True,
                  cu_seqlens=cu_seqlens, head_first=False, use_qk_l2norm_in_kernel=False)
    finally:
        IN_LADDER.reset(token)
