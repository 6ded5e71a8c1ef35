"""Parsing (sglang_ascend_hybrid.tools.pairing.parsing): parses are kept per (path, size, mtime)
and redone only for a file that changed."""

from __future__ import annotations

from sglang_ascend_hybrid.tools import pairing
from sglang_ascend_hybrid.tools.pairing import parsing
from tests.tools.pairing.helpers import family_imports, write_kernel_tree


def test_parses_are_cached_by_size_and_mtime(tmp_path, monkeypatch):
    root = write_kernel_tree(tmp_path / "k", family_imports("gdn"))
    calls = []
    real = parsing._parse
    monkeypatch.setattr(parsing, "_parse", lambda path, source=None: calls.append(path) or real(path, source))
    files = pairing.FAMILY_FILES["gdn"]
    first = pairing.check(kernel_path=[str(root)], files=files)
    calls.clear()
    assert pairing.check(kernel_path=[str(root)], files=files) == first
    assert calls == []
    target = root / "sgl_kernel_npu" / "fla" / "chunk.py"
    target.write_text(target.read_text() + "# longer now\n")
    pairing.check(kernel_path=[str(root)], files=files)
    assert calls == [str(target)]
