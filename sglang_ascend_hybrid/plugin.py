"""SGLang's plugin entry points (named in pyproject.toml).

``register`` is the ``sglang.srt.plugins`` entry, called once per SGLang process (launcher,
Engine, every scheduler / detokenizer / DP-controller subprocess).  ``register_multimodal`` is the
``sglang.multimodal_gen.plugins`` entry of the diffusion runtime.  Both hand over to
:func:`sglang_ascend_hybrid.patches.apply.register_runtime`, are idempotent and cheap (no
``torch_npu`` / ``sgl_kernel_npu`` import, no device work) and never raise into SGLang's plugin
loader: every problem is recorded in :data:`sglang_ascend_hybrid.patches.status.STATUS` and logged.
"""

from __future__ import annotations

import logging

from sglang_ascend_hybrid.patches.apply import register_runtime

logger = logging.getLogger("sglang_ascend_hybrid")


def register() -> None:
    """Entry point of ``sglang.srt.plugins``."""
    try:
        register_runtime("srt")
    except Exception:  # never raise into SGLang's plugin loader
        logger.exception("sglang-ascend-hybrid: registration failed unexpectedly")


def register_multimodal() -> None:
    """Entry point of ``sglang.multimodal_gen.plugins`` (diffusion runtime)."""
    try:
        register_runtime("multimodal")
    except Exception:
        logger.exception("sglang-ascend-hybrid: diffusion registration failed unexpectedly")
