"""Finding upstream targets on disk without importing them (files found through
:mod:`sglang_ascend_hybrid.installed_source`).

Target verification is static (the target's source is parsed, not imported), so it is cheap and
works for upstream modules that import NPU-only packages at module top.
"""

from __future__ import annotations

import os

from sglang_ascend_hybrid.installed_source import locate_module
from sglang_ascend_hybrid.patches.model import Patch


def target_module(target: str) -> str | None:
    """The module holding ``target`` (its longest module prefix on disk), or None; imports nothing."""
    parts = target.split(".")
    split, origin = locate_module(parts)
    if origin is None or split == len(parts):
        return None
    return ".".join(parts[:split])


def find_target(target: str) -> str | None:
    """Check ``target`` exists in the installed sources without importing it.

    A name exists when the module's source binds it at module level (``def``, ``class``,
    assignment, annotated assignment, import, also inside every branch of ``if`` / ``try``);
    a dotted rest goes through class bodies, with the same rules.  What a file defines is
    cached across processes, keyed by its path and content (:mod:`sglang_ascend_hybrid.patches.definitions_cache`).

    Returns None when found, else the reason it is missing.
    """
    parts = target.split(".")
    split, origin = locate_module(parts)
    if origin is None or split == len(parts) or not origin.endswith(".py") or not os.path.isfile(origin):
        return f"module of {target!r} not found"
    from sglang_ascend_hybrid.patches.definitions_cache import definitions

    module = ".".join(parts[:split])
    names = definitions(origin)
    for name in parts[split:]:
        if names is None or name not in names:
            return f"{name!r} not found in {module} ({origin})"
        names = names[name]  # a class's members, None for anything else
    return None


def missing_requirements(patch: Patch) -> list[str]:
    from importlib.machinery import PathFinder

    return [pkg for pkg in patch.requires if PathFinder.find_spec(pkg) is None]
