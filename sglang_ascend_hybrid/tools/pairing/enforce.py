"""The pairing check at NPU startup: :func:`enforce_for_model` (called from the
``attn_backend_wrapper`` hook) stops strict (``ascend_hybrid``) startup on what the model's
family needs and the installed sgl_kernel_npu lacks, and logs one WARNING per missing import
otherwise.
"""

from __future__ import annotations

import logging

from sglang_ascend_hybrid.logutil import log_once
from sglang_ascend_hybrid.tools.pairing.families import model_family
from sglang_ascend_hybrid.tools.pairing.message_lines import family_problems

logger = logging.getLogger(__package__)  # the package's logger, "sglang_ascend_hybrid.tools.pairing"


class KernelPairingError(RuntimeError):
    pass


def enforce_for_model(model_config) -> None:
    """At attention-backend construction on NPU: under ``ascend_hybrid`` raise
    :class:`KernelPairingError` listing what the model's family needs and the
    installed sgl_kernel_npu lacks; under plain ``ascend`` log each one once as a
    WARNING.  Models of no family served here are not checked."""
    from sglang_ascend_hybrid.patches.mode import hybrid_requested

    kind = model_family(model_config)
    if kind is None:
        return
    try:
        problems = family_problems(kind)
    except Exception as exc:  # a diagnostic: never the reason a launch fails
        log_once(logger, ("sgl-kernel-npu-pairing-error", type(exc).__name__), "sglang-ascend-hybrid: the "
                 "sgl-kernel-npu pairing check could not run (%s: %s); continuing without it",
                 type(exc).__name__, exc, level=logging.WARNING)
        return
    if not problems:
        return
    if hybrid_requested():
        raise KernelPairingError(
            f"sglang-ascend-hybrid: --attention-backend ascend_hybrid stops startup: the installed sgl_kernel_npu "
            f"lacks what SGLang's Ascend attention backend imports for {kind} models:\n" + "\n".join(problems))
    for text in problems:
        log_once(logger, ("sgl-kernel-npu-pairing", text), "%s", text, level=logging.WARNING)
