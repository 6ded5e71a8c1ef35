"""Doctor's "sgl-kernel-npu pairing" section (sglang_ascend_hybrid.tools.doctor), from the pairing
check's report: each import's state, not installed, the skipped files, a check that fails."""

from __future__ import annotations

import io

from sglang_ascend_hybrid.tools import doctor, pairing
from sglang_ascend_hybrid.tools.pairing import sources
from tests.tools.pairing.helpers import (
    decode_kernel_import,
    expected_missing_module,
    fake_sglang,
    one_kernel,
    render_pairing,
    write_kernel_tree,
)


def test_doctor_lists_the_skipped_files(tmp_path, monkeypatch, kernel_path):
    sg = fake_sglang(tmp_path, {"srt/a.py": "from sgl_kernel_npu.fla.chunk import a\n"})
    (sg / "srt" / "dangling.py").symlink_to(tmp_path / "nowhere.py")
    monkeypatch.setattr(sources, "SGLANG_DIR", str(sg))
    reason = pairing.check().skipped[0].reason
    skipped_line = f"  skipped        sglang/srt/dangling.py: {reason} (its sgl_kernel_npu imports are not checked)"
    kernel_path(tmp_path / "none")
    assert render_pairing().splitlines()[2:] == [
        f"  {pairing.NOT_INSTALLED} (SGLang imports it 1 times in 1 files)", skipped_line]
    kernel_path(root := one_kernel(tmp_path))
    assert render_pairing().splitlines()[2:] == [
        f"  sgl_kernel_npu at {root / 'sgl_kernel_npu' / '__init__.py'}: 1 imports, 1 ok; 1 SGLang files skipped",
        skipped_line, "  ok             sgl_kernel_npu.fla.chunk:a  <- sglang/srt/a.py:1"]



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
    # doctor calls the package's check (pairing.check), so that is the name replaced here
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
