"""The launch defaults applied to a live launch: the facts of SGLang's ServerArgs record being
resolved (what the user set explicitly, the model, extra_buffer support on this release), the
decision of :mod:`.decision` declared on it, and :func:`launch_defaults_hook`, the resolution hook
(patch ``short-conv-launch-defaults``) that does this before ``handle_model_specific_adjustments``."""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional

from sglang_ascend_hybrid.envs import ENV
from sglang_ascend_hybrid.integration.launch import extra_buffer
from sglang_ascend_hybrid.integration.launch.decision import (
    SUPPORTED_ARCHS,
    Decision,
    LaunchConfigError,
    LaunchFacts,
    decide,
)
from sglang_ascend_hybrid.logutil import log_once
from sglang_ascend_hybrid.model_families import GDN_ARCHS

logger = logging.getLogger(__name__)

# Source name of our declare_resolution() entries.
SOURCE = "ascend_hybrid.launch_defaults"
# Bookkeeping attribute on the ServerArgs record (underscore: allowed during resolution).
_ADJUSTMENTS_ATTR = "_ascend_hybrid_launch_adjustments"
_PREFIX_INFO_ATTR = "_ascend_hybrid_prefix_cache_logged"

# Field defaults of the ServerArgs fields read here (sglang 0.5.23); the fallback when the record
# cannot say.
_FIELD_DEFAULTS = {
    "page_size": None,
    "disable_radix_cache": False,
    "mamba_radix_cache_strategy": "auto",
    "enable_hierarchical_cache": False,
    "linear_attn_backend": "triton",
}


def _explicit(server_args: Any, name: str) -> bool:
    """Whether the caller set ``name`` (SGLang's _raw_input snapshot vs the field default)."""
    raw = getattr(server_args, "_raw_input", None)
    default = _FIELD_DEFAULTS.get(name)
    try:
        import msgspec

        for f in msgspec.structs.fields(type(server_args)):
            if f.name == name:
                if f.default is not msgspec.NODEFAULT:
                    default = f.default
                break
    except Exception:
        pass
    value = raw.get(name, default) if isinstance(raw, dict) else getattr(server_args, name, default)
    return value != default


def npu_model(server_args: Any, archs: frozenset) -> Optional[tuple[Any, Any, str]]:
    """``(resolving view, hf_config, architecture)`` of an NPU launch of one of ``archs``, else None."""
    from sglang.srt.arg_groups.overrides import model_config_of, resolving_view

    cfg = resolving_view(server_args)
    if cfg.device != "npu" or str(cfg.model_path).lower() in ("none", "dummy"):
        return None
    hf_config = model_config_of(server_args).hf_config
    names = getattr(hf_config, "architectures", None) or []
    arch = names[0] if names else ""
    return (cfg, hf_config, arch) if arch in archs else None


def _facts_from_server_args(server_args: Any) -> Optional[LaunchFacts]:
    found = npu_model(server_args, SUPPORTED_ARCHS)
    if found is None:
        return None
    cfg, hf_config, arch = found

    arch_ok = extra_buffer.arch_supports_extra_buffer(cfg, hf_config)
    platform_ok = extra_buffer.platform_supports_extra_buffer()
    reason = ""
    if not arch_ok and arch in GDN_ARCHS and cfg.linear_attn_backend != "triton":
        reason = f" with --linear-attn-backend {cfg.linear_attn_backend} (needs triton)"
    elif arch_ok and not platform_ok:
        reason = " on this platform"
    return LaunchFacts(
        arch=arch,
        device=cfg.device,
        page_size=cfg.page_size,
        page_size_explicit=_explicit(server_args, "page_size"),
        disable_radix_cache=bool(cfg.disable_radix_cache),
        strategy=cfg.mamba_radix_cache_strategy,
        strategy_explicit=_explicit(server_args, "mamba_radix_cache_strategy"),
        hierarchical_cache_explicit=bool(cfg.enable_hierarchical_cache)
        and _explicit(server_args, "enable_hierarchical_cache"),
        extra_buffer_supported=bool(arch_ok and platform_ok),
        extra_buffer_reason=reason,
    )


def apply_launch_defaults(server_args: Any) -> Decision:
    """Evaluate and declare this resolution's launch defaults (raises on conflicts)."""
    facts = _facts_from_server_args(server_args)
    if facts is None:
        return Decision()
    d = decide(facts)
    if d.error:
        raise LaunchConfigError(d.error)
    if d.declare:
        from sglang.srt.arg_groups.overrides import declare_resolution

        declare_resolution(server_args, SOURCE, **d.declare)
        done = list(getattr(server_args, _ADJUSTMENTS_ATTR, None) or [])
        new = [a for a in d.adjustments if a not in done]
        setattr(server_args, _ADJUSTMENTS_ATTR, done + new)
        if new and d.info:
            logger.info(d.info)
    elif d.info and not getattr(server_args, _PREFIX_INFO_ATTR, False):  # once per record
        setattr(server_args, _PREFIX_INFO_ATTR, True)
        logger.info(d.info)
    return d


def launch_defaults_hook(server_args: Any, previous: Callable[[Any], None]) -> None:
    """Resolution hook for ``handle_model_specific_adjustments``.

    Runs after ``handle_npu_backends`` (page_size 128 is declared by then) and
    before the mamba radix-cache resolution inside the wrapped step, so a
    declared ``disable_radix_cache`` is what that resolution sees.
    """
    try:
        apply_launch_defaults(server_args)
    except LaunchConfigError:
        raise
    except Exception as exc:  # upstream internals moved: fall back to upstream behaviour
        if ENV.STRICT.get():
            raise RuntimeError(
                f"sglang-ascend-hybrid: launch defaults could not be evaluated ({type(exc).__name__}: {exc})"
            ) from exc
        log_once(
            logger,
            ("launch-defaults-failed", type(exc).__name__, str(exc)),
            "sglang-ascend-hybrid: launch defaults skipped (%s: %s); SGLang's own NPU defaults apply",
            type(exc).__name__,
            exc,
            level=logging.WARNING,
        )
    previous(server_args)


def adjustments_of(server_args: Any) -> list[str]:
    """The adjustments this plugin declared on a (resolved or failed) record."""
    out = list(getattr(server_args, _ADJUSTMENTS_ATTR, None) or [])
    if out:
        return out
    for source, fields in getattr(server_args, "_resolved_overrides", None) or ():
        if source == SOURCE:
            out.extend(f"{k}={v!r}" for k, v in fields.items())
    return out
