"""What an upstream source file defines, for :func:`sglang_ascend_hybrid.patches.find_target`,
cached across processes.

Plugin registration checks every patch target statically: it parses the installed source
instead of importing it.  Parsing SGLang's big modules costs about 0.05 s each, paid in every
SGLang process (launcher, schedulers, detokenizer), so the outcome of a parse is kept:

* :func:`definitions` returns the names a file defines at module level, in the order and with
  the rules :func:`sglang_ascend_hybrid.patches.find_target` documents (``def`` / ``class`` /
  assignment / import, also inside ``if`` / ``try`` branches; the first binding wins), each
  mapped to ``None`` or, for a class, to the names its body defines (same rules);
* the cache lives in ``$XDG_CACHE_HOME/sglang-ascend-hybrid/`` (default ``~/.cache``), one
  JSON file, keyed by the file's absolute path and the SHA-256 of its content: an entry is used
  only when the bytes on disk are the bytes that were parsed, so an edited, reinstalled or
  replaced file (whatever its size and mtime) is parsed again -- the cache is never wrong, only
  sometimes cold.  Reading and hashing the few target files costs about a millisecond;
* it is written atomically (a temporary file in the same directory, then ``os.replace``), so a
  concurrent reader sees the old or the new file, never half of one; concurrent writers can
  only lose each other's entries (parsed again next time).  Entries of files that no longer
  exist are dropped on write, and at most :data:`MAX_ENTRIES` are kept;
* anything unexpected (no cache directory, unwritable, corrupt or foreign JSON) falls back to
  parsing and never raises.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import json
import os
import tempfile
import threading

from sglang_ascend_hybrid.installed_source import read_bytes

SCHEMA = 1  # bump when the definition rules (``summarize``) change
FILE_NAME = f"targets-v{SCHEMA}.json"
MAX_ENTRIES = 256

Names = dict  # name -> None | Names

_lock = threading.Lock()
_memory: dict[str, tuple[str, Names]] = {}  # path -> (sha256, names), this process


def cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "sglang-ascend-hybrid")


def cache_path() -> str:
    return os.path.join(cache_dir(), FILE_NAME)


def summarize(body: list[ast.stmt]) -> Names:
    """The names ``body`` binds, first binding first; a class maps to its own body's names."""
    out: Names = {}
    _collect(body, out)
    return out


def _collect(body: list[ast.stmt], out: Names) -> None:
    for node in body:
        if isinstance(node, ast.ClassDef):
            if node.name not in out:
                out[node.name] = summarize(node.body)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.setdefault(node.name, None)
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    out.setdefault(t.id, None)
        elif isinstance(node, ast.AnnAssign):
            if isinstance(node.target, ast.Name):
                out.setdefault(node.target.id, None)
        elif isinstance(node, (ast.ImportFrom, ast.Import)):
            for a in node.names:
                out.setdefault(a.asname or a.name, None)
        elif isinstance(node, (ast.If, ast.Try)):  # conditional definitions
            inner = [*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", [])]
            for handler in getattr(node, "handlers", []):
                inner.extend(handler.body)
            _collect(inner, out)


def definitions(path: str) -> Names:
    """What the Python source file ``path`` defines (see the module docstring).

    Raises what reading or parsing the file raises (``OSError``, ``SyntaxError``,
    ``ValueError``), as parsing it directly would."""
    path = os.path.abspath(path)
    data = read_bytes(path)
    digest = hashlib.sha256(data).hexdigest()
    with _lock:
        known = _memory.get(path)
    if known is not None and known[0] == digest:
        return known[1]
    entry = _load().get(path)
    if isinstance(entry, dict) and entry.get("sha256") == digest and _valid(entry.get("names")):
        names = entry["names"]
    else:
        names = summarize(ast.parse(data, filename=path).body)
        _store(path, digest, names)
    with _lock:
        _memory[path] = (digest, names)
    return names


def _valid(names, depth: int = 0) -> bool:
    if not isinstance(names, dict) or depth > 64:
        return False
    return all(isinstance(k, str) and (v is None or _valid(v, depth + 1)) for k, v in names.items())


def _load() -> dict:
    try:
        with open(cache_path(), encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("files"), dict):
        return {}
    return data["files"]


def _store(path: str, digest: str, names: Names) -> None:
    """Merge one entry into the cache file (re-read first: other processes may have added some)."""
    try:
        files = {p: e for p, e in _load().items() if p != path and os.path.exists(p)}
        files[path] = {"sha256": digest, "names": names}
        files = dict(list(files.items())[-MAX_ENTRIES:])
        directory = cache_dir()
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".targets-", suffix=".tmp", dir=directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump({"schema": SCHEMA, "files": files}, fh, separators=(",", ":"))
            os.replace(tmp, cache_path())
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except (OSError, ValueError, TypeError):
        pass  # an unwritable cache only means parsing again next time
