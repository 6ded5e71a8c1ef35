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


@contextlib.contextmanager
def plugin_loaded(npu_stubs_path):
    """SGLang's ``load_plugins()`` with the package's real entry points; everything it
    changed is undone on exit.  ``npu_stubs_path`` (the test stand-ins of torch_npu /
    sgl_kernel_npu) is on ``sys.path`` meanwhile, so the NPU-only patches are deferred,
    not skipped, exactly as on an Ascend machine."""
    import sglang.srt.plugins as plugins
    from sglang.srt.arg_groups import choices, resolution_hooks
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
    from sglang.srt.plugins.hook_registry import HookRegistry

    from sglang_ascend_hybrid.ops.conv import dispatch as conv_dispatch
    from sglang_ascend_hybrid.ops.gdn import prefill
    from sglang_ascend_hybrid.patches.status import STATUS

    saved = dict(
        loaded=plugins._plugins_loaded,
        hooks={k: list(v) for k, v in HookRegistry._hooks.items()},
        patched=set(HookRegistry._patched),
        res_hooks={k: list(v) for k, v in resolution_hooks._HOOKS.items()},
        backends=dict(ATTENTION_BACKENDS),
        choices=(list(choices.ATTENTION_BACKEND_CHOICES), list(choices.DRAFT_ATTENTION_BACKEND_CHOICES)),
        status=copy.copy(STATUS.patches),
        status_fields=(STATUS.sglang_version, STATUS.version_problem, STATUS.disabled),
        path=list(sys.path),
    )
    mp = pytest.MonkeyPatch()
    mp.delenv("SGLANG_ASCEND_HYBRID_DISABLE", raising=False)
    mp.delenv("SGLANG_PLUGINS", raising=False)
    sys.path.insert(0, str(npu_stubs_path))
    fresh_seam_lookups(mp)  # the stubs are probed afresh; what the seam found before is back on exit
    prefill.forget_refusals()  # kernel refusals learnt by earlier runs in this process
    conv_dispatch.reset_state()
    STATUS.patches = {}
    plugins._plugins_loaded = False
    try:
        plugins.load_plugins()
        yield STATUS
    finally:
        for target in sorted(set(HookRegistry._patched) - saved["patched"]):
            _unpatch(target)
        HookRegistry._hooks.clear()
        HookRegistry._hooks.update(saved["hooks"])
        HookRegistry._patched.clear()
        HookRegistry._patched.update(saved["patched"])
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
