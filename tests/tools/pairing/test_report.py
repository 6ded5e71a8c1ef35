"""The pairing check (sglang_ascend_hybrid.tools.pairing.report): the state of each import against
fake sgl_kernel_npu trees built in tmp_path, sgl_kernel_npu not installed, and the one name in two
modules told apart by module-qualified names."""

from __future__ import annotations

from pathlib import Path

from sglang_ascend_hybrid.patches.releases import installed_version
from sglang_ascend_hybrid.tools import doctor, pairing
from sglang_ascend_hybrid.tools.pairing import sources
from tests.tools.pairing.helpers import (
    INSTALL_TAIL,
    decode_kernel_import,
    expected_missing_module,
    fake_sglang,
    family_imports,
    render_pairing,
    states,
    write_kernel_tree,
)


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



def test_not_installed_is_reported_once(tmp_path, kernel_path):
    kernel_path(tmp_path)  # no sgl_kernel_npu there
    report = pairing.check()
    assert not report.installed and report.records == () and len(report.imports) > 10
    problems = pairing.family_problems("gdn")
    files = sorted({i.file for i in family_imports("gdn")})
    assert problems == [pairing.not_installed_message(family_imports("gdn"))]
    assert problems[0].startswith(f"sgl-kernel-npu pairing: {pairing.NOT_INSTALLED} (SGLang "
                                  f"{installed_version('sglang')}'s {files[0]}, ")



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
    monkeypatch.setattr(sources, "SGLANG_DIR", str(sg))
    kernel_path(root)
    rows = doctor.collect_pairing()["rows"]
    assert [(r["import"], r["state"]) for r in rows] == [(r.imp.what, r.state) for r in report.records]
    text = render_pairing()
    assert f"  missing symbol {CHUNK}:{CLASH}  <- sglang/srt/gdn.py:1\n" in text
    assert f"  ok             {WRAPPER}:{CLASH}  <- sglang/srt/gdn.py:2\n" in text


def test_unverifiable_rows_name_the_symbol_by_module(tmp_path, monkeypatch, kernel_path):
    sg, root = clash_trees(tmp_path, chunk="from ._impl import *\n")
    monkeypatch.setattr(sources, "SGLANG_DIR", str(sg))
    kernel_path(root)
    assert (f"      {root / 'sgl_kernel_npu' / 'fla' / 'chunk.py'}: it star-imports from ._impl: {CHUNK}:{CLASH} "
            "may be provided at import\n") in render_pairing()
