"""The input-error form every op family's table test checks (``ops.errors.bad_input``):
``"<op>: <name>=<value>: expected <what>"``, and which check in the family's modules raised it, so a
table can prove it reaches every check those modules have."""

from __future__ import annotations

import ast
import re
import traceback
from pathlib import Path

CHECK_CALLS = ("bad_input", "need", "check_index_dtype")


def check_sites(*modules) -> set[tuple[str, int]]:
    """``(file name, line)`` of every check call (:data:`CHECK_CALLS`) in ``modules``, except the
    ``bad_input`` inside a ``need`` helper's own body."""
    sites = set()
    for module in modules:
        path = Path(module.__file__)
        tree = ast.parse(path.read_text())
        helpers = {n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "need"}
        inside = {id(c) for h in helpers for c in ast.walk(h)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in CHECK_CALLS
                    and id(node) not in inside):
                sites.add((path.name, node.lineno))
    return sites


def raising_site(exc: BaseException, *modules) -> tuple[str, int]:
    """The innermost frame of ``exc``'s traceback in one of ``modules`` outside a ``need`` helper."""
    files = {Path(m.__file__).resolve() for m in modules}
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if Path(f.filename).resolve() in files and f.name != "need"]
    assert frames, f"raised outside {sorted(f.name for f in files)}: {exc!r}"
    return Path(frames[-1].filename).name, frames[-1].lineno


def assert_form(exc: BaseException, op: str, name: str) -> tuple[str, str]:
    """``exc`` is a one-line ``ValueError`` ``"<op>: <name>=<value>: expected <what>"``; returns
    (value, what)."""
    text = str(exc)
    assert type(exc) is ValueError and "\n" not in text, repr(exc)
    m = re.fullmatch(rf"{re.escape(op)}: {re.escape(name)}=(?P<value>.+?): expected (?P<what>.+)", text)
    assert m, f"not '{op}: {name}=<value>: expected ...': {text!r}"
    assert m["what"].strip() not in ("", "None"), f"no expectation said: {text!r}"
    return m["value"], m["what"]
