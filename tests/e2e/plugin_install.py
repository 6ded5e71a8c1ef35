"""Install the plugin through SGLang's own plugin loading, in this process, and take
it out again afterwards.

``sglang.srt.plugins.load_plugins`` discovers the ``sglang.srt.plugins`` entry point of
the installed package and calls ``sglang_ascend_hybrid.plugin:register``; SGLang's
``HookRegistry`` then patches the targets (and rebinds their ``from X import Y``
copies in every loaded module).  The deferred GDN patches are applied when the real
``attn_backend_wrapper`` builds the backend on NPU.  Hooks patch modules for good, so
:func:`plugin_loaded` records what was there before and restores it on exit: other
tests in the same worker see unpatched SGLang.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import sys
import types

import pytest

from tests.support.fresh_state import fresh_seam_lookups


def _resolve(target: str):
    import pkgutil

    obj_path, attr = target.rsplit(".", 1)
    return pkgutil.resolve_name(obj_path), attr


def _unpatch(target: str) -> None:
    obj, attr = _resolve(target)
    raw = obj.__dict__.get(attr) if isinstance(obj, type) else getattr(obj, attr)
    wrapped = raw.__func__ if isinstance(raw, (classmethod, staticmethod)) else raw
    original = wrapped
    while getattr(original, "__wrapped__", None) is not None and hasattr(original, "__code__") \
            and original.__code__.co_name == "wrapper":
        original = original.__wrapped__
    if original is wrapped:
        return
    setattr(obj, attr, type(raw)(original) if isinstance(raw, (classmethod, staticmethod)) else original)
    for mod in list(sys.modules.values()):  # undo HookRegistry's _propagate_patch
        if not isinstance(mod, types.ModuleType) or mod is obj:
            continue
        try:
            items = list(vars(mod).items())
        except TypeError:
            continue
        for name, value in items:
            if value is wrapped:
                setattr(mod, name, original)


def _diffusion_plugins():
    """SGLang's diffusion plugin loader (``sglang.multimodal_gen.runtime.platforms.plugins``, 0.5.21 and
    later), which keeps its own hook registry and run-once gates; None where the release has none."""
    try:
        return importlib.import_module("sglang.multimodal_gen.runtime.platforms.plugins")
    except ImportError:
        return None


_GATES = ("_plugin_registration", "_hook_application")


def _registry_state(registry) -> tuple:
    """A hook registry's hooks and patched targets (SGLang's runtime one, or the diffusion loader's)."""
    return {k: list(v) for k, v in registry._hooks.items()}, set(registry._patched)


def _restore_registry(registry, state: tuple) -> None:
    """The targets patched since :func:`_registry_state` unpatched (their imported copies too), then
    the registry's hooks and patched set as they were."""
    hooks, patched = state
    for target in sorted(set(registry._patched) - patched):
        _unpatch(target)
    registry._hooks.clear()
    registry._hooks.update(hooks)
    registry._patched.clear()
    registry._patched.update(patched)


def _diffusion_state(mm) -> dict:
    return dict(registry=_registry_state(mm.HookRegistry),
                gates={g: (getattr(mm, g).state, getattr(mm, g).error) for g in _GATES if hasattr(mm, g)},
                required=getattr(mm, "_required_dist", None))


def _restore_diffusion(mm, saved: dict) -> None:
    _restore_registry(mm.HookRegistry, saved["registry"])
    for gate, (state, error) in saved["gates"].items():
        getattr(mm, gate).state, getattr(mm, gate).error = state, error
    if hasattr(mm, "_required_dist"):
        mm._required_dist = saved["required"]


@contextlib.contextmanager
def sglang_plugin_state_restored():
    """Everything SGLang's ``load_plugins()`` and the plugin change in this process, recorded on entry
    and put back on exit: the hooks and the patched targets (and their propagated copies) of SGLang's
    runtime and of its diffusion loader (with that loader's run-once gates), the
    resolution hooks, the attention backends and choices, the plugin's patch status, ``sys.path``,
    the seam's lookups and the kernel refusals learnt meanwhile.  For any test that loads the
    plugin in-process (:func:`plugin_loaded`, ``doctor.collect()``)."""
    import sglang.srt.plugins as plugins
    from sglang.srt.arg_groups import choices, resolution_hooks
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
    from sglang.srt.plugins.hook_registry import HookRegistry

    from sglang_ascend_hybrid.ops.conv import dispatch as conv_dispatch
    from sglang_ascend_hybrid.ops.gdn import prefill
    from sglang_ascend_hybrid.patches.status import STATUS

    saved = dict(
        loaded=plugins._plugins_loaded,
        registry=_registry_state(HookRegistry),
        res_hooks={k: list(v) for k, v in resolution_hooks._HOOKS.items()},
        backends=dict(ATTENTION_BACKENDS),
        choices=(list(choices.ATTENTION_BACKEND_CHOICES), list(choices.DRAFT_ATTENTION_BACKEND_CHOICES)),
        status=copy.copy(STATUS.patches),
        status_fields=(STATUS.sglang_version, STATUS.version_problem, STATUS.disabled),
        path=list(sys.path),
    )
    diffusion = _diffusion_plugins()
    if diffusion is not None:
        saved["diffusion"] = _diffusion_state(diffusion)
    mp = pytest.MonkeyPatch()
    fresh_seam_lookups(mp)  # what the seam finds meanwhile is probed afresh; what it found before is back on exit
    try:
        yield mp
    finally:
        if diffusion is not None:
            _restore_diffusion(diffusion, saved["diffusion"])
        _restore_registry(HookRegistry, saved["registry"])
        resolution_hooks._HOOKS.clear()
        resolution_hooks._HOOKS.update(saved["res_hooks"])
        ATTENTION_BACKENDS.clear()
        ATTENTION_BACKENDS.update(saved["backends"])
        choices.ATTENTION_BACKEND_CHOICES[:] = saved["choices"][0]
        choices.DRAFT_ATTENTION_BACKEND_CHOICES[:] = saved["choices"][1]
        STATUS.patches = saved["status"]
        STATUS.sglang_version, STATUS.version_problem, STATUS.disabled = saved["status_fields"]
        plugins._plugins_loaded = saved["loaded"]
        sys.path[:] = saved["path"]
        for name in [m for m in sys.modules if m.split(".")[0] in ("torch_npu", "sgl_kernel_npu")]:
            sys.modules.pop(name, None)
        prefill.forget_refusals()
        conv_dispatch.reset_state()
        mp.undo()


@contextlib.contextmanager
def plugin_loaded(npu_stubs_path):
    """SGLang's ``load_plugins()`` with the package's real entry points; everything it
    changed is undone on exit (:func:`sglang_plugin_state_restored`).  ``npu_stubs_path`` (the
    test stand-ins of torch_npu / sgl_kernel_npu) is on ``sys.path`` meanwhile, so the NPU-only
    patches are deferred, not skipped, exactly as on an Ascend machine."""
    import sglang.srt.plugins as plugins

    from sglang_ascend_hybrid.ops.conv import dispatch as conv_dispatch
    from sglang_ascend_hybrid.ops.gdn import prefill
    from sglang_ascend_hybrid.patches.status import STATUS

    with sglang_plugin_state_restored() as mp:
        mp.delenv("SGLANG_ASCEND_HYBRID_DISABLE", raising=False)
        mp.delenv("SGLANG_PLUGINS", raising=False)
        sys.path.insert(0, str(npu_stubs_path))
        prefill.forget_refusals()  # kernel refusals learnt by earlier runs in this process
        conv_dispatch.reset_state()
        STATUS.patches = {}
        plugins._plugins_loaded = False
        plugins.load_plugins()
        yield STATUS

