"""The plugin's launch hooks in SGLang's resolution registry for one resolution: registered through
the path plugin registration takes, or taken out to see SGLang's own behaviour."""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator


def register_launch_hooks() -> list[str]:
    """Register the plugin's launch hook with SGLang's resolution pipeline (idempotent), through
    the path plugin registration takes.

    Returns the names of the steps hooked.  Raises ``ValueError`` if SGLang no
    longer offers the step as overridable.
    """
    from sglang_ascend_hybrid import patches
    from sglang_ascend_hybrid.integration.launch.registration import LAUNCH_PATCH
    from sglang_ascend_hybrid.patches import apply

    patch = patches.by_name(LAUNCH_PATCH)
    apply.install(patch)  # the path registration takes
    return [patch.target]


@contextlib.contextmanager
def launch_hooks_suspended() -> Iterator[None]:
    """Temporarily take the launch hooks out of SGLang's registry (SGLang's own resolution)."""
    from sglang.srt.arg_groups import resolution_hooks

    from sglang_ascend_hybrid.integration.launch.registration import launch_hooks

    removed: list[tuple[str, int, Callable]] = []
    for step, fn in launch_hooks():
        chain = resolution_hooks._HOOKS.get(step, [])
        while fn in chain:
            i = chain.index(fn)
            chain.pop(i)
            removed.append((step, i, fn))
    try:
        yield
    finally:
        for step, i, fn in reversed(removed):
            resolution_hooks._HOOKS.setdefault(step, []).insert(i, fn)


@contextlib.contextmanager
def hooks_state(register_hooks: bool) -> Iterator[None]:
    """Register the plugin's launch hooks, or hide them, for one resolution."""

    if register_hooks:
        register_launch_hooks()
        yield
    else:
        with launch_hooks_suspended():
            yield
