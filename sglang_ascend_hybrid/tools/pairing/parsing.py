"""Reading and parsing one Python source file for the pairing check, with the reason when it
cannot be had.

Both sides of the check parse files: SGLang's sources (:mod:`.sources`) and sgl_kernel_npu's
modules (:mod:`.kernel_package`).  They call :func:`_parse` through this module
(``parsing._parse``), so the one function here is the one a test replaces.
"""

from __future__ import annotations

import ast
import os

from sglang_ascend_hybrid import installed_source


class _Unreadable(Exception):
    """A file whose source cannot be read or parsed; ``reason`` says why."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def _os_reason(path: str, exc: OSError) -> str:
    why = f"{type(exc).__name__}: {exc.strerror or exc}"
    if os.path.islink(path):
        try:
            target = os.readlink(path)
        except OSError:
            target = "an unreadable target"
        return f"a symlink to {target} that cannot be followed ({why})"
    return f"cannot be read ({why})"


def _parse(path: str, source: bytes | None = None) -> ast.Module:
    """The AST of ``path`` (of ``source`` when given); :class:`_Unreadable` when it cannot be had."""
    try:
        return ast.parse(installed_source.read_bytes(path) if source is None else source, filename=path)
    except OSError as exc:
        raise _Unreadable(_os_reason(path, exc)) from None
    except SyntaxError as exc:
        raise _Unreadable(f"{type(exc).__name__}: {exc.msg} (line {exc.lineno})") from None
    except ValueError as exc:  # null bytes in the source
        raise _Unreadable(f"ValueError: {exc}") from None
    except (RecursionError, MemoryError) as exc:  # the parser's stack: an expression nested too deeply
        raise _Unreadable(f"nested too deeply for Python's parser ({type(exc).__name__})") from None
