"""The pairing check's messages (sglang_ascend_hybrid.tools.pairing.message_lines): the exact line
for SGLang's PR #740 decode module, one message per statement, what message() refuses."""

from __future__ import annotations

import pytest

from sglang_ascend_hybrid.tools import pairing
from tests.tools.pairing.helpers import (
    DECODE_OPTIMIZED,
    decode_kernel_import,
    expected_missing_module,
    family_imports,
    states,
    write_kernel_tree,
)


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
