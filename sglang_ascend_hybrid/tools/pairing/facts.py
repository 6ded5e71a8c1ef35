"""What is known of the ``sgl_kernel_npu`` modules SGLang imports: where each first appeared,
as read from sgl-kernel-npu's history, with the repository, path and commit(s) read.  The pairing
messages (:mod:`.message_lines`) name a missing module's :attr:`KernelFact.provided_by`.
"""

from __future__ import annotations

from dataclasses import dataclass

_SKN = "sgl-project/sgl-kernel-npu"
_SKN_PY = "python/sgl_kernel_npu/sgl_kernel_npu"


@dataclass(frozen=True)
class KernelFact:
    """Where an ``sgl_kernel_npu`` module first appeared, as read from sgl-kernel-npu's history."""

    module: str
    provided_by: str  # the phrase used in messages
    source: str  # repository, path, commit(s) read


# Read in a snapshot of sgl-project/sgl-kernel-npu whose newest tag is 2026.08.21
# (65 tags; main and tag 2026.08.21 at f425bdf1e191a7682296d3b2ed0b927d4e37d671).
_TAGS = "absent from all 65 tags through 2026.08.21 and from main at f425bdf1"
KNOWN: dict[str, KernelFact] = {f.module: f for f in (
    KernelFact(
        module="sgl_kernel_npu.fla.fused_sigmoid_gating_recurrent_decode_optimized",
        provided_by="first in sgl-kernel-npu PR #740, not in any tag up to 2026.08.21",
        source=f"{_SKN} {_SKN_PY}/fla/fused_sigmoid_gating_recurrent_decode_optimized.py: added by 5300df95a0eb"
               "63e3402309fb634216176b7c0557 (refs/pull/740/head a18c0c2f4b1c28c12e71b6dc9e9ea5fce766fc44), defines "
               f"fused_sigmoid_gating_delta_rule_update_decode_npu; {_TAGS}",
    ),
    KernelFact(
        module="sgl_kernel_npu.activation.fused_sigmoid_mul",
        provided_by="first in sgl-kernel-npu PR #740, not in any tag up to 2026.08.21",
        source=f"{_SKN} {_SKN_PY}/activation/fused_sigmoid_mul.py: added by 5300df95a0eb63e3402309fb634216176b7c0557 "
               f"(refs/pull/740/head), defines fused_sigmoid_mul and fused_sigmoid_mul_broadcast; {_TAGS}",
    ),
    KernelFact(
        module="sgl_kernel_npu.sparsity_driven_kv_offload",
        provided_by="first in sgl-kernel-npu PR #636, not in any tag up to 2026.08.21",
        source=f"{_SKN} {_SKN_PY}/sparsity_driven_kv_offload/__init__.py: added by edb5fd23b226f5dcd10885ecc0135e2b6"
               f"e1ba1ab (refs/pull/636/head df5fdc498624bf4fe4dcfebc2b15788689c54fd8); {_TAGS}",
    ),
    KernelFact(
        module="sgl_kernel_npu.fla.fused_sigmoid_gating_recurrent",
        provided_by="in every sgl-kernel-npu tag from 20250913 to 2026.08.21",
        source=f"{_SKN} {_SKN_PY}/fla/fused_sigmoid_gating_recurrent.py defines "
               "fused_sigmoid_gating_delta_rule_update_npu (the decode kernel SGLang 0.5.20's gdn_triton.py imports) "
               "in every tag from 20250913 to 2026.08.21 "
               "(f425bdf1e191a7682296d3b2ed0b927d4e37d671)",
    ),
)}
