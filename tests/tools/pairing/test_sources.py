"""SGLang's side of the pairing check (sglang_ascend_hybrid.tools.pairing.sources): the
sgl_kernel_npu imports read from the installed release's source (matched against a regex and a
grep), lazy and guarded imports, and the files that cannot be read or parsed (skipped, reported,
the rest of the report standing)."""

from __future__ import annotations

import os
import sys

import pytest

from sglang_ascend_hybrid.tools import pairing
from tests.tools.pairing.helpers import (
    decode_kernel_import,
    fake_sglang,
    family_imports,
    one_kernel,
    regex_imports,
    sglang_root,
    states,
    write_kernel_tree,
)


@pytest.mark.parametrize("rel", sorted({f for files in pairing.FAMILY_FILES.values() for f in files}))
def test_scan_of_each_family_file_matches_its_source(rel):
    assert (sglang_root().parent / rel).is_file(), f"{rel} is not in the installed SGLang"
    scanned = {(i.line, i.module) for i in pairing.scan_sglang(files=[rel])}
    assert scanned == regex_imports(rel) and scanned


def test_the_gdn_decode_kernel_import_is_found_and_checked(tmp_path):
    imp = decode_kernel_import()
    assert imp.file == pairing.GDN_TRITON and not imp.lazy and not imp.guarded
    assert (imp.line, imp.module) in regex_imports(pairing.GDN_TRITON)
    source = (sglang_root().parent / imp.file).read_text().splitlines()
    assert imp.symbol in "\n".join(source[imp.line - 1:imp.line + 3])
    report = pairing.check(kernel_path=[str(write_kernel_tree(tmp_path, family_imports("gdn")))],
                           files=[pairing.GDN_TRITON])
    assert states(report)[(imp.module, imp.symbol)] == pairing.OK


def test_whole_tree_scan_matches_a_grep_and_marks_lazy_and_guarded_imports():
    imports = pairing.scan_sglang()
    by_file: dict[str, set] = {}
    for i in imports:
        by_file.setdefault(i.file, set()).add((i.line, i.module))
    root = sglang_root()
    grepped = {}
    for sub in pairing.SCANNED_SUBTREES:
        for path in (root / sub).rglob("*.py"):
            text = path.read_text(encoding="utf-8", errors="replace")
            if "sgl_kernel_npu" in text:
                rel = path.relative_to(root.parent).as_posix()
                found = regex_imports(rel)
                if found:
                    grepped[rel] = found
    assert by_file == grepped
    assert any(i.lazy for i in imports) and any(not i.lazy for i in imports)
    guarded = [i for i in imports if i.guarded]
    for i in guarded:  # each guarded import sits inside a try whose handler catches ImportError
        lines = (root.parent / i.file).read_text().splitlines()[:i.line]
        assert any(ln.strip() == "try:" for ln in lines), i


def test_scan_of_a_fake_sglang_tree_finds_every_form(tmp_path):
    src = tmp_path / "sglang" / "srt" / "m.py"
    src.parent.mkdir(parents=True)
    src.write_text(
        "import os\n"
        "import sgl_kernel_npu\n"
        "import sgl_kernel_npu.fla.chunk as chunk_mod\n"
        "if True:\n"
        "    from sgl_kernel_npu.fla.chunk import a, b as c\n"
        "def f():\n"
        "    from sgl_kernel_npu.norm import n\n"
        "try:\n"
        "    from sgl_kernel_npu.opt import o\n"
        "except ImportError:\n"
        "    o = None\n"
        "from sgl_kernel_npu_other import z\n"
        "s = 'from sgl_kernel_npu.fake import x'\n"
        "class C:\n"
        "    def m(self):\n"
        "        if self:\n"
        "            from sgl_kernel_npu.deep import d\n")
    (tmp_path / "sglang" / "kernels").mkdir()
    (tmp_path / "sglang" / "kernels" / "broken.py").write_text("from sgl_kernel_npu.x import (\n")
    got = [(i.file, i.line, i.module, i.symbol, i.lazy, i.guarded)
           for i in pairing.scan_sglang(str(tmp_path / "sglang"))]
    rel = "sglang/srt/m.py"
    assert got == [
        (rel, 2, "sgl_kernel_npu", None, False, False),
        (rel, 3, "sgl_kernel_npu.fla.chunk", None, False, False),
        (rel, 5, "sgl_kernel_npu.fla.chunk", "a", False, False),
        (rel, 5, "sgl_kernel_npu.fla.chunk", "b", False, False),
        (rel, 7, "sgl_kernel_npu.norm", "n", True, False),
        (rel, 9, "sgl_kernel_npu.opt", "o", False, True),
        (rel, 17, "sgl_kernel_npu.deep", "d", True, False),
    ]
    assert pairing.check(str(tmp_path / "sglang"), [str(tmp_path)]).skipped == (
        pairing.SkippedFile("sglang/kernels/broken.py", "SyntaxError: '(' was never closed (line 1)"),)



def test_a_dangling_or_looping_symlink_is_skipped_and_reported(tmp_path):
    sg = fake_sglang(tmp_path, {"srt/a.py": "from sgl_kernel_npu.fla.chunk import a\n",
                                "srt/z/b.py": "from sgl_kernel_npu.fla.chunk import b\n"})
    (sg / "srt" / "dangling.py").symlink_to(tmp_path / "nowhere.py")
    (sg / "srt" / "loop.py").symlink_to("loop.py")
    report = pairing.check(str(sg), [str(one_kernel(tmp_path))])
    assert [(r.imp.file, r.imp.what, r.state) for r in report.records] == [
        ("sglang/srt/a.py", "sgl_kernel_npu.fla.chunk:a", pairing.OK),
        ("sglang/srt/z/b.py", "sgl_kernel_npu.fla.chunk:b", pairing.OK)]
    assert [s.file for s in report.skipped] == ["sglang/srt/dangling.py", "sglang/srt/loop.py"]
    dangling, loop = (s.reason for s in report.skipped)
    assert dangling.startswith(f"a symlink to {tmp_path / 'nowhere.py'} that cannot be followed (FileNotFoundError: ")
    assert loop.startswith("a symlink to loop.py that cannot be followed (OSError: ")
    # the startup check's form (named files): a dangling file is reported, an absent one is not there to check
    named = pairing.check(str(sg), [str(one_kernel(tmp_path))],
                          files=["sglang/srt/a.py", "sglang/srt/dangling.py", "sglang/srt/absent.py"])
    assert [r.imp.file for r in named.records] == ["sglang/srt/a.py"]
    assert [(s.file, s.reason) for s in named.skipped] == [("sglang/srt/dangling.py", dangling)]


def test_a_file_that_is_not_regular_and_an_unreadable_dist_info_are_no_crash(tmp_path):
    sg = fake_sglang(tmp_path, {"srt/a.py": "from sgl_kernel_npu.fla.chunk import a\n"})
    os.mkfifo(sg / "srt" / "pipe.py")  # reading it would block forever
    (sg.parent / "sglang-9.9.dist-info").mkdir()
    (sg.parent / "sglang-9.9.dist-info" / "METADATA").symlink_to("METADATA")  # its version cannot be read
    report = pairing.check(str(sg), [str(one_kernel(tmp_path))])
    assert [(r.imp.what, r.imp.release, r.state) for r in report.records] == [
        ("sgl_kernel_npu.fla.chunk:a", "SGLang", pairing.OK)]
    assert report.skipped == (pairing.SkippedFile("sglang/srt/pipe.py", "not a regular file"),)


def test_an_unlistable_directory_is_reported(tmp_path, monkeypatch):
    sg = fake_sglang(tmp_path, {"srt/a.py": "from sgl_kernel_npu.fla.chunk import a\n",
                                "srt/sub/b.py": "from sgl_kernel_npu.fla.chunk import b\n"})
    real = os.scandir
    denied = str(sg / "srt" / "sub")

    def scandir(path="."):  # what os.walk meets on a directory it may not list (chmod is moot as root)
        if os.fspath(path) == denied:
            raise PermissionError(13, "Permission denied", denied)
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    report = pairing.check(str(sg), [str(one_kernel(tmp_path))])
    assert [r.imp.what for r in report.records] == ["sgl_kernel_npu.fla.chunk:a"]
    assert report.skipped == (pairing.SkippedFile(
        "sglang/srt/sub", "directory cannot be read (PermissionError: Permission denied)"),)


def test_a_too_deep_expression_skips_that_file_only(tmp_path):
    sg = fake_sglang(tmp_path, {
        "srt/a.py": "from sgl_kernel_npu.fla.chunk import a\n",
        # parses, but deeper than Python's recursion limit for a recursive walk: still scanned
        "srt/deep.py": "x = " + "1 + " * (sys.getrecursionlimit() + 500) + "1\n"
                       "from sgl_kernel_npu.fla.chunk import b\n",
        # deeper than the parser itself takes (RecursionError from ast.parse): skipped, reported
        "srt/deeper.py": "from sgl_kernel_npu.fla.chunk import c\nx = " + "1 + " * 100_000 + "1\n",
    })
    report = pairing.check(str(sg), [str(one_kernel(tmp_path))])
    assert [(r.imp.file, r.imp.line, r.imp.what, r.state) for r in report.records] == [
        ("sglang/srt/a.py", 1, "sgl_kernel_npu.fla.chunk:a", pairing.OK),
        ("sglang/srt/deep.py", 2, "sgl_kernel_npu.fla.chunk:b", pairing.OK)]
    assert report.skipped == (pairing.SkippedFile("sglang/srt/deeper.py",
                                                  "nested too deeply for Python's parser (RecursionError)"),)
