"""The launch decision planned from a config.json, without SGLang running: what the resolution hook
would decide for a model and the user's flags (``plan`` calls it).  Reads the
config and, when SGLang is installed, its extra_buffer architecture list from its source; imports
nothing of SGLang."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping, Optional

from sglang_ascend_hybrid.integration.launch.decision import (
    Decision,
    LaunchConfigError,
    LaunchFacts,
    decide,
    snapshot_writer,
)
from sglang_ascend_hybrid.integration.launch.extra_buffer import upstream_extra_buffer_archs
from sglang_ascend_hybrid.model_families import GDN_ARCHS, PLUGIN_SNAPSHOT_ARCHS, ModelFacts
from sglang_ascend_hybrid.ops.errors import bad_input

# What the planner accepts as a model: a config.json dict, file or model directory, or the
# facts ``plan`` already parsed (model_families.facts), which are not read again.
ConfigLike = Mapping[str, Any] | str | os.PathLike | ModelFacts


def _load_config(config: Mapping[str, Any] | str | os.PathLike) -> dict:
    if isinstance(config, Mapping):
        return dict(config)
    p = Path(config)
    if p.is_dir():
        p = p / "config.json"
    with open(p, encoding="utf-8") as fh:
        return json.load(fh)


def _model(config: ConfigLike) -> ModelFacts | dict:
    """``config`` read once: the facts as given, else the config dict."""
    return config if isinstance(config, ModelFacts) else _load_config(config)


def _architecture(model: ModelFacts | dict) -> str:
    """``architectures[0]`` of a :func:`_model`, "" when there is none."""
    if isinstance(model, ModelFacts):
        return model.architecture
    archs = model.get("architectures") or []
    return archs[0] if archs else ""


def planned_adjustments(config: ConfigLike, tp_size: int = 1, **flags) -> list[str]:
    """The adjustments the launch hook would make for this model and flags (the texts of
    :func:`planned_decision`'s adjustments; the same arguments)."""
    return list(planned_decision(config, tp_size, **flags).adjustments)


def planned_decision(
    config: ConfigLike,
    tp_size: int = 1,
    *,
    page_size: Optional[int] = None,
    disable_radix_cache: bool = False,
    mamba_radix_cache_strategy: str = "auto",
    enable_hierarchical_cache: bool = False,
    linear_attn_backend: str = "triton",
    device: str = "npu",
) -> Decision:
    """What the launch hook would decide for this model and flags.

    ``config`` is a config.json dict, file or model directory, or its parsed
    :class:`~sglang_ascend_hybrid.model_families.ModelFacts` (``plan``).  Keyword
    arguments are the user's flags (defaults = not given).  Pure: reads the
    config and, when SGLang is installed, its extra_buffer architecture list
    from its source (nothing of SGLang is imported); resolves nothing.  ``tp_size`` does not change today's
    decisions (the
    page-size / radix-cache conflict is per model, not per rank); it is part of
    the signature so ``plan`` has one call shape.

    Raises :class:`LaunchConfigError` for explicit flags that cannot work
    together (the same message resolution would give).
    """
    if int(tp_size) < 1:
        raise bad_input("tp_size", tp_size, "an integer >= 1", op="planned_decision")
    arch = _architecture(_model(config))
    extra_archs = upstream_extra_buffer_archs()
    if extra_archs is None:  # SGLang not installed: 0.5.23's list for our families
        extra_archs = GDN_ARCHS
    if device == "npu":  # the plugin's gate hook (extra_buffer.supports_extra_buffer_around)
        extra_archs = extra_archs | PLUGIN_SNAPSHOT_ARCHS
    extra_ok = arch in extra_archs and linear_attn_backend == "triton"
    reason = ""
    if arch in extra_archs and linear_attn_backend != "triton":
        reason = f" with --linear-attn-backend {linear_attn_backend} (needs triton)"
    facts = LaunchFacts(
        arch=arch,
        device=device,
        page_size=page_size if page_size is not None else (128 if device == "npu" else None),
        page_size_explicit=page_size is not None,
        disable_radix_cache=bool(disable_radix_cache),
        strategy=mamba_radix_cache_strategy,
        strategy_explicit=mamba_radix_cache_strategy != "auto",
        hierarchical_cache_explicit=bool(enable_hierarchical_cache),
        extra_buffer_supported=extra_ok,
        extra_buffer_reason=reason,
    )
    d = decide(facts)
    if d.error:
        raise LaunchConfigError(d.error)
    return d


def planned_prefix_cache(config: ConfigLike) -> dict[str, Any]:
    """Prefix caching on NPU at default flags: ``{"on", "strategy", "snapshots"}`` (``snapshots``:
    who writes the extra_buffer snapshots, the family table's ``radix_snapshots``).  ``config``: as
    for :func:`planned_decision`."""
    model = _model(config)
    off = bool(planned_decision(model).declare.get("disable_radix_cache"))
    writer = snapshot_writer(_architecture(model)) or None
    return {"on": not off, "strategy": None if off else "extra_buffer", "snapshots": None if off else writer}
