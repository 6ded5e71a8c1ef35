"""Finding upstream targets on disk without importing them.

Target verification is static (the target's source is parsed, not imported), so it is cheap and
works for upstream modules that import NPU-only packages at module top.
"""

from __future__ import annotations

import os

from sglang_ascend_hybrid.patches.model import Patch


def _locate_module(parts: list[str]) -> tuple[int, str | None]:
    """Longest module prefix of ``parts`` as (index past it, source file), found on disk
    without importing anything (not even parent packages: NPU packages must stay
    unimported at plugin discovery)."""
    from importlib.machinery import PathFinder

    top = PathFinder.find_spec(parts[0])
    if top is None:
        return 0, None
    if not top.submodule_search_locations:
        return 1, top.origin
    dirs = [str(d) for d in top.submodule_search_locations]
    found = (1, os.path.join(dirs[0], "__init__.py"))
    for i in range(1, len(parts)):
        name, next_dirs = parts[i], []
        for d in dirs:
            pkg = os.path.join(d, name)
            if os.path.isfile(os.path.join(pkg, "__init__.py")):
                next_dirs, found = [pkg], (i + 1, os.path.join(pkg, "__init__.py"))
                break
            if os.path.isfile(pkg + ".py"):
                return i + 1, pkg + ".py"
            if os.path.isdir(pkg):  # namespace package portion
                next_dirs.append(pkg)
        if not next_dirs:
            break
        dirs = next_dirs
    return found


def target_module(target: str) -> str | None:
    """The module holding ``target`` (its longest module prefix on disk), or None; imports nothing."""
    parts = target.split(".")
    split, origin = _locate_module(parts)
    if origin is None or split == len(parts):
        return None
    return ".".join(parts[:split])


def find_target(target: str) -> str | None:
    """Check ``target`` exists in the installed sources without importing it.

    A name exists when the module's source binds it at module level (``def``, ``class``,
    assignment, annotated assignment, import, also inside every branch of ``if`` / ``try``);
    a dotted rest goes through class bodies, with the same rules.  What a file defines is
    cached across processes, keyed by its path and content (:mod:`sglang_ascend_hybrid.target_cache`).

    Returns None when found, else the reason it is missing.
    """
    parts = target.split(".")
    split, origin = _locate_module(parts)
    if origin is None or split == len(parts) or not origin.endswith(".py") or not os.path.isfile(origin):
        return f"module of {target!r} not found"
    from sglang_ascend_hybrid.target_cache import definitions

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
