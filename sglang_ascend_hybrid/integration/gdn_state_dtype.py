"""Launch: the SSM state dtype of GDN models on NPU, and which kernels it means (one INFO line).

The plugin's choice: **keep the dtype the user or the model asked for**.  SGLang resolves the
SSM state dtype as ``--mamba-ssm-dtype`` (exported as ``SGLANG_MAMBA_SSM_DTYPE``) > the model
config's ``mamba_ssm_dtype`` > float32 (``sglang/srt/configs/mamba_utils.py``).  The Qwen3.5 /
Qwen3.6 configs ask for float32.  On A2 / A3 the fused NPU GDN kernels hold 16-bit states
(``torch.ops.npu.chunk_gated_delta_rule``: bf16 state, fp32 only on Ascend 950;
``torch.ops.npu.recurrent_gated_delta_rule``: bf16 only; the mega kernel: fp16), so an fp32
pool runs prefill on the Triton chunk kernel (torch when that is absent) and speculative verify
on the plugin's torch verify path: correct, slower.  Switching to bf16 silently would change the
model's numerics (speculative acceptance depends on them), so the plugin never does; the INFO
line says what runs and that ``--mamba-ssm-dtype bfloat16`` buys the fused kernels.  No
combination of ``--mamba-ssm-dtype`` and ``--speculative-*`` flags is impossible with the plugin
(every rung keeps the pool's dtype), so nothing here fails a launch.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, Callable, Optional

from sglang_ascend_hybrid.logutil import log_once

logger = logging.getLogger(__name__)

STEP = "handle_model_specific_adjustments"
DTYPES = ("float32", "bfloat16", "float16")
RECORD_ATTR = "_sglang_ascend_hybrid_gdn_state"


@dataclass(frozen=True)
class GdnStatePlan:
    """What a GDN model's state dtype means for the NPU kernels (also shown by ``plan``)."""

    dtype: str
    source: str           # "--mamba-ssm-dtype", "SGLANG_MAMBA_SSM_DTYPE", "model config", "SGLang default"
    prefill: str
    verify: str

    def message(self, arch: str, speculative: bool) -> str:
        spec = f" Speculative verify (MTP): {self.verify}." if speculative else ""
        hint = ""
        if self.dtype != "bfloat16":
            hint = (" Pass --mamba-ssm-dtype bfloat16 to run the fused NPU kernels instead (lower state "
                    "precision; the model asked for " + self.dtype + ").")
        else:
            hint = " Set --mamba-ssm-dtype float32 to keep fp32 states (slower kernels)."
        return (f"sglang-ascend-hybrid: {arch} keeps its SSM state in {self.dtype} (from {self.source}); "
                f"GDN prefill: {self.prefill}.{spec}{hint}")


def plan_state(dtype: str, source: str, chip: Optional[str] = None) -> GdnStatePlan:
    """The kernels that serve a pool of ``dtype`` (chip None: an A2 / A3, the common case)."""
    if dtype == "bfloat16":
        prefill = "torch.ops.npu.chunk_gated_delta_rule (then the mega kernel, Triton, torch as needed)"
        verify = "torch.ops.npu.recurrent_gated_delta_rule"
    elif dtype == "float32" and chip == "950":
        prefill = "torch.ops.npu.chunk_gated_delta_rule with fp32 states (Ascend 950)"
        verify = "the plugin's torch verify path (the fused recurrent op is bf16-only)"
    elif dtype == "float32":
        prefill = ("sgl-kernel-npu's Triton chunk kernel, torch if absent (the fused chunk op keeps bf16 "
                   "states on A2/A3 and the mega kernel fp16)")
        verify = "the plugin's torch verify path, fp32 compute and storage (the fused recurrent op is bf16-only)"
    else:  # float16
        prefill = "sgl-kernel-npu's mega kernel (fp16 states), then Triton, torch"
        verify = "the plugin's torch verify path (the fused recurrent op is bf16-only)"
    return GdnStatePlan(dtype, source, prefill, verify)


def effective_dtype(flag: Optional[str], config_dtype: Optional[str], env: Optional[str]) -> tuple[str, str]:
    """SGLang's precedence (mamba_utils.mamba2_state_dtype, serving_hook exporting the flag)."""
    if flag in DTYPES:
        return flag, "--mamba-ssm-dtype"
    if env in DTYPES:
        return env, "SGLANG_MAMBA_SSM_DTYPE"
    if config_dtype in DTYPES:
        return config_dtype, "the model config's mamba_ssm_dtype"
    return "float32", "SGLang default"


def _config_dtype(hf_config) -> Optional[str]:
    text = getattr(hf_config, "text_config", None)
    if text is not None and getattr(text, "mamba_ssm_dtype", None) is not None:
        return text.mamba_ssm_dtype
    return getattr(hf_config, "mamba_ssm_dtype", None)


def report(server_args: Any) -> Optional[GdnStatePlan]:
    """Log the state dtype decision once for a GDN model on NPU; record it on ``server_args``."""
    from sglang_ascend_hybrid.integration.launch.resolution import npu_model
    from sglang_ascend_hybrid.model_families import GDN_ARCHS

    found = npu_model(server_args, GDN_ARCHS)
    if found is None:
        return None
    cfg, hf_config, arch = found
    dtype, source = effective_dtype(getattr(cfg, "mamba_ssm_dtype", None), _config_dtype(hf_config),
                                    os.environ.get("SGLANG_MAMBA_SSM_DTYPE"))
    plan = plan_state(dtype, source)
    speculative = getattr(cfg, "speculative_algorithm", None) is not None
    setattr(server_args, RECORD_ATTR, {"dtype": dtype, "source": source, "prefill": plan.prefill,
                                       "verify": plan.verify, "speculative": speculative})
    log_once(logger, ("gdn-state-dtype", arch, dtype, source, speculative), plan.message(arch, speculative))
    return plan


def gdn_state_dtype_hook(server_args: Any, previous: Callable[[Any], None]) -> None:
    """Resolution hook: report (never change) the GDN state dtype, then run the step."""
    try:
        report(server_args)
    except Exception as exc:  # a report must never stop a launch
        log_once(logger, ("gdn-state-dtype-failed", type(exc).__name__),
                 "sglang-ascend-hybrid: could not report the GDN SSM state dtype (%s: %s)",
                 type(exc).__name__, exc, level=logging.WARNING)
    previous(server_args)
