"""Reading the source of installed packages (SGLang, sgl-kernel-npu) without importing them.

The plugin checks upstream code from its source text: patch targets (:mod:`sglang_ascend_hybrid.patches.locate`),
the sgl-kernel-npu imports SGLang makes (:mod:`sglang_ascend_hybrid.tools.pairing`), the decode entry SGLang's
``gdn_triton.py`` imports (:mod:`sglang_ascend_hybrid.ops.gdn.decode.contract`), the architectures SGLang lists for
the extra_buffer strategy (:mod:`sglang_ascend_hybrid.integration.launch.extra_buffer`).  Importing those modules
would cost time at plugin discovery, or fail where they import NPU packages at module top, so every such
check finds and reads the files here:

* :func:`package_dir` / :func:`package_dirs` / :func:`source_file` / :func:`locate_module` find
  files on disk without importing anything (not even parent packages);
* :func:`read_bytes` / :func:`read_text` read a file as it is on disk now;
* :func:`derived` keeps what was worked out from a file (a parse, a scan), keyed by the file's
  path and a name for the result, and works it out again when the file's size or modification
  time changes: the one in-process cache of results drawn from installed source.  (What a file
  defines is also kept across processes, keyed by content: :mod:`sglang_ascend_hybrid.patches.definitions_cache`.)

Nothing here imports ``torch``, SGLang or NPU packages.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from importlib.machinery import PathFinder
from typing import Callable, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_derived: dict[tuple[str, str], tuple[tuple[int, int], object]] = {}  # (path, what) -> ((size, mtime), value)


def package_dir(name: str) -> str | None:
    """The directory of the installed package ``name`` (its first portion), found without
    importing it; None when it is not installed (or is a plain module)."""
    spec = importlib.util.find_spec(name)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return str(locations[0]) if locations else None


def package_dirs(name: str) -> list[str]:
    """Every directory of the top-level package ``name`` on ``sys.path`` (a namespace package
    has several), searched by the path finder alone: never the already-imported module."""
    spec = PathFinder.find_spec(name)
    return [str(d) for d in (spec.submodule_search_locations or [])] if spec is not None else []


def source_file(package: str, *parts: str) -> str | None:
    """The path of ``parts`` (``"srt", "layers", "x.py"``) inside the installed ``package``,
    or None when the package or the file is not there."""
    root = package_dir(package)
    if root is None:
        return None
    path = os.path.join(root, *parts)
    return path if os.path.exists(path) else None


def locate_module(parts: list[str]) -> tuple[int, str | None]:
    """Longest module prefix of the dotted name ``parts`` as (index past it, source file), found
    on disk without importing anything (not even parent packages: NPU packages must stay
    unimported at plugin discovery)."""
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


def read_bytes(path: str) -> bytes:
    """The bytes of ``path`` as they are on disk now (``OSError`` propagates)."""
    with open(path, "rb") as fh:
        return fh.read()


def read_text(path: str) -> str:
    """The text of ``path`` (UTF-8) as it is on disk now (``OSError`` / ``UnicodeDecodeError``
    propagate)."""
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def derived(path: str, what: str, compute: Callable[[str], T]) -> T:
    """``compute(path)``, kept under (``path``, ``what``) and worked out again only when the
    file's (size, modification time) changes.  ``OSError`` of the ``stat`` propagates; so does
    anything ``compute`` raises (nothing is kept then)."""
    st = os.stat(path)
    key = (st.st_size, st.st_mtime_ns)
    with _lock:
        hit = _derived.get((path, what))
    if hit is not None and hit[0] == key:
        return hit[1]
    value = compute(path)
    with _lock:
        _derived[(path, what)] = (key, value)
    return value

