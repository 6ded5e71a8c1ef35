"""Launch defaults: make every supported family get through SGLang's startup
resolution on NPU with default flags.

The conflict
------------
On NPU, ``set_default_server_args`` (resolution step ``handle_npu_backends``)
sets ``page_size=128``.  Models that keep a recurrent / conv state next to the
attention KV cache need, for the radix (prefix) cache, either

* the mamba ``extra_buffer`` strategy (state snapshots at page boundaries), or
* ``page_size=1`` (``no_buffer``: only the sequence-end state exists).

SGLang 0.5.23 supports ``extra_buffer`` for the GDN families (Qwen3.5 / 3.6 /
Qwen3-Next, with the default ``--linear-attn-backend triton``) but not for the
short-conv hybrids (LFM2, LFM2-MoE, LFM2-VL, ZAYA1).  For those the mamba
radix-cache resolution picks ``no_buffer`` and stops with
``AssertionError: no_buffer only supports page_size=1.`` (LFM2 / LFM2-MoE /
ZAYA1), or -- for LFM2-VL, which the resolution does not route through the
mamba radix cache -- resolution passes and the scheduler's ``MambaComponent``
fails later with "requires page_size=1 when mamba_extra_buffer is disabled".

The choice
----------
* ``page_size=1`` is not an option on Ascend: the ``ascend`` attention backend
  passes ``page_size`` as the paged-attention block size, which FIA rejects
  unless it is a multiple of 16 (sgl-project/sglang#25169:
  "block_size should aligned to 16, but got 1"); 128 is the value upstream
  defaults to and validates (sgl-project/sglang#38196 reports 16 corrupting
  output).
* ``extra_buffer`` is rejected upstream for these architectures
  ("extra_buffer is not supported for ...; use no_buffer"): SGLang's short-conv
  sidecar writes no snapshot.  The plugin's Ascend sidecar writes them for LFM2 /
  LFM2-MoE / ZAYA1 (:mod:`.short_conv_track`), and :func:`supports_extra_buffer_around`
  (patch ``short-conv-extra-buffer``) lets SGLang's resolution pick ``extra_buffer``
  for them on NPU: prefix caching with page size 128, one INFO line naming the
  strategy (as for the GDN families, whose snapshots SGLang writes).
* For LFM2-VL (nobody writes its snapshots yet) the radix
  cache is disabled (``disable_radix_cache=True``, declared at the start of
  ``handle_model_specific_adjustments`` -- the step where SGLang itself declares it
  for checkpoints that cannot prefix-cache) and ``page_size`` stays 128.  Cost: no
  prefix reuse for these models.

Explicit user values are never changed.  "Explicit" is SGLang's own notion: the
record's ``_raw_input`` snapshot (what the caller asked for) differs from the
field default.  Explicit flags that cannot work together fail at resolution
with one ``ValueError`` naming the flags and the fix.

The decision is a pure function (:func:`decide`) shared by the resolution hook
(:func:`launch_defaults_hook`) and by :func:`planned_adjustments`, which the
``plan`` CLI calls on a bare config.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from sglang_ascend_hybrid.envs import ENV
from sglang_ascend_hybrid.logutil import log_once
from sglang_ascend_hybrid.model_families import (GDN_ARCHS, PLUGIN_SNAPSHOT_ARCHS, RADIX_SNAPSHOTS_BY_ARCH,
                                                  SHORT_CONV_ARCHS, ModelFacts)

logger = logging.getLogger(__name__)

# The overridable resolution step this module wraps (resolution_hooks._OVERRIDABLE_HOOKS).
STEP = "handle_model_specific_adjustments"
# Source name of our declare_resolution() entries.
SOURCE = "ascend_hybrid.launch_defaults"
# Bookkeeping attribute on the ServerArgs record (underscore: allowed during resolution).
_ADJUSTMENTS_ATTR = "_ascend_hybrid_launch_adjustments"
_PREFIX_INFO_ATTR = "_ascend_hybrid_prefix_cache_logged"

# Architectures this plugin serves (hf_config.architectures[0]): the family table's.
SUPPORTED_ARCHS = SHORT_CONV_ARCHS | GDN_ARCHS

# Paged attention on Ascend (FIA block_size) needs a multiple of this.
ASCEND_PAGE_ALIGN = 16

# Field defaults of the ServerArgs fields read here (sglang 0.5.23); used for
# the pure planner and as a fallback when the record cannot say.
_FIELD_DEFAULTS = {
    "page_size": None,
    "disable_radix_cache": False,
    "mamba_radix_cache_strategy": "auto",
    "enable_hierarchical_cache": False,
    "linear_attn_backend": "triton",
}
_FLAGS = {
    "page_size": "--page-size",
    "disable_radix_cache": "--disable-radix-cache",
    "mamba_radix_cache_strategy": "--mamba-radix-cache-strategy",
    "enable_hierarchical_cache": "--enable-hierarchical-cache",
    "linear_attn_backend": "--linear-attn-backend",
}

INFO_TEMPLATE = (
    "sglang-ascend-hybrid: disabled the radix cache for {arch} on NPU "
    "(page_size={page_size} kept): its {state} cache needs --page-size 1 without a mamba extra "
    "buffer, the Ascend attention backend needs a page size that is a multiple of 16, and "
    "extra_buffer is not supported for {arch}{why_no_extra}. Prefix caching is off; pass "
    "--disable-radix-cache to make this explicit."
)


PREFIX_CACHE_INFO = (
    "sglang-ascend-hybrid: prefix caching on for {arch} on NPU: radix cache with the mamba "
    "{strategy} strategy, page_size={page_size} (state snapshots at tracked boundaries written by {writer})"
)
SNAPSHOT_WRITERS = {"sglang": "SGLang's GDN backend from the plugin's prefill states",
                     "plugin": "the plugin's Ascend short-conv sidecar"}


def snapshot_writer(arch: str) -> str:
    """Who writes the prefix-cache snapshots of ``arch`` on NPU (the family table's word)."""
    return RADIX_SNAPSHOTS_BY_ARCH.get(arch, "")


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
    return getattr(view, "device", None) == "npu" and arch in PLUGIN_SNAPSHOT_ARCHS and launch_hooks_registered()


def launch_hooks_registered() -> bool:
    """Whether this module's launch hooks are in SGLang's resolution registry."""
    from sglang.srt.arg_groups import resolution_hooks

    return any(fn in resolution_hooks._HOOKS.get(step, []) for step, fn in _launch_hooks())


class LaunchConfigError(ValueError):
    """Explicit flags that cannot work together on NPU for this model."""


@dataclass(frozen=True)
class LaunchFacts:
    """Everything :func:`decide` looks at, already resolved."""

    arch: str
    device: str = "npu"
    page_size: Optional[int] = 128  # value in effect at the hook (NPU default 128)
    page_size_explicit: bool = False
    disable_radix_cache: bool = False
    strategy: str = "auto"
    strategy_explicit: bool = False
    hierarchical_cache_explicit: bool = False
    extra_buffer_supported: bool = False
    extra_buffer_reason: str = ""  # why not, when known (e.g. linear_attn_backend)


@dataclass
class Decision:
    declare: dict[str, Any] = field(default_factory=dict)
    adjustments: list[str] = field(default_factory=list)
    info: Optional[str] = None
    error: Optional[str] = None


def _state_kind(arch: str) -> str:
    return "conv-state" if arch in SHORT_CONV_ARCHS else "recurrent-state"


def decide(f: LaunchFacts) -> Decision:
    """What to declare (or which error to raise) for one resolution."""
    d = Decision()
    if f.device != "npu" or f.arch not in SUPPORTED_ARCHS:
        return d
    if f.disable_radix_cache:
        return d  # no prefix cache: no strategy, no page-size constraint

    strategy_flag = f"--mamba-radix-cache-strategy {f.strategy}"
    page_txt = (
        f"--page-size {f.page_size}" if f.page_size_explicit else f"the NPU default page size {f.page_size}"
    )
    page = f.page_size if f.page_size is not None else 1

    if f.page_size_explicit and page % ASCEND_PAGE_ALIGN != 0:
        d.error = (
            f"sglang-ascend-hybrid: --page-size {page} cannot work for {f.arch} on NPU: the Ascend "
            f"attention backend passes the page size to paged attention as its block size, which must "
            f"be a multiple of {ASCEND_PAGE_ALIGN} (128 is the tested value). Fix: drop --page-size "
            f"(NPU default 128)"
            + ("" if f.extra_buffer_supported else "; the plugin then disables the radix cache for this model, "
               "or pass --disable-radix-cache")
            + "."
        )
        return d

    if f.extra_buffer_supported and f.strategy in ("auto", "extra_buffer", "extra_buffer_lazy"):
        # upstream resolves to extra_buffer with paged KV: works as is
        d.info = PREFIX_CACHE_INFO.format(
            arch=f.arch, strategy="extra_buffer" if f.strategy == "auto" else f.strategy, page_size=page,
            writer=SNAPSHOT_WRITERS.get(snapshot_writer(f.arch), "SGLang"))
        return d

    if f.strategy == "no_buffer" and f.strategy_explicit:
        d.error = (
            f"sglang-ascend-hybrid: {strategy_flag} conflicts with {page_txt} for {f.arch} on NPU: "
            f"no_buffer needs --page-size 1, and the Ascend attention backend needs a page size that is "
            f"a multiple of {ASCEND_PAGE_ALIGN}. Fix: "
            + (
                "drop --mamba-radix-cache-strategy (extra_buffer keeps prefix caching with page size 128)"
                if f.extra_buffer_supported
                else "drop --mamba-radix-cache-strategy (the plugin then disables the radix cache) or "
                "replace it with --disable-radix-cache"
            )
            + "."
        )
        return d

    if f.strategy in ("extra_buffer", "extra_buffer_lazy") and f.strategy_explicit:
        d.error = (
            f"sglang-ascend-hybrid: {strategy_flag} is not supported for {f.arch}"
            f"{f.extra_buffer_reason}, and no_buffer cannot work with {page_txt} on NPU (it needs "
            f"--page-size 1; Ascend paged attention needs a multiple of {ASCEND_PAGE_ALIGN}). Fix: drop "
            f"--mamba-radix-cache-strategy and pass --disable-radix-cache."
        )
        return d

    if page == 1:
        return d  # no_buffer with page 1 resolves (page 1 only reachable non-explicitly off-NPU)

    # strategy auto (or a non-explicit value): no_buffer would be picked -> conflict.
    if f.hierarchical_cache_explicit:
        d.error = (
            f"sglang-ascend-hybrid: --enable-hierarchical-cache needs the radix cache, which {f.arch} "
            f"cannot use on NPU: its {_state_kind(f.arch)} cache needs --page-size 1 without a mamba extra "
            f"buffer (extra_buffer is not supported for {f.arch}{f.extra_buffer_reason}), and the Ascend "
            f"attention backend needs a page size that is a multiple of {ASCEND_PAGE_ALIGN}. Fix: drop "
            f"--enable-hierarchical-cache."
        )
        return d

    d.declare["disable_radix_cache"] = True
    d.adjustments.append(
        f"disable_radix_cache=True (page_size={page} kept): {f.arch} needs page_size=1 for the "
        f"no_buffer mamba radix cache, Ascend paged attention needs a multiple of {ASCEND_PAGE_ALIGN}, "
        f"extra_buffer unsupported{f.extra_buffer_reason}"
    )
    d.info = INFO_TEMPLATE.format(
        arch=f.arch, page_size=page, state=_state_kind(f.arch), why_no_extra=f.extra_buffer_reason
    )
    return d


# --------------------------------------------------------------------------
# Pure planner (no SGLang resolution)
# --------------------------------------------------------------------------


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


# Where SGLang lists the architectures that support the extra_buffer strategy (0.5.20 .. 0.5.23).
EXTRA_BUFFER_SOURCE = ("sglang/srt/arg_groups/overrides.py", "_MAMBA_EXTRA_BUFFER_ARCHS")


@functools.lru_cache(maxsize=1)
def _upstream_extra_buffer_archs() -> Optional[frozenset]:
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
        raise ValueError(f"tp_size must be >= 1, got {tp_size}")
    arch = _architecture(_model(config))
    extra_archs = _upstream_extra_buffer_archs()
    if extra_archs is None:  # SGLang not installed: 0.5.23's list for our families
        extra_archs = GDN_ARCHS
    if device == "npu":  # the plugin's gate hook (supports_extra_buffer_around)
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


# --------------------------------------------------------------------------
# The resolution hook
# --------------------------------------------------------------------------


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


def _arch_supports_extra_buffer(cfg: Any, hf_config: Any) -> bool:
    """SGLang's supports_mamba_cache_extra_buffer, whichever signature this release has:
    ``(view, model_arch: str)`` before 0.5.21, ``(view, hf_config)`` since."""
    import inspect

    from sglang.srt.arg_groups.overrides import supports_mamba_cache_extra_buffer as supports

    params = list(inspect.signature(supports).parameters)
    if len(params) >= 2 and params[1] == "model_arch":
        return supports(cfg, (getattr(hf_config, "architectures", None) or [""])[0])
    return supports(cfg, hf_config)


def _platform_supports_extra_buffer() -> bool:
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

    arch_ok = _arch_supports_extra_buffer(cfg, hf_config)
    platform_ok = _platform_supports_extra_buffer()
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


# --------------------------------------------------------------------------
# Registration
# --------------------------------------------------------------------------

# The registry's patch that puts launch_defaults_hook on SGLang's resolution step (patches/registry.py).
LAUNCH_PATCH = "short-conv-launch-defaults"


def _launch_hooks() -> tuple[tuple[str, Callable], ...]:
    """(step, hook) of every launch hook, as the patch registry names them."""
    from sglang_ascend_hybrid import patches

    patch = patches.by_name(LAUNCH_PATCH)
    return ((patch.target, patch.load_hook()),)


def verify_upstream() -> list[str]:
    """Problems with the upstream symbols the hook relies on (empty when fine): the
    patch registry's startup check of this hook's entry."""
    from sglang_ascend_hybrid import patches

    problem = patches.verify(patches.by_name(LAUNCH_PATCH))
    return [problem] if problem else []
