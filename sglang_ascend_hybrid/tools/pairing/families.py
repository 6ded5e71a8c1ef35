"""Which SGLang files' ``sgl_kernel_npu`` imports each model family needs when SGLang builds its
attention backend on NPU (:data:`FAMILY_FILES`), and the family of a model config.
"""

from __future__ import annotations

from sglang_ascend_hybrid.model_families import ConfigError, family

_NPU_ATTN = "sglang/srt/hardware_backend/npu/attention/"
GDN_TRITON = "sglang/srt/layers/attention/linear/kernels/gdn_triton.py"
GDN_BACKEND = "sglang/srt/layers/attention/linear/gdn_backend.py"
ASCEND_GDN_BACKEND = _NPU_ATTN + "ascend_gdn_backend.py"
ASCEND_HYBRID_LINEAR_BACKEND = _NPU_ATTN + "ascend_hybrid_linear_attn_backend.py"
ASCEND_BACKEND = _NPU_ATTN + "ascend_backend.py"

# Family kind (model_families.family) -> the SGLang files whose sgl_kernel_npu
# imports run when SGLang builds that family's attention backend on NPU: the
# Ascend attention backend for the full-attention layers, the Ascend hybrid
# linear-attention wrapper, and for GDN the Ascend GDN backend with the GDN kernel
# dispatcher it imports (gdn_backend.py) and that one's Triton kernels (gdn_triton.py).
FAMILY_FILES: dict[str, tuple[str, ...]] = {
    "gdn": (GDN_TRITON, GDN_BACKEND, ASCEND_GDN_BACKEND, ASCEND_HYBRID_LINEAR_BACKEND, ASCEND_BACKEND),
    "short_conv": (ASCEND_HYBRID_LINEAR_BACKEND, ASCEND_BACKEND),
}


def families_needing(file: str) -> tuple[str, ...]:
    """The family kinds whose attention backend needs ``file``'s imports."""
    return tuple(kind for kind, files in FAMILY_FILES.items() if file in files)


def model_family(model_config) -> str | None:
    """The family kind (:func:`sglang_ascend_hybrid.model_families.family`) of SGLang's
    ``model_config``, from its hf config's (or text config's) model_type; None for others."""
    for cfg in (getattr(model_config, "hf_config", None), getattr(model_config, "hf_text_config", None)):
        try:
            return family({"model_type": getattr(cfg, "model_type", None)})
        except ConfigError:
            continue
    return None
