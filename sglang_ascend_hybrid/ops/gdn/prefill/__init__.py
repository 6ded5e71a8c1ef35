"""GDN prefill (SGLang's ``extend`` verb): packed varlen chunked prefill through the prefill ladder.

:class:`ChunkCall` is one call (q / k already l2-normalised), :data:`PREFILL` the ladder
(``npu_chunk`` -> ``mega`` -> ``triton`` -> ``torch``, :mod:`.ladder`), :func:`run_prefill` walks
it.  Beside it: the mega kernel's head planner (:mod:`.planner`, :mod:`.plan_exec`), the Triton
entry past the hooks that wrap it (:mod:`.entries`) and its chunk-stride probe
(:mod:`.chunk_stride_probe`).  The checked public op is
:func:`sglang_ascend_hybrid.ops.gdn.api.chunk_gated_delta_rule`.
"""

from sglang_ascend_hybrid.ops.gdn.prefill.call import ChunkCall, chunk_offsets, without_empty_sequences
from sglang_ascend_hybrid.ops.gdn.prefill.ladder import (
    PREFILL,
    first_without_values,
    forget_refusals,
    is_triton_entry_refusal,
    mega_reason,
    npu_chunk_reason,
    npu_chunk_state_dtype,
    plan_for_layout,
    prefill_rungs,
    prefill_static_reasons,
    probe_triton_entry_before_serving,
    run_prefill,
    triton_needs_probe,
    triton_reason,
    triton_rounds_chunk_states,
    triton_runs_mega,
)

__all__ = ["ChunkCall", "chunk_offsets", "without_empty_sequences", "PREFILL", "first_without_values",
           "forget_refusals", "is_triton_entry_refusal", "mega_reason", "npu_chunk_reason", "npu_chunk_state_dtype",
           "plan_for_layout", "prefill_rungs", "prefill_static_reasons", "probe_triton_entry_before_serving",
           "run_prefill", "triton_needs_probe", "triton_reason", "triton_rounds_chunk_states", "triton_runs_mega"]
