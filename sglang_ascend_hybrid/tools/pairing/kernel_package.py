"""sgl_kernel_npu's side of the pairing check: where the package and each of its modules are on
disk (found as the import system would, never imported), and the names a module's source binds
at module level.

Names bound only under ``if TYPE_CHECKING:`` are kept apart (:attr:`_Names.type_only`): they are
not there at runtime.  A module's names are kept by
:func:`sglang_ascend_hybrid.installed_source.derived` per (path, size, mtime) under ``"names"``
(:func:`.report._check_one` asks for them).
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass, field
from importlib.machinery import BYTECODE_SUFFIXES, EXTENSION_SUFFIXES, PathFinder
from typing import Iterable

from sglang_ascend_hybrid.tools.pairing import parsing
from sglang_ascend_hybrid.tools.pairing.parsing import _Unreadable

KERNEL_PACKAGE = "sgl_kernel_npu"

# Override for tests (None: sys.path).
KERNEL_PATH: list[str] | None = None


@dataclass(frozen=True)
class _Located:
    kind: str  # "source" | "package" | "namespace" | "compiled"
    path: str  # the file (the first directory for a namespace package)
    dirs: tuple[str, ...] = ()  # where its submodules are (packages only)


def kernel_location(path: list[str] | None = None) -> _Located | None:
    """Where sgl_kernel_npu is on ``path`` (default: :data:`KERNEL_PATH`, else sys.path),
    found without importing it; None when it is not installed."""
    spec = PathFinder.find_spec(KERNEL_PACKAGE, path if path is not None else KERNEL_PATH)
    if spec is None:
        return None
    dirs = tuple(str(d) for d in spec.submodule_search_locations or ())
    if not dirs:  # a single-file module
        return _Located("source" if str(spec.origin).endswith(".py") else "compiled", str(spec.origin))
    init = os.path.join(dirs[0], "__init__.py")
    return _Located("package", init, dirs) if os.path.isfile(init) else _Located("namespace", dirs[0], dirs)


def _locate(module: str, top: _Located) -> _Located | None:
    """Where ``module`` (``sgl_kernel_npu[.X...]``) is, or None if no file provides it."""
    here = top
    for name in module.split(".")[1:]:
        here = _child(name, here.dirs)
        if here is None:
            return None
    return here


def _child(name: str, dirs: tuple[str, ...]) -> _Located | None:
    """Submodule ``name`` of a package whose portions are ``dirs``, in the import system's
    order (package, extension module, source, bytecode); None when absent."""
    portions = []
    for d in dirs:
        pkg = os.path.join(d, name)
        init = os.path.join(pkg, "__init__.py")
        if os.path.isfile(init):
            return _Located("package", init, (pkg,))
        for suffix in EXTENSION_SUFFIXES:
            if os.path.isfile(pkg + suffix):
                return _Located("compiled", pkg + suffix)
        if os.path.isfile(pkg + ".py"):
            return _Located("source", pkg + ".py")
        for suffix in BYTECODE_SUFFIXES:
            if os.path.isfile(pkg + suffix):
                return _Located("compiled", pkg + suffix)
        if os.path.isdir(pkg):
            portions.append(pkg)
    return _Located("namespace", portions[0], tuple(portions)) if portions else None


def _type_checking(test: ast.expr) -> bool | None:
    """True for ``TYPE_CHECKING`` / ``typing.TYPE_CHECKING`` (and ``typing_extensions.``), False
    for ``not`` of one, None for any other test."""
    negated = False
    while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):  # a loop: any depth of ``not``
        negated, test = not negated, test.operand
    if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING" or \
            isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING" and isinstance(test.value, ast.Name):
        return not negated
    return None


def _module_level(body: list[ast.stmt], runtime: bool = True) -> Iterable[tuple[ast.stmt, bool]]:
    """(statement, whether it runs at import) for the statements at module level: ``body`` and
    the blocks of its if / try / with / for; the block an ``if TYPE_CHECKING:`` runs only for
    type checkers (False), its ``else`` at runtime."""
    for node in body:
        yield node, runtime
        if isinstance(node, ast.If) and (checking := _type_checking(node.test)) is not None:
            yield from _module_level(node.body, runtime and not checking)
            yield from _module_level(node.orelse, runtime and checking)
        elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
            inner = [*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", [])]
            inner += [s for h in getattr(node, "handlers", []) for s in h.body]
            yield from _module_level(inner, runtime)


def _bound(target: ast.AST) -> Iterable[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for elt in target.elts:
            yield from _bound(elt)
    elif isinstance(target, ast.Starred):
        yield from _bound(target.value)


# Where a module-level name comes from: ("def", None, None) for a def / class / assignment
# in the module itself; ("from", level, (module, attr)) for ``from <level dots><module> import
# attr``; ("import", 0, (module, None)) for ``import module [as name]``.
_Origin = tuple


@dataclass(frozen=True)
class _Names:
    names: frozenset[str]  # bound at module level when it runs, or listed in __all__
    dynamic: str | None  # why the names are open-ended (star import, __getattr__), or None
    type_only: frozenset[str] = frozenset()  # bound only under ``if TYPE_CHECKING:``
    origins: dict[str, _Origin] = field(default_factory=dict)  # the runtime binding of each name (the first)


def _bindings(node: ast.stmt, runtime: bool) -> tuple[list[tuple[str, _Origin]], str | None, set[str]]:
    """What one module-level statement binds: ``(name, origin)`` pairs, why its names are
    open-ended (a runtime star import) or None, and the names a runtime ``__all__`` lists."""
    bound: list[tuple[str, _Origin]] = []
    star, listed = None, set()
    local = ("def", None, None)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        bound.append((node.name, local))
    elif isinstance(node, ast.ImportFrom):
        for a in node.names:
            if a.name == "*":
                if runtime:
                    star = f"it star-imports from {'.' * node.level}{node.module or ''}"
            else:
                bound.append((a.asname or a.name, ("from", node.level, (node.module, a.name))))
    elif isinstance(node, ast.Import):
        for a in node.names:
            bound.append((a.asname or a.name.split(".")[0],
                          ("import", 0, (a.name if a.asname else a.name.split(".")[0], None))))
    elif isinstance(node, ast.Assign):
        for t in node.targets:
            bound.extend((n, local) for n in _bound(t))
        if runtime and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets) \
                and isinstance(node.value, (ast.List, ast.Tuple)):
            listed.update(e.value for e in node.value.elts
                          if isinstance(e, ast.Constant) and isinstance(e.value, str))
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        if not (isinstance(node, ast.AnnAssign) and node.value is None):  # ``x: int`` binds nothing
            bound.extend((n, local) for n in _bound(node.target))
    elif isinstance(node, ast.For):
        bound.extend((n, local) for n in _bound(node.target))
    elif isinstance(node, ast.With):
        for item in node.items:
            if item.optional_vars is not None:
                bound.extend((n, local) for n in _bound(item.optional_vars))
    return bound, star, listed


def _names_of(path: str) -> _Names:
    try:
        tree = parsing._parse(path)
    except _Unreadable as exc:
        return _Names(frozenset(), f"its source cannot be read ({exc.reason})")
    names: set[str] = set()
    typing_names: set[str] = set()
    listed: set[str] = set()
    origins: dict[str, _Origin] = {}
    dynamic = None
    for node, runtime in _module_level(tree.body):
        bound, star, in_all = _bindings(node, runtime)
        dynamic = dynamic or star
        listed |= in_all
        for name, origin in bound:
            if runtime:
                names.add(name)
                origins.setdefault(name, origin)
            else:
                typing_names.add(name)
    type_only = typing_names - names
    names |= listed - type_only  # __all__ vouches for a name, but not for one only a type checker sees
    if dynamic is None and "__getattr__" in names:
        dynamic = "it defines a module __getattr__"
    return _Names(frozenset(names), dynamic, frozenset(type_only), origins)


def _qualified(origin: _Origin, module: str, package: bool) -> str:
    """``module:attr`` (or ``module`` for a plain import) of a binding's ``origin`` found in
    ``module`` (a package's ``__init__`` when ``package``), relative imports resolved."""
    how, level, (source, attr) = origin
    if how == "from" and level:
        parts = module.split(".") if package else module.split(".")[:-1]
        parts = parts[:len(parts) - (level - 1)] if level > 1 else parts
        source = ".".join([*parts, *([source] if source else [])])
    return f"{source}:{attr}" if attr is not None else source
