"""Startup verification of a patch: its targets for the SGLang release, and the private upstream
internals the plugin core applies it through."""

from __future__ import annotations

import functools
import importlib

from sglang_ascend_hybrid.patches.locate import find_target
from sglang_ascend_hybrid.patches.model import Patch
from sglang_ascend_hybrid.patches.registry import RES_STEP
from sglang_ascend_hybrid.patches.releases import release_targets

# Private upstream internals the plugin core reads or writes to apply a patch of a kind (SGLang has no
# public API for them): verified with every such patch, so upstream drift there is a startup message
# naming the symbol, not an AttributeError mid-registration.
HOOK_REGISTRIES = {"srt": "sglang.srt.plugins.hook_registry.HookRegistry",
                   "multimodal": "sglang.multimodal_gen.runtime.platforms.plugins.HookRegistry"}
HOOK_REGISTRY_INTERNALS = ("_hooks", "_patched")  # apply._register_hook / _apply_target / _applying_now
RESOLUTION_INTERNALS = (f"{RES_STEP}._HOOKS",)  # apply.register_resolution_hook_once, launch.registration


@functools.lru_cache(maxsize=None)
def _internal_missing(target: str) -> str | None:
    """:func:`find_target` of an upstream internal, once per process: every hook patch relies on the
    same two, and registration is on every process's start-up path."""
    return find_target(target)


def internals(patch: Patch) -> tuple[str, ...]:
    """The private upstream symbols the plugin core relies on to apply ``patch``."""
    if patch.kind == "hook":
        return tuple(f"{HOOK_REGISTRIES[patch.runtime]}.{attr}" for attr in HOOK_REGISTRY_INTERNALS)
    if patch.kind == "resolution":
        return RESOLUTION_INTERNALS
    return ()


def verify(patch: Patch, version: str | None = None) -> str | None:
    """None when the patch's targets for SGLang ``version`` (default: the installed
    one) and the upstream internals applying it relies on (:func:`internals`) exist in
    the installed upstream, else why not.  Call it for a patch whose
    :func:`~.releases.release_state` is None."""
    targets = release_targets(patch.extra_targets, version)
    if patch.kind == "resolution":
        module, _, attr = patch.step_registry.rpartition(".")
        try:
            steps = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            return f"{patch.step_registry} not importable ({exc})"
        if patch.target not in steps:
            return f"resolution step {patch.target!r} is not overridable"
    else:
        targets = (patch.target, *targets)
    for target in targets:
        reason = find_target(target)
        if reason:
            return reason
    for target in internals(patch):
        reason = _internal_missing(target)
        if reason:
            return reason
    return None
