"""SGLang's mamba ``extra_buffer`` support, as the launch decision needs it: SGLang's list of
extra_buffer architectures read from the installed source (nothing imported: ``plan`` stays fast),
its architecture and platform checks asked on the live release (whichever signature it has), and
:func:`supports_extra_buffer_around`, the plugin's AROUND hook (patch ``short-conv-extra-buffer``)
that adds the architectures whose snapshots the plugin writes on NPU."""

from __future__ import annotations

import functools
import os
from typing import Any, Optional

from sglang_ascend_hybrid.integration.launch import registration
from sglang_ascend_hybrid.model_families import PLUGIN_SNAPSHOT_ARCHS

# Where SGLang lists the architectures that support the extra_buffer strategy (0.5.20 .. 0.5.23).
EXTRA_BUFFER_SOURCE = ("sglang/srt/arg_groups/overrides.py", "_MAMBA_EXTRA_BUFFER_ARCHS")


@functools.lru_cache(maxsize=1)
def upstream_extra_buffer_archs() -> Optional[frozenset]:
    """SGLang's ``_MAMBA_EXTRA_BUFFER_ARCHS`` read from the installed source (nothing imported:
    ``plan`` stays fast), or None when SGLang or the assignment is not found."""
    import ast

    from sglang_ascend_hybrid import installed_source

    rel, name = EXTRA_BUFFER_SOURCE
    for root in installed_source.package_dirs("sglang"):
        path = os.path.join(os.path.dirname(root), rel)
        try:
            tree = ast.parse(installed_source.read_text(path), filename=path)
        except (OSError, SyntaxError, ValueError):
            continue
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                return frozenset(c.value for c in ast.walk(node.value)
                                 if isinstance(c, ast.Constant) and isinstance(c.value, str))
    return None


def arch_supports_extra_buffer(cfg: Any, hf_config: Any) -> bool:
    """SGLang's supports_mamba_cache_extra_buffer, whichever signature this release has:
    ``(view, model_arch: str)`` before 0.5.21, ``(view, hf_config)`` since."""
    import inspect

    from sglang.srt.arg_groups.overrides import supports_mamba_cache_extra_buffer as supports

    params = list(inspect.signature(supports).parameters)
    if len(params) >= 2 and params[1] == "model_arch":
        return supports(cfg, (getattr(hf_config, "architectures", None) or [""])[0])
    return supports(cfg, hf_config)


def platform_supports_extra_buffer() -> bool:
    """The platform half of SGLang's extra_buffer check: its helper where the release
    has one (0.5.22+), else the predicate older releases inline in
    validate_mamba_extra_buffer ("extra_buffer needs CUDA/MUSA/NPU/ROCm/XPU (FLA)")."""
    from sglang.srt.arg_groups import mamba_hook

    helper = getattr(mamba_hook, "_platform_supports_mamba_cache_extra_buffer", None)
    if helper is not None:
        return bool(helper())
    from sglang.srt.runtime_context import get_platform

    p = get_platform()
    return bool(p.is_cuda or p.is_musa or p.is_npu or p.is_hip or p.is_xpu)


def supports_extra_buffer_around(original, view, model, *args, **kwargs):
    """AROUND hook of SGLang's ``supports_mamba_cache_extra_buffer`` (``model``: the
    architecture name before 0.5.21, the HF config since): on NPU the architectures whose
    snapshots the plugin writes (:data:`PLUGIN_SNAPSHOT_ARCHS`) support the extra_buffer
    strategy; everything else is SGLang's answer.  It is part of the launch decisions: while
    the launch hooks are suspended (``testing.launch_check.launch_hooks_suspended``, SGLang's own behaviour) it
    gives SGLang's answer too."""
    if original(view, model, *args, **kwargs):
        return True
    arch = model if isinstance(model, str) else (getattr(model, "architectures", None) or [""])[0]
    return (getattr(view, "device", None) == "npu" and arch in PLUGIN_SNAPSHOT_ARCHS
            and registration.launch_hooks_registered())
