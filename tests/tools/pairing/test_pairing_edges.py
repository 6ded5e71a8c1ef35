"""Edges of the pairing check (module-level bindings in blocks: test_kernel_package.py): relative
imports resolved to module-qualified names, compiled and single-file and namespace sgl_kernel_npu layouts, files that
vanish mid-check, the handlers that guard an import, the cache of a file's imports, and which
imports a family needs."""

from __future__ import annotations

import os
from importlib.machinery import BYTECODE_SUFFIXES, EXTENSION_SUFFIXES

import pytest

from sglang_ascend_hybrid import installed_source
from sglang_ascend_hybrid.tools import pairing
from sglang_ascend_hybrid.tools.pairing import parsing, sources
from tests.tools.pairing.helpers import INSTALL_TAIL, fake_sglang, write_kernel_tree


def records(tmp_path, sglang_source: str, kernel_files: dict[str, str]):
    """The records of one fake SGLang file ``sglang_source`` against a fake sgl_kernel_npu made
    of ``kernel_files`` (path below the kernel root -> text)."""
    sg = fake_sglang(tmp_path, {"srt/m.py": sglang_source})
    root = tmp_path / "k"
    for rel, text in kernel_files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return pairing.check(str(sg), [str(root)]).records


# --------------------------------------------------------------------------- relative imports, qualified

def test_relative_imports_are_resolved_against_the_module_or_package(tmp_path):
    recs = records(tmp_path,
                   "from sgl_kernel_npu.fla.mod import f\n"
                   "from sgl_kernel_npu.a.b.mod import g\n"
                   "from sgl_kernel_npu import h\n"
                   "from sgl_kernel_npu.fla import k\n",
                   {"sgl_kernel_npu/__init__.py": "from .impl import h\n",
                    "sgl_kernel_npu/fla/__init__.py": "from ._k import k\n",
                    "sgl_kernel_npu/fla/mod.py": "from ._impl import f\n",
                    "sgl_kernel_npu/a/__init__.py": "",
                    "sgl_kernel_npu/a/b/__init__.py": "",
                    "sgl_kernel_npu/a/b/mod.py": "from ..x import g\n"})
    assert [(r.state, r.detail) for r in recs] == [
        (pairing.OK, "sgl_kernel_npu.fla.mod:f bound from sgl_kernel_npu.fla._impl:f"),  # a module: its package
        (pairing.OK, "sgl_kernel_npu.a.b.mod:g bound from sgl_kernel_npu.a.x:g"),  # two dots: one package up
        (pairing.OK, "sgl_kernel_npu:h bound from sgl_kernel_npu.impl:h"),  # the top package's __init__: itself
        (pairing.OK, "sgl_kernel_npu.fla:k bound from sgl_kernel_npu.fla._k:k"),
    ]


# --------------------------------------------------------------------------- where sgl_kernel_npu and its modules are

@pytest.mark.parametrize("suffix", [EXTENSION_SUFFIXES[0], BYTECODE_SUFFIXES[0]])
def test_a_compiled_submodule_is_unverifiable_whatever_its_bytes(tmp_path, suffix):
    # bytes that happen to parse as Python must not be read as the module's source
    recs = records(tmp_path, "from sgl_kernel_npu.mod import f\n",
                   {"sgl_kernel_npu/__init__.py": "", "sgl_kernel_npu/mod" + suffix: "f = 1\n"})
    assert [(r.state, r.detail, r.path) for r in recs] == [
        (pairing.UNVERIFIABLE, "sgl_kernel_npu.mod is a compiled module: present, sgl_kernel_npu.mod:f unverifiable",
         str(tmp_path / "k" / "sgl_kernel_npu" / ("mod" + suffix)))]


def test_a_single_file_sgl_kernel_npu_is_installed_and_read(tmp_path):
    sg = fake_sglang(tmp_path, {"srt/m.py": "from sgl_kernel_npu import f, g\n"})
    root = tmp_path / "k"
    root.mkdir()
    (root / "sgl_kernel_npu.py").write_text("def f():\n    pass\n")
    report = pairing.check(str(sg), [str(root)])
    assert report.installed and report.kernel_origin == str(root / "sgl_kernel_npu.py")
    assert [(r.imp.what, r.state, r.detail) for r in report.records] == [
        ("sgl_kernel_npu:f", pairing.OK, "sgl_kernel_npu:f defined in sgl_kernel_npu"),
        ("sgl_kernel_npu:g", pairing.MISSING_SYMBOL, "sgl_kernel_npu does not define sgl_kernel_npu:g")]


def test_a_namespace_sgl_kernel_npu_finds_its_submodules(tmp_path):
    sg = fake_sglang(tmp_path, {"srt/m.py": "from sgl_kernel_npu.fla.chunk import a\n"
                                            "from sgl_kernel_npu import fla\n"
                                            "from sgl_kernel_npu import gone\n"
                                            "import sgl_kernel_npu.fla\n"})
    root = tmp_path / "k"
    (root / "sgl_kernel_npu" / "fla").mkdir(parents=True)  # no __init__.py anywhere
    (root / "sgl_kernel_npu" / "fla" / "chunk.py").write_text("a = 1\n")
    report = pairing.check(str(sg), [str(root)])
    assert report.installed and report.kernel_origin == str(root / "sgl_kernel_npu")
    assert [(r.imp.what, r.state, r.detail) for r in report.records] == [
        ("sgl_kernel_npu.fla.chunk:a", pairing.OK, "sgl_kernel_npu.fla.chunk:a defined in sgl_kernel_npu.fla.chunk"),
        ("sgl_kernel_npu:fla", pairing.OK, "sgl_kernel_npu:fla is the submodule sgl_kernel_npu.fla"),
        ("sgl_kernel_npu:gone", pairing.MISSING_SYMBOL, "sgl_kernel_npu is a namespace package without "
                                                        "sgl_kernel_npu:gone"),
        ("sgl_kernel_npu.fla", pairing.OK, "module sgl_kernel_npu.fla present")]


def test_a_subpackage_names_its_submodule(tmp_path):
    recs = records(tmp_path, "from sgl_kernel_npu.ns import sub\nfrom sgl_kernel_npu.ns import nope\n"
                             "from sgl_kernel_npu import ns\n",
                   {"sgl_kernel_npu/__init__.py": "", "sgl_kernel_npu/ns/sub.py": ""})
    assert [(r.state, r.detail) for r in recs] == [
        (pairing.OK, "sgl_kernel_npu.ns:sub is the submodule sgl_kernel_npu.ns.sub"),  # ns: a namespace package
        (pairing.MISSING_SYMBOL, "sgl_kernel_npu.ns is a namespace package without sgl_kernel_npu.ns:nope"),
        (pairing.OK, "sgl_kernel_npu:ns is the submodule sgl_kernel_npu.ns")]  # sgl_kernel_npu: a package


def test_a_missing_module_says_where_it_was_looked_for(tmp_path):
    recs = records(tmp_path, "from sgl_kernel_npu.gone import f\n", {"sgl_kernel_npu/__init__.py": ""})
    init = tmp_path / "k" / "sgl_kernel_npu" / "__init__.py"
    assert [(r.state, r.detail, r.path) for r in recs] == [
        (pairing.MISSING_MODULE, f"no file for sgl_kernel_npu.gone in {init}", None)]


def test_a_module_that_vanishes_before_it_is_read_is_unverifiable(tmp_path, monkeypatch):
    real = installed_source.derived

    def derived(path, what, compute):  # the module is removed between locating it and reading it
        if what == "names":
            os.remove(path)
        return real(path, what, compute)

    monkeypatch.setattr(installed_source, "derived", derived)
    recs = records(tmp_path, "from sgl_kernel_npu.mod import f\n",
                   {"sgl_kernel_npu/__init__.py": "", "sgl_kernel_npu/mod.py": "f = 1\n"})
    assert [(r.state, r.detail) for r in recs] == [
        (pairing.UNVERIFIABLE, "its source cannot be read (cannot be read (FileNotFoundError: No such file or "
                               "directory)): sgl_kernel_npu.mod:f may be provided at import")]


def test_a_symlink_whose_target_cannot_be_read_back_says_so(tmp_path, monkeypatch):
    link = tmp_path / "link.py"
    link.symlink_to(tmp_path / "nowhere.py")

    def readlink(path, *args, **kwargs):  # the link is replaced between the check and the readlink
        raise FileNotFoundError(2, "No such file or directory", str(path))

    monkeypatch.setattr(os, "readlink", readlink)
    reason = parsing._os_reason(str(link), FileNotFoundError(2, "No such file or directory"))
    assert reason == ("a symlink to an unreadable target that cannot be followed "
                      "(FileNotFoundError: No such file or directory)")


# --------------------------------------------------------------------------- guarded imports

@pytest.mark.parametrize("handler, guarded", [
    ("except ImportError:\n    pass\n", True),
    ("except ModuleNotFoundError:\n    pass\n", True),
    ("except Exception:\n    pass\n", True),
    ("except BaseException:\n    pass\n", True),
    ("except:\n    pass\n", True),
    ("except (ValueError, ModuleNotFoundError):\n    pass\n", True),
    ("except ValueError:\n    pass\n", False),  # an ImportError goes through
    ("except (ValueError, KeyError):\n    pass\n", False),
    ("finally:\n    pass\n", False),
])
def test_which_handlers_guard_an_import(tmp_path, handler, guarded):
    sg = fake_sglang(tmp_path, {"srt/m.py": "try:\n    from sgl_kernel_npu.fla.chunk import a\n" + handler})
    assert [(i.what, i.guarded) for i in pairing.scan_sglang(str(sg))] == [("sgl_kernel_npu.fla.chunk:a", guarded)]


# --------------------------------------------------------------------------- the cache of a file's imports

def test_a_files_imports_carry_the_release_scanned_now(tmp_path):
    sg = fake_sglang(tmp_path, {"srt/m.py": "from sgl_kernel_npu.fla.chunk import a\n"})
    assert [i.release for i in pairing.scan_sglang(str(sg))] == ["SGLang"]
    dist = sg.parent / "sglang-9.9.9.dist-info"  # the release installed beside it, the file unchanged
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 9.9.9\n")
    pairing.release_label.cache_clear()
    try:
        assert [i.release for i in pairing.scan_sglang(str(sg))] == ["SGLang 9.9.9"]
    finally:
        pairing.release_label.cache_clear()


# --------------------------------------------------------------------------- what a family needs

def test_not_installed_counts_the_familys_unguarded_imports_only():
    ki = pairing.KernelImport
    needed = ki(pairing.GDN_TRITON, 3, "sgl_kernel_npu.fla.chunk", "a")
    report = pairing.PairingReport("/nowhere/sglang", None, (), (
        ki(pairing.GDN_TRITON, 1, "sgl_kernel_npu.opt", "o", guarded=True),  # SGLang copes without it
        ki("sglang/srt/models/other.py", 2, "sgl_kernel_npu.norm", "n"),  # not a gdn file
        needed))
    assert pairing.family_problems("gdn", report) == [pairing.not_installed_message([needed])]
    assert pairing.family_problems("short_conv", report) == []


def test_family_problems_checks_the_familys_files_by_path(tmp_path, monkeypatch, kernel_path):
    # the family's files are looked up where they are, even below a symlinked directory that a walk
    # of the whole tree does not enter
    sg = fake_sglang(tmp_path, {"srt/layers/attention/linear/__init__.py": ""})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "gdn_triton.py").write_text("from sgl_kernel_npu.fla.gone import f\n")
    (sg / "srt" / "layers" / "attention" / "linear" / "kernels").symlink_to(elsewhere, target_is_directory=True)
    monkeypatch.setattr(sources, "SGLANG_DIR", str(sg))
    kernel_path(write_kernel_tree(tmp_path / "k", []))
    gone = "sgl_kernel_npu.fla.gone"
    assert pairing.family_problems("gdn") == [
        f"sgl-kernel-npu pairing: SGLang's {pairing.GDN_TRITON}:1 imports f from {gone}, but the installed "
        f"sgl_kernel_npu has no module {gone}: install an sgl-kernel-npu build that provides {gone}{INSTALL_TAIL}"]
