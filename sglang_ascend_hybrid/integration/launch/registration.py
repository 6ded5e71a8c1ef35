"""Where the launch hooks are registered: the patch registry's entry that puts
:func:`.resolution.launch_defaults_hook` on SGLang's resolution step, and whether it is in
SGLang's resolution registry now."""

from __future__ import annotations

from typing import Callable

# The registry's patch that puts launch_defaults_hook on SGLang's resolution step (patches/registry.py).
LAUNCH_PATCH = "short-conv-launch-defaults"


def launch_hooks() -> tuple[tuple[str, Callable], ...]:
    """(step, hook) of every launch hook, as the patch registry names them."""
    from sglang_ascend_hybrid import patches

    patch = patches.by_name(LAUNCH_PATCH)
    return ((patch.target, patch.load_hook()),)


def launch_hooks_registered() -> bool:
    """Whether the launch hooks are in SGLang's resolution registry."""
    from sglang.srt.arg_groups import resolution_hooks

    return any(fn in resolution_hooks._HOOKS.get(step, []) for step, fn in launch_hooks())
