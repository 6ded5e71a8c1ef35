"""SGLang's side of the pairing check: the ``sgl_kernel_npu`` imports in the installed SGLang's
source, found by parsing it (never importing it beyond locating the top ``sglang`` package).

Each import is a :class:`KernelImport` (its file, line, module and name, whether it runs lazily
inside a function or is guarded by try/except ImportError, and the scanned release's label).  A
scanned file that cannot be read (a dangling or looping symlink, no permission, not a regular
file) or parsed (a syntax error, an expression nested too deeply for Python's parser) is skipped
and listed as a :class:`SkippedFile` with the reason.  Each file's imports are kept by
:func:`sglang_ascend_hybrid.installed_source.derived` per (path, size, mtime); each root's
release label by :func:`release_label`'s cache.
"""

from __future__ import annotations

import ast
import functools
import logging
import os
import stat
from dataclasses import dataclass
from typing import Iterable

from sglang_ascend_hybrid import installed_source
from sglang_ascend_hybrid.tools.pairing import parsing
from sglang_ascend_hybrid.tools.pairing.kernel_package import KERNEL_PACKAGE
from sglang_ascend_hybrid.tools.pairing.parsing import _os_reason, _Unreadable

logger = logging.getLogger(__package__)  # the package's logger, "sglang_ascend_hybrid.tools.pairing"

# Subtrees of the sglang package that are scanned (SGLang's runtime, its kernel
# library and the diffusion runtime; not its tests or benchmarks).
SCANNED_SUBTREES = ("srt", "kernels", "multimodal_gen")

# Override for tests (None: the installed sglang package).
SGLANG_DIR: str | None = None


@dataclass(frozen=True)
class KernelImport:
    """One import of sgl_kernel_npu in SGLang's source."""

    file: str  # relative to the directory holding the sglang package: "sglang/srt/..."
    line: int
    module: str  # "sgl_kernel_npu.fla.chunk"
    symbol: str | None  # None for ``import sgl_kernel_npu.X``
    lazy: bool = False  # inside a function: runs at the first call, not at import
    guarded: bool = False  # inside try/except ImportError: SGLang copes with its absence
    release: str = "SGLang"  # "SGLang 0.5.23": the scanned package's release, where its metadata says

    @property
    def what(self) -> str:
        return f"{self.module}:{self.symbol}" if self.symbol else self.module


@dataclass(frozen=True)
class SkippedFile:
    """A scanned SGLang file (or directory) whose imports could not be read."""

    file: str  # relative to the directory holding the sglang package, like KernelImport.file
    reason: str  # why: "a symlink to ... that cannot be followed (...)", "SyntaxError: ... (line 3)", ...


def _catches_import_error(node: ast.Try) -> bool:
    names = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}
    for handler in node.handlers:
        if handler.type is None:
            return True
        types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        if any(isinstance(t, ast.Name) and t.id in names for t in types):
            return True
    return False


def _imports_in(path: str, rel: str, release: str) -> tuple[tuple[KernelImport, ...], str | None]:
    """The sgl_kernel_npu imports of ``path`` in source order, and None; or (), and why the
    file cannot be read or parsed (:class:`OSError` of the ``open`` itself propagates)."""
    source = installed_source.read_bytes(path)
    if KERNEL_PACKAGE.encode() not in source:
        return (), None
    try:
        tree = parsing._parse(path, source)
    except _Unreadable as exc:
        logger.debug("sglang-ascend-hybrid: cannot parse %s: %s", path, exc.reason)
        return (), exc.reason
    found: list[KernelImport] = []
    # Depth first in source order, on an explicit stack: a deeply nested expression that
    # parses must not exhaust Python's recursion limit here.
    stack: list[tuple[ast.AST, bool, bool]] = [(tree, False, False)]
    while stack:
        node, lazy, guarded = stack.pop()
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and (
                node.module == KERNEL_PACKAGE or node.module.startswith(KERNEL_PACKAGE + ".")):
            found.extend(KernelImport(rel, node.lineno, node.module, a.name, lazy, guarded, release)
                         for a in node.names)
        elif isinstance(node, ast.Import):
            found.extend(KernelImport(rel, node.lineno, a.name, None, lazy, guarded, release) for a in node.names
                         if a.name == KERNEL_PACKAGE or a.name.startswith(KERNEL_PACKAGE + "."))
        if isinstance(node, ast.Try):
            body = guarded or _catches_import_error(node)
            children = [(c, lazy, body) for c in node.body]
            children += [(c, lazy, guarded) for c in
                         (*node.orelse, *node.finalbody, *(s for h in node.handlers for s in h.body))]
        else:
            inner = lazy or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            children = [(c, inner, guarded) for c in ast.iter_child_nodes(node)]
        stack.extend(reversed(children))
    return tuple(found), None


def sglang_dir() -> str | None:
    """The installed sglang package directory, found without importing it."""
    if SGLANG_DIR is not None:
        return SGLANG_DIR
    return installed_source.package_dir("sglang")


def _sglang_sources(root: str, files: Iterable[str] | None,
                    skipped: list[SkippedFile]) -> Iterable[tuple[str, str]]:
    """(path, path relative to the directory holding the package) of the sources to scan:
    ``files`` (relative paths such as :data:`FAMILY_FILES` holds; absent ones are
    skipped, a dangling symlink is not absent), or every ``.py`` in the
    :data:`SCANNED_SUBTREES`.  A directory that cannot be listed goes to ``skipped``."""
    base = os.path.dirname(os.path.abspath(root))

    def rel_of(path: str) -> str:
        return os.path.relpath(path, base).replace(os.sep, "/")

    if files is not None:
        for rel in files:
            path = os.path.join(base, *rel.split("/"))
            if os.path.lexists(path):
                yield path, rel
        return
    for sub in SCANNED_SUBTREES:
        top = os.path.join(root, sub)

        def unlisted(exc: OSError, top: str = top) -> None:
            if exc.filename == top and isinstance(exc, FileNotFoundError):
                return  # a subtree this release does not have
            where = exc.filename or top
            skipped.append(SkippedFile(rel_of(where), f"directory {_os_reason(where, exc)}"))

        for dirpath, dirnames, filenames in os.walk(top, onerror=unlisted):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(filenames):
                if name.endswith(".py"):
                    path = os.path.join(dirpath, name)
                    yield path, rel_of(path)


def _scan(root: str | None, files: Iterable[str] | None) -> tuple[tuple[KernelImport, ...], tuple[SkippedFile, ...]]:
    root = root or sglang_dir()
    if root is None:
        return (), ()
    release = release_label(root)
    out: list[KernelImport] = []
    skipped: list[SkippedFile] = []
    for path, rel in _sglang_sources(root, files, skipped):
        try:
            if not stat.S_ISREG(os.stat(path).st_mode):  # a directory, a FIFO (reading would block)
                skipped.append(SkippedFile(rel, "not a regular file"))
                continue
            found, why = installed_source.derived(path, f"imports as {rel} of {release}",
                                 lambda p, rel=rel: _imports_in(p, rel, release))
        except OSError as exc:  # a dangling or looping symlink, no permission: this file only
            found, why = (), _os_reason(path, exc)
        if why is not None:
            skipped.append(SkippedFile(rel, why))
        out.extend(found)
    return tuple(out), tuple(skipped)


def scan_sglang(root: str | None = None, files: Iterable[str] | None = None) -> tuple[KernelImport, ...]:
    """Every sgl_kernel_npu import in the sglang package at ``root`` (default: the
    installed one): in ``files`` only, or in all of its :data:`SCANNED_SUBTREES`.
    Files that cannot be read or parsed are left out (:func:`check` lists them)."""
    return _scan(root, files)[0]


@functools.lru_cache(maxsize=None)
def release_label(root: str) -> str:
    """"SGLang <version>" from the dist-info beside the sglang package at ``root``, else "SGLang"."""
    from importlib import metadata

    base = os.path.dirname(os.path.abspath(root))
    try:
        for dist in metadata.distributions(name="sglang", path=[base]):
            if dist.version:
                return f"SGLang {dist.version}"
    except OSError as exc:  # a dangling or looping symlink in the dist-info: the label only
        logger.debug("sglang-ascend-hybrid: cannot read SGLang's version beside %s: %s", root, exc)
    return "SGLang"
