"""The sgl-kernel-npu pairing check (sglang_ascend_hybrid.tools.pairing): SGLang's sgl_kernel_npu
imports, read from the installed release's source, checked against fake sgl_kernel_npu
trees built in tmp_path; the startup stop / WARNING from the attn_backend_wrapper hook;
the doctor section.

Expectations come from the installed SGLang's source (never a literal release): the
imports of the files each family needs are read back here with a regex and the fakes
provide exactly them, less what a test takes away."""

from __future__ import annotations

import io
import logging
import os
import re
import sys
from pathlib import Path
from types import SimpleNamespace as NS

import pytest

from sglang_ascend_hybrid.tools import doctor, pairing
from sglang_ascend_hybrid.patches import mode
from sglang_ascend_hybrid.integration import short_conv
from sglang_ascend_hybrid.patches.releases import installed_version

DECODE_OPTIMIZED = "sgl_kernel_npu.fla.fused_sigmoid_gating_recurrent_decode_optimized"
INSTALL_TAIL = ", or use an SGLang release that does not import it"
IMPORT_RE = re.compile(r"^[ \t]*(?:from[ \t]+(sgl_kernel_npu[\w.]*)[ \t]+import\b|import[ \t]+(sgl_kernel_npu[\w.]*))",
                       re.M)


# --------------------------------------------------------------------------- helpers


def sglang_root() -> Path:
    return Path(pairing.sglang_dir())


def regex_imports(rel: str) -> set[tuple[int, str]]:
    """(line, module) of each sgl_kernel_npu import statement in SGLang's ``rel``, by regex."""
    text = (sglang_root().parent / rel).read_text(encoding="utf-8")
    return {(text.count("\n", 0, m.start()) + 1, m.group(1) or m.group(2)) for m in IMPORT_RE.finditer(text)}


def family_imports(kind: str) -> list[pairing.KernelImport]:
    return list(pairing.scan_sglang(files=pairing.FAMILY_FILES[kind]))


def decode_kernel_import() -> pairing.KernelImport:
    """The installed gdn_triton.py's NPU decode-kernel import (whichever module this release uses)."""
    found = [i for i in pairing.scan_sglang(files=[pairing.GDN_TRITON])
             if i.symbol and "fused_sigmoid_gating_delta_rule_update" in i.symbol]
    assert len(found) == 1, found
    return found[0]


def write_kernel_tree(root: Path, imports, drop_modules=(), drop_symbols=(), extra=None) -> Path:
    """A fake sgl_kernel_npu under ``root`` defining every (module, symbol) of ``imports``
    except ``drop_modules`` (no file) and ``drop_symbols`` ((module, symbol) left out);
    ``extra`` maps a relative path to file text, written last."""
    wanted: dict[str, set[str]] = {}
    for imp in imports:
        if imp.module not in drop_modules:
            wanted.setdefault(imp.module, set())
            if imp.symbol and (imp.module, imp.symbol) not in drop_symbols:
                wanted[imp.module].add(imp.symbol)
    parents = {".".join(m.split(".")[:i]) for m in wanted for i in range(1, m.count(".") + 1)}
    (root / "sgl_kernel_npu").mkdir(parents=True, exist_ok=True)
    for module in sorted(set(wanted) | parents | {"sgl_kernel_npu"}):
        parts = module.split(".")
        path = root.joinpath(*parts, "__init__.py") if module in parents or len(parts) == 1 \
            else root.joinpath(*parts[:-1], parts[-1] + ".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"{name} = None\n" for name in sorted(wanted.get(module, ()))))
    for rel, text in (extra or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def states(report) -> dict[tuple[str, str | None], str]:
    return {(r.imp.module, r.imp.symbol): r.state for r in report.records}


def expected_missing_module(imp: pairing.KernelImport, names: str) -> str:
    fact = pairing.KNOWN.get(imp.module)
    known = f" ({fact.provided_by})" if fact else ""
    return (f"sgl-kernel-npu pairing: SGLang {installed_version('sglang')}'s {imp.file}:{imp.line} imports "
            f"{names} from {imp.module}, but the installed sgl_kernel_npu has no module {imp.module}: install an "
            f"sgl-kernel-npu build that provides {imp.module}{known}{INSTALL_TAIL}")


@pytest.fixture
def kernel_path(monkeypatch):
    """Point the check at a fake sgl_kernel_npu: ``use(root)``."""
    def use(root):
        monkeypatch.setattr(pairing, "KERNEL_PATH", [str(root)])
    return use


@pytest.fixture
def not_strict(monkeypatch):
    monkeypatch.delenv("SGLANG_ASCEND_HYBRID_STRICT", raising=False)
    mode._reset_for_tests()
    yield
    mode._reset_for_tests()


@pytest.fixture
def strict(not_strict):
    mode.record_request()  # --attention-backend ascend_hybrid
    yield


# --------------------------------------------------------------------------- scanning SGLang


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


def test_parses_are_cached_by_size_and_mtime(tmp_path, monkeypatch):
    root = write_kernel_tree(tmp_path / "k", family_imports("gdn"))
    calls = []
    real = pairing._parse
    monkeypatch.setattr(pairing, "_parse", lambda path, source=None: calls.append(path) or real(path, source))
    files = pairing.FAMILY_FILES["gdn"]
    first = pairing.check(kernel_path=[str(root)], files=files)
    calls.clear()
    assert pairing.check(kernel_path=[str(root)], files=files) == first
    assert calls == []
    target = root / "sgl_kernel_npu" / "fla" / "chunk.py"
    target.write_text(target.read_text() + "# longer now\n")
    pairing.check(kernel_path=[str(root)], files=files)
    assert calls == [str(target)]


# --------------------------------------------------------------------------- states


def test_a_build_with_everything_is_ok(tmp_path):
    for kind in pairing.FAMILY_FILES:
        root = write_kernel_tree(tmp_path / kind, family_imports(kind))
        report = pairing.check(kernel_path=[str(root)], files=pairing.FAMILY_FILES[kind])
        assert report.installed and report.records
        assert {r.state for r in report.records} == {pairing.OK}
        assert pairing.family_problems(kind, report) == []


def test_missing_decode_module_names_module_file_and_install(tmp_path):
    imp = decode_kernel_import()
    root = write_kernel_tree(tmp_path, family_imports("gdn"), drop_modules={imp.module})
    report = pairing.check(kernel_path=[str(root)], files=pairing.FAMILY_FILES["gdn"])
    st = states(report)
    assert st[(imp.module, imp.symbol)] == pairing.MISSING_MODULE
    assert [k for k, v in st.items() if v != pairing.OK] == [(imp.module, imp.symbol)]
    assert pairing.family_problems("gdn", report) == [expected_missing_module(imp, imp.symbol)]
    assert pairing.family_problems("short_conv", report) == []  # gdn_triton.py is not a short-conv file


def test_the_pr740_decode_module_message_reads_exactly(tmp_path):
    """SGLang's 0.5.21+ form of the import, in a fake SGLang tree (any installed release)."""
    sg = tmp_path / "sg" / "sglang"
    gdn = sg.joinpath(*pairing.GDN_TRITON.split("/")[1:])
    gdn.parent.mkdir(parents=True)
    gdn.write_text("from sgl_kernel_npu.fla.chunk import chunk_gated_delta_rule_npu\n"
                   f"from {DECODE_OPTIMIZED} import (\n"
                   "    fused_sigmoid_gating_delta_rule_update_decode_npu as fused_sigmoid_gating_delta_rule_update,\n"
                   ")\n")
    root = write_kernel_tree(tmp_path / "k", [],
                             extra={"sgl_kernel_npu/fla/chunk.py": "chunk_gated_delta_rule_npu = 1\n"})
    report = pairing.check(str(sg), [str(root)])
    assert states(report) == {("sgl_kernel_npu.fla.chunk", "chunk_gated_delta_rule_npu"): pairing.OK,
                              (DECODE_OPTIMIZED, "fused_sigmoid_gating_delta_rule_update_decode_npu"):
                                  pairing.MISSING_MODULE}
    assert pairing.family_problems("gdn", report) == [
        f"sgl-kernel-npu pairing: SGLang's {pairing.GDN_TRITON}:2 imports fused_sigmoid_gating_delta_rule_update_"
        f"decode_npu from {DECODE_OPTIMIZED}, but the installed sgl_kernel_npu has no module {DECODE_OPTIMIZED}: "
        f"install an sgl-kernel-npu build that provides {DECODE_OPTIMIZED} (first in sgl-kernel-npu PR #740, "
        "not in any tag up to 2026.08.21), or use an SGLang release that does not import it"]
    (root / "sgl_kernel_npu" / "fla" / "fused_sigmoid_gating_recurrent_decode_optimized.py").write_text(
        "def fused_sigmoid_gating_delta_rule_update_decode_npu():\n    pass\n")
    assert {r.state for r in pairing.check(str(sg), [str(root)]).records} == {pairing.OK}


def test_module_present_but_symbol_missing(tmp_path):
    imp = decode_kernel_import()
    root = write_kernel_tree(tmp_path, family_imports("gdn"), drop_symbols={(imp.module, imp.symbol)})
    report = pairing.check(kernel_path=[str(root)], files=pairing.FAMILY_FILES["gdn"])
    rec = next(r for r in report.records if r.imp == imp)
    assert rec.state == pairing.MISSING_SYMBOL
    path = root.joinpath(*imp.module.split(".")[:-1], imp.module.split(".")[-1] + ".py")
    fact = pairing.KNOWN.get(imp.module)
    assert pairing.family_problems("gdn", report) == [
        f"sgl-kernel-npu pairing: SGLang {installed_version('sglang')}'s {imp.file}:{imp.line} imports {imp.symbol} "
        f"from {imp.module}, but the installed {imp.module} ({path}) does not define {imp.symbol}: install an "
        f"sgl-kernel-npu build whose {imp.module} defines {imp.symbol}"
        + (f" ({fact.provided_by})" if fact else "") + INSTALL_TAIL]


@pytest.mark.parametrize("body, state", [
    ("from ._impl import *\n", pairing.UNVERIFIABLE),
    ("def __getattr__(name):\n    raise AttributeError(name)\n", pairing.UNVERIFIABLE),
    ("__all__ = ['{sym}']\n", pairing.OK),
    ("try:\n    from x import {sym}\nexcept ImportError:\n    {sym} = None\n", pairing.OK),
    ("{sym}, other = 1, 2\n", pairing.OK),
    ("class {sym}:\n    pass\n", pairing.OK),
    ("def helper():\n    {sym} = 1\n", pairing.MISSING_SYMBOL),  # a local, not a module name
    ("class Box:\n    {sym} = 1\n", pairing.MISSING_SYMBOL),
    ("this is not python (\n", pairing.UNVERIFIABLE),
    # only a type checker sees these: absent when SGLang imports the module
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ._impl import {sym}\n", pairing.MISSING_SYMBOL),
    ("import typing\nif typing.TYPE_CHECKING:\n    {sym} = 1\n", pairing.MISSING_SYMBOL),
    ("if TYPE_CHECKING:\n    from x import {sym}\n__all__ = ['{sym}']\n", pairing.MISSING_SYMBOL),
    ("if not not TYPE_CHECKING:\n    def {sym}():\n        pass\n", pairing.MISSING_SYMBOL),
    ("{sym}: int\n", pairing.MISSING_SYMBOL),  # an annotation binds nothing
    ("if TYPE_CHECKING:\n    pass\nelse:\n    {sym} = 1\n", pairing.OK),
    ("if not TYPE_CHECKING:\n    {sym} = 1\n", pairing.OK),
    ("if TYPE_CHECKING:\n    from x import {sym}\n{sym} = 1\n", pairing.OK),
    ("{sym}: int = 1\n", pairing.OK),
    ("if TYPE_CHECKING:\n    from ._impl import {sym}\ndef __getattr__(name):\n    pass\n", pairing.UNVERIFIABLE),
    # too deep for Python's parser (RecursionError / MemoryError from ast.parse): unverifiable, not a crash
    ("x = " + "1 + " * 20000 + "1\n{sym} = 1\n", pairing.UNVERIFIABLE),
    ("x = " + "-" * 20000 + "1\n{sym} = 1\n", pairing.UNVERIFIABLE),
])
def test_what_counts_as_defined(tmp_path, body, state):
    imp = decode_kernel_import()
    root = write_kernel_tree(tmp_path, family_imports("gdn"), drop_modules={imp.module})
    parts = imp.module.split(".")
    root.joinpath(*parts[:-1], parts[-1] + ".py").write_text(body.format(sym=imp.symbol))
    report = pairing.check(kernel_path=[str(root)], files=[imp.file])
    assert states(report)[(imp.module, imp.symbol)] == state


def test_a_name_bound_only_for_type_checkers_is_missing_and_says_why(tmp_path):
    imp = decode_kernel_import()
    root = write_kernel_tree(tmp_path, family_imports("gdn"), drop_modules={imp.module})
    parts = imp.module.split(".")
    path = root.joinpath(*parts[:-1], parts[-1] + ".py")
    path.write_text(f"from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ._impl import {imp.symbol}\n")
    report = pairing.check(kernel_path=[str(root)], files=[imp.file])
    rec = next(r for r in report.records if r.imp == imp)
    assert (rec.state, rec.detail) == (pairing.MISSING_SYMBOL, f"{imp.module} binds {imp.symbol} only under "
                                       f"`if TYPE_CHECKING:`, so {imp.what} is absent at runtime")
    assert pairing.family_problems("gdn", report) == [
        f"sgl-kernel-npu pairing: SGLang {installed_version('sglang')}'s {imp.file}:{imp.line} imports {imp.symbol} "
        f"from {imp.module}, but the installed {imp.module} ({path}) does not define {imp.symbol}: install an "
        f"sgl-kernel-npu build whose {imp.module} defines {imp.symbol}"
        + (f" ({pairing.KNOWN[imp.module].provided_by})" if imp.module in pairing.KNOWN else "") + INSTALL_TAIL]


def test_compiled_extension_is_present_but_unverifiable(tmp_path):
    from importlib.machinery import EXTENSION_SUFFIXES

    imp = decode_kernel_import()
    root = write_kernel_tree(tmp_path, family_imports("gdn"), drop_modules={imp.module})
    parts = imp.module.split(".")
    root.joinpath(*parts[:-1], parts[-1] + EXTENSION_SUFFIXES[0]).write_bytes(b"\x7fELF")
    report = pairing.check(kernel_path=[str(root)], files=[imp.file])
    assert states(report)[(imp.module, imp.symbol)] == pairing.UNVERIFIABLE
    assert pairing.family_problems("gdn", report) == []


def test_namespace_packages_and_submodule_imports(tmp_path):
    sg = tmp_path / "sg" / "sglang" / "srt"
    sg.mkdir(parents=True)
    (sg / "m.py").write_text("from sgl_kernel_npu.attention.sinks import f\n"
                             "from sgl_kernel_npu import attention\n"
                             "from sgl_kernel_npu.attention import gone\n"
                             "import sgl_kernel_npu.attention.sinks\n"
                             "import sgl_kernel_npu.nothing\n")
    root = tmp_path / "k"
    (root / "sgl_kernel_npu" / "attention").mkdir(parents=True)  # no __init__.py, as in sgl-kernel-npu
    (root / "sgl_kernel_npu" / "__init__.py").write_text("")
    (root / "sgl_kernel_npu" / "attention" / "sinks.py").write_text("def f():\n    pass\n")
    report = pairing.check(str(sg.parent), [str(root)])
    assert [(r.imp.module, r.imp.symbol, r.state) for r in report.records] == [
        ("sgl_kernel_npu.attention.sinks", "f", pairing.OK),
        ("sgl_kernel_npu", "attention", pairing.OK),
        ("sgl_kernel_npu.attention", "gone", pairing.MISSING_SYMBOL),
        ("sgl_kernel_npu.attention.sinks", None, pairing.OK),
        ("sgl_kernel_npu.nothing", None, pairing.MISSING_MODULE),
    ]


def test_not_installed_is_reported_once(tmp_path, kernel_path):
    kernel_path(tmp_path)  # no sgl_kernel_npu there
    report = pairing.check()
    assert not report.installed and report.records == () and len(report.imports) > 10
    problems = pairing.family_problems("gdn")
    files = sorted({i.file for i in family_imports("gdn")})
    assert problems == [pairing.not_installed_message(family_imports("gdn"))]
    assert problems[0].startswith(f"sgl-kernel-npu pairing: {pairing.NOT_INSTALLED} (SGLang "
                                  f"{installed_version('sglang')}'s {files[0]}, ")


def test_message_refuses_records_that_are_not_missing_or_mixed(tmp_path):
    imp = decode_kernel_import()
    ok = pairing.PairingRecord(imp, pairing.OK)
    with pytest.raises(ValueError, match="missing imports of one statement"):
        pairing.message(ok)
    other = pairing.KernelImport(imp.file, imp.line + 1, imp.module, imp.symbol)
    with pytest.raises(ValueError, match=f"{imp.line + 1}"):
        pairing.message(pairing.PairingRecord(imp, pairing.MISSING_MODULE),
                        pairing.PairingRecord(other, pairing.MISSING_MODULE))
    with pytest.raises(ValueError, match="family kind 'mamba2' is not one of"):
        pairing.family_problems("mamba2")


def test_one_message_per_statement_lists_its_names(tmp_path):
    imports = family_imports("gdn")
    multi = next((i for i in imports if sum(j.line == i.line and j.file == i.file for j in imports) > 1), None)
    if multi is None:
        pytest.skip("no multi-name sgl_kernel_npu import in this release's GDN files")
    root = write_kernel_tree(tmp_path, imports, drop_modules={multi.module})
    report = pairing.check(kernel_path=[str(root)], files=pairing.FAMILY_FILES["gdn"])
    group = [i for i in imports if (i.file, i.line) == (multi.file, multi.line)]
    mine = [m for m in pairing.family_problems("gdn", report) if f"{multi.file}:{multi.line} " in m]
    assert mine == [expected_missing_module(multi, ", ".join(i.symbol for i in group))]


# --------------------------------------------------------------------------- bad files in the SGLang tree


def fake_sglang(tmp_path: Path, files: dict[str, str]) -> Path:
    """A fake sglang package under ``tmp_path / 'sg'`` holding ``files`` (path below the package -> text)."""
    sg = tmp_path / "sg" / "sglang"
    for rel, text in files.items():
        (sg / rel).parent.mkdir(parents=True, exist_ok=True)
        (sg / rel).write_text(text)
    return sg


def one_kernel(tmp_path: Path) -> Path:
    return write_kernel_tree(tmp_path / "k", [], extra={"sgl_kernel_npu/fla/chunk.py": "a = 1\nb = 2\n"})


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


def test_doctor_lists_the_skipped_files(tmp_path, monkeypatch, kernel_path):
    sg = fake_sglang(tmp_path, {"srt/a.py": "from sgl_kernel_npu.fla.chunk import a\n"})
    (sg / "srt" / "dangling.py").symlink_to(tmp_path / "nowhere.py")
    monkeypatch.setattr(pairing, "SGLANG_DIR", str(sg))
    reason = pairing.check().skipped[0].reason
    skipped_line = f"  skipped        sglang/srt/dangling.py: {reason} (its sgl_kernel_npu imports are not checked)"
    kernel_path(tmp_path / "none")
    assert render_pairing().splitlines()[2:] == [
        f"  {pairing.NOT_INSTALLED} (SGLang imports it 1 times in 1 files)", skipped_line]
    kernel_path(root := one_kernel(tmp_path))
    assert render_pairing().splitlines()[2:] == [
        f"  sgl_kernel_npu at {root / 'sgl_kernel_npu' / '__init__.py'}: 1 imports, 1 ok; 1 SGLang files skipped",
        skipped_line, "  ok             sgl_kernel_npu.fla.chunk:a  <- sglang/srt/a.py:1"]


# --------------------------------------------------------------------------- one name in two modules

CLASH = "chunk_gated_delta_rule_npu"
CHUNK, WRAPPER = "sgl_kernel_npu.fla.chunk", "sgl_kernel_npu.fla.chunk_gated_delta_rule_npu"  # SKN PR #747: WRAPPER


def clash_trees(tmp_path: Path, init: str = "", chunk: str = f"def {CLASH}():\n    pass\n"):
    """A fake SGLang importing the name from each module and from their package, and a fake
    sgl_kernel_npu holding both modules (``fla/__init__.py`` is ``init``, ``fla/chunk.py`` ``chunk``)."""
    sg = fake_sglang(tmp_path, {"srt/gdn.py": f"from {CHUNK} import {CLASH}\n"
                                              f"from {WRAPPER} import {CLASH} as wrapper\n"
                                              f"from sgl_kernel_npu.fla import {CLASH} as from_package\n"})
    root = write_kernel_tree(tmp_path / "k", [], extra={
        "sgl_kernel_npu/fla/__init__.py": init,
        "sgl_kernel_npu/fla/chunk.py": chunk,
        f"sgl_kernel_npu/fla/{CLASH}.py": f"import torch\n\ndef {CLASH}(*args):\n"
                                          "    return torch.ops.npu.chunk_gated_delta_rule(*args)\n"})
    return sg, root


def test_the_two_chunk_gated_delta_rule_npu_are_told_apart(tmp_path):
    sg, root = clash_trees(tmp_path, init=f"from .chunk import {CLASH}\n")
    fla = root / "sgl_kernel_npu" / "fla"
    report = pairing.check(str(sg), [str(root)])
    assert [(r.imp.what, r.state, r.detail, r.path) for r in report.records] == [
        (f"{CHUNK}:{CLASH}", pairing.OK, f"{CHUNK}:{CLASH} defined in {CHUNK}", str(fla / "chunk.py")),
        (f"{WRAPPER}:{CLASH}", pairing.OK, f"{WRAPPER}:{CLASH} defined in {WRAPPER}", str(fla / f"{CLASH}.py")),
        # the package's own binding wins over its same-name submodule, as in Python's from-import
        (f"sgl_kernel_npu.fla:{CLASH}", pairing.OK, f"sgl_kernel_npu.fla:{CLASH} bound from {CHUNK}:{CLASH}; the "
         f"submodule {WRAPPER} has the same name (importing it rebinds sgl_kernel_npu.fla:{CLASH} to that module)",
         str(fla / "__init__.py"))]


def test_the_package_name_without_a_binding_is_the_wrapper_module(tmp_path):
    sg, root = clash_trees(tmp_path)
    rec = pairing.check(str(sg), [str(root)]).records[2]
    assert (rec.state, rec.detail) == (pairing.OK, f"sgl_kernel_npu.fla:{CLASH} is the submodule {WRAPPER}")


def test_a_build_without_the_hooked_entry_names_fla_chunk_not_the_wrapper(tmp_path, monkeypatch, kernel_path):
    sg, root = clash_trees(tmp_path, chunk="def other():\n    pass\n")  # PR #747's wrapper only
    report = pairing.check(str(sg), [str(root)])
    assert [(r.imp.what, r.state) for r in report.records] == [
        (f"{CHUNK}:{CLASH}", pairing.MISSING_SYMBOL), (f"{WRAPPER}:{CLASH}", pairing.OK),
        (f"sgl_kernel_npu.fla:{CLASH}", pairing.OK)]
    assert report.records[0].detail == f"{CHUNK} does not define {CHUNK}:{CLASH}"
    assert pairing.messages(report.records) == [
        f"sgl-kernel-npu pairing: SGLang's sglang/srt/gdn.py:1 imports {CLASH} from {CHUNK}, but the installed "
        f"{CHUNK} ({root / 'sgl_kernel_npu' / 'fla' / 'chunk.py'}) does not define {CLASH}: install an "
        f"sgl-kernel-npu build whose {CHUNK} defines {CLASH}{INSTALL_TAIL}"]
    monkeypatch.setattr(pairing, "SGLANG_DIR", str(sg))
    kernel_path(root)
    rows = doctor.collect_pairing()["rows"]
    assert [(r["import"], r["state"]) for r in rows] == [(r.imp.what, r.state) for r in report.records]
    text = render_pairing()
    assert f"  missing symbol {CHUNK}:{CLASH}  <- sglang/srt/gdn.py:1\n" in text
    assert f"  ok             {WRAPPER}:{CLASH}  <- sglang/srt/gdn.py:2\n" in text


def test_unverifiable_rows_name_the_symbol_by_module(tmp_path, monkeypatch, kernel_path):
    sg, root = clash_trees(tmp_path, chunk="from ._impl import *\n")
    monkeypatch.setattr(pairing, "SGLANG_DIR", str(sg))
    kernel_path(root)
    assert (f"      {root / 'sgl_kernel_npu' / 'fla' / 'chunk.py'}: it star-imports from ._impl: {CHUNK}:{CLASH} "
            "may be provided at import\n") in render_pairing()


# --------------------------------------------------------------------------- families


@pytest.mark.parametrize("model_type, kind", [
    ("qwen3_next", "gdn"), ("qwen3_5", "gdn"), ("qwen3_5_moe", "gdn"), ("lfm2", "short_conv"),
    ("lfm2_vl", "short_conv"), ("zaya", "short_conv"), ("llama", None), (None, None),
])
def test_model_family(model_type, kind):
    assert pairing.model_family(NS(hf_config=NS(model_type=model_type))) == kind
    assert pairing.model_family(NS(hf_config=NS(model_type="x"), hf_text_config=NS(model_type=model_type))) == kind


def test_family_table_names_the_backends_each_family_builds():
    npu = "sglang/srt/hardware_backend/npu/attention/"
    assert pairing.FAMILY_FILES["short_conv"] == (npu + "ascend_hybrid_linear_attn_backend.py",
                                                  npu + "ascend_backend.py")
    assert set(pairing.FAMILY_FILES["short_conv"]) < set(pairing.FAMILY_FILES["gdn"])
    assert {pairing.GDN_TRITON, npu + "ascend_gdn_backend.py"} < set(pairing.FAMILY_FILES["gdn"])
    assert pairing.families_needing(pairing.GDN_TRITON) == ("gdn",)
    assert pairing.families_needing(npu + "ascend_backend.py") == ("gdn", "short_conv")
    assert pairing.families_needing("sglang/srt/models/llama.py") == ()


# --------------------------------------------------------------------------- startup


def gdn_runner():
    from sglang.srt.configs.qwen3_next import Qwen3NextConfig

    cfg = Qwen3NextConfig()
    return NS(model_config=NS(hf_config=cfg, hf_text_config=cfg, is_draft_model=False))


@pytest.fixture
def on_npu(monkeypatch):
    """NPU detection on where the hook reads it; the deferred patches recorded, not applied."""
    import sglang.srt.utils as sglang_utils
    from sglang_ascend_hybrid.patches import apply

    monkeypatch.setattr(sglang_utils, "is_npu", lambda: True)
    applied = []
    monkeypatch.setattr(apply, "apply_deferred", lambda: applied.append(True))
    return applied


@pytest.fixture
def gdn_build_without_decode_kernel(tmp_path, kernel_path):
    imp = decode_kernel_import()
    kernel_path(write_kernel_tree(tmp_path, family_imports("gdn"), drop_modules={imp.module}))
    return expected_missing_module(imp, imp.symbol)


def test_ascend_hybrid_stops_a_gdn_model_before_sglang_imports(on_npu, strict, gdn_build_without_decode_kernel):
    def original(*a, **k):
        raise AssertionError("SGLang's wrapper must not run")

    with pytest.raises(pairing.KernelPairingError) as err:
        short_conv.attn_backend_wrapper_around(original, gdn_runner(), object())
    lines = str(err.value).splitlines()
    assert "--attention-backend ascend_hybrid stops startup" in lines[0] and "gdn models" in lines[0]
    assert lines[1:] == [gdn_build_without_decode_kernel]
    assert on_npu == []  # stopped before the deferred patches


def test_plain_ascend_warns_once_per_missing_import(on_npu, not_strict, gdn_build_without_decode_kernel, caplog):
    seen = []

    def original(runner, full, *a, **k):
        seen.append(full)
        return "upstream"

    with caplog.at_level(logging.WARNING, logger=pairing.logger.name):
        for _ in range(2):
            assert short_conv.attn_backend_wrapper_around(original, gdn_runner(), "full") == "upstream"
    warnings = [r.getMessage() for r in caplog.records if r.name == pairing.logger.name]
    assert warnings == [gdn_build_without_decode_kernel]
    assert all(r.levelno == logging.WARNING for r in caplog.records if r.name == pairing.logger.name)
    assert seen == ["full", "full"] and on_npu == [True, True]


def test_short_conv_needs_only_its_files(not_strict, strict, tmp_path, kernel_path):
    imports = family_imports("short_conv")
    hybrid_linear = next(i for i in imports if i.file == pairing.ASCEND_HYBRID_LINEAR_BACKEND)
    lfm2 = NS(hf_config=NS(model_type="lfm2"))
    kernel_path(write_kernel_tree(tmp_path / "a", family_imports("short_conv")))  # no GDN kernels at all
    pairing.enforce_for_model(lfm2)
    kernel_path(write_kernel_tree(tmp_path / "b", imports, drop_modules={hybrid_linear.module}))
    with pytest.raises(pairing.KernelPairingError, match=re.escape(f"{hybrid_linear.file}:{hybrid_linear.line} ")):
        pairing.enforce_for_model(lfm2)
    pairing.enforce_for_model(NS(hf_config=NS(model_type="llama")))  # not a family served here


def test_not_installed_stops_strict_startup_with_one_line(on_npu, strict, tmp_path, kernel_path):
    kernel_path(tmp_path)
    with pytest.raises(pairing.KernelPairingError) as err:
        short_conv.attn_backend_wrapper_around(None, gdn_runner(), object())
    assert str(err.value).splitlines()[1:] == [pairing.not_installed_message(family_imports("gdn"))]


def test_a_check_that_cannot_run_is_one_warning_not_a_failed_launch(strict, monkeypatch, caplog):
    monkeypatch.setattr(pairing, "check", lambda *a, **k: (_ for _ in ()).throw(PermissionError("denied")))
    with caplog.at_level(logging.WARNING, logger=pairing.logger.name):
        pairing.enforce_for_model(NS(hf_config=NS(model_type="qwen3_next")))
        pairing.enforce_for_model(NS(hf_config=NS(model_type="lfm2")))
    assert [r.getMessage() for r in caplog.records if r.name == pairing.logger.name] == [
        "sglang-ascend-hybrid: the sgl-kernel-npu pairing check could not run (PermissionError: denied); "
        "continuing without it"]


def test_off_npu_nothing_is_checked(monkeypatch, strict):
    import sglang.srt.utils as sglang_utils

    monkeypatch.setattr(sglang_utils, "is_npu", lambda: False)
    monkeypatch.setattr(pairing, "check", lambda *a, **k: pytest.fail("checked off NPU"))
    assert short_conv.attn_backend_wrapper_around(lambda r, f: "cuda path", gdn_runner(), object()) == "cuda path"


# --------------------------------------------------------------------------- doctor


def render_pairing() -> str:
    out = io.StringIO()
    doctor.render_pairing(doctor.collect_pairing(), out.write)
    return out.getvalue()


def test_doctor_section_lists_each_import_state(tmp_path, kernel_path):
    imp = decode_kernel_import()
    imports = pairing.scan_sglang()
    kernel_path(root := write_kernel_tree(tmp_path, imports, drop_modules={imp.module}))
    gone = [i for i in imports if i.module == imp.module]
    text = render_pairing()
    lines = text.splitlines()
    assert lines[:3] == ["", "sgl-kernel-npu pairing",
                         f"  sgl_kernel_npu at {root / 'sgl_kernel_npu' / '__init__.py'}: {len(imports)} imports, "
                         f"{len(imports) - len(gone)} ok, {len(gone)} missing module"]
    row = f"  missing module {imp.what}  <- {imp.file}:{imp.line}  [needed by gdn]"
    assert lines[lines.index(row) + 1] == "      " + expected_missing_module(imp, imp.symbol)
    assert sum(ln.startswith("  ok ") for ln in lines) == len(imports) - len(gone)
    assert "failed" not in text and "problem:" not in text


def test_doctor_section_when_not_installed(tmp_path, kernel_path):
    kernel_path(tmp_path)
    imports = pairing.scan_sglang()
    assert render_pairing() == (f"\nsgl-kernel-npu pairing\n  {pairing.NOT_INSTALLED} (SGLang imports it "
                                f"{len(imports)} times in {len({i.file for i in imports})} files)\n")


def test_doctor_section_reports_an_error_instead_of_crashing(monkeypatch):
    monkeypatch.setattr(pairing, "check", lambda *a, **k: (_ for _ in ()).throw(OSError("disk gone")))
    assert render_pairing() == "\nsgl-kernel-npu pairing\n  could not be checked (OSError: disk gone)\n"


def test_doctor_render_includes_the_section():
    info = {"versions": {"sglang-ascend-hybrid": "x"}, "device_ops": {}, "kernels": {}, "release": "r",
            "summary": "s", "patches": [], "settings": {}, "load_errors": [], "setting_problems": [],
            "pairing": {"installed": False, "imports": 3, "files": 2}}
    out = io.StringIO()
    doctor.render(info, out)
    assert f"\nsgl-kernel-npu pairing\n  {pairing.NOT_INSTALLED} (SGLang imports it 3 times in 2 files)\n" \
           in out.getvalue()


def test_pairing_module_imports_no_torch_or_npu_package():
    import subprocess
    import sys

    code = ("import sys; from sglang_ascend_hybrid.tools import pairing; pairing.check()\n"
            "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'torch_npu', 'sgl_kernel_npu')\n"
            "       or m.startswith('sglang.')]\n"
            "print(bad)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parent / "npu_stubs"),
                                                        os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
