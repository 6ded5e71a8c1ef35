"""Run a callback right after a module is first imported, without importing it.

Plugin registration runs at the start of every SGLang process and must stay cheap, but some
patch targets live in modules that are expensive to import and that many of those processes
never import (SGLang's attention registry costs about 0.3 s and is only imported where a model
runs).  :func:`when_imported` defers the work on such a target to the moment SGLang itself
imports its module: a finder first on ``sys.meta_path`` marks that one module's spec, and once
the module's code has run, before the importer gets it back, the callbacks run.  So every
caller of the module (``from X import Y`` included) sees what the callbacks did.

Only the named modules are touched: their loader stays the real one (``__loader__``, source
lookups and tracebacks are unchanged).  The finder leaves ``sys.meta_path`` once nothing is
watched any more.  A callback's exception propagates out of the import (the plugin's callbacks
record their own failures and raise only in strict mode).
"""

from __future__ import annotations

import importlib.machinery
import sys
import threading
from types import ModuleType
from typing import Callable

_lock = threading.RLock()
_watched: dict[str, list[Callable[[ModuleType], None]]] = {}


def importable_later(name: str) -> bool:
    """Whether ``name`` is not imported yet but could be by the import system: its nearest
    imported ancestor is a package (has ``__path__``).  A stand-in module without one (a test's
    fake) can never get real submodules, so there would be nothing to wait for."""
    if name in sys.modules:
        return False
    parts = name.split(".")
    for i in range(len(parts) - 1, 0, -1):
        parent = sys.modules.get(".".join(parts[:i]))
        if parent is not None:
            return getattr(parent, "__path__", None) is not None
    return True


def when_imported(name: str, callback: Callable[[ModuleType], None]) -> None:
    """Call ``callback(module)`` once ``name`` has been imported (see the module docstring).
    The caller checks :func:`importable_later` first; a module already imported is the caller's
    to handle now."""
    with _lock:
        _watched.setdefault(name, []).append(callback)
        if not any(f is _FINDER for f in sys.meta_path):
            sys.meta_path.insert(0, _FINDER)


def watched() -> list[str]:
    with _lock:
        return sorted(_watched)


def _fire(name: str, module: ModuleType) -> None:
    with _lock:
        callbacks = _watched.pop(name, [])
        if not _watched:
            _remove_finder()
    for callback in callbacks:
        callback(module)


def _remove_finder() -> None:
    while True:
        try:
            sys.meta_path.remove(_FINDER)
        except ValueError:
            return


class _Finder:
    """Marks the spec of a watched module; finds nothing itself."""

    def find_spec(self, fullname, path=None, target=None):
        with _lock:
            if fullname not in _watched:
                return None
        spec = None
        for finder in list(sys.meta_path):
            if finder is self:
                continue
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec  # nothing to wrap: the callbacks wait (the import fails or is not ours to run)
        spec.loader = _wrap(spec.loader, fullname)
        return spec

    def invalidate_caches(self):
        pass


def _wrap(loader, name: str):
    original = loader.exec_module

    def exec_module(module):
        original(module)
        _fire(name, module)

    if isinstance(loader, _FILE_LOADERS):
        # One loader instance per spec: overriding the method on the instance changes only this
        # import, and the module keeps its real loader (source lookups, reload, resources).
        loader.exec_module = exec_module
        return loader
    return _LoaderProxy(loader, exec_module)


class _LoaderProxy:
    """Any other loader (possibly shared): delegate everything, run the callbacks after exec."""

    def __init__(self, loader, exec_module):
        self._loader, self.exec_module = loader, exec_module

    def create_module(self, spec):
        return self._loader.create_module(spec) if hasattr(self._loader, "create_module") else None

    def __getattr__(self, attr):
        return getattr(self._loader, attr)


_FINDER = _Finder()
_FILE_LOADERS = (importlib.machinery.SourceFileLoader, importlib.machinery.SourcelessFileLoader,
                 importlib.machinery.ExtensionFileLoader)
