"""doctor's kernel report: installed variants and the rung each family's shapes take, asked of the
runtime ladders (so the report follows the emulated machine)."""

from __future__ import annotations

import io

import pytest

from sglang_ascend_hybrid.emulators import causal_conv1d as conv_emu
from sglang_ascend_hybrid.emulators import gdn_sets
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.gdn import contract as caps
from sglang_ascend_hybrid.tools import kernel_report


def _row(info, family, tp):
    return next(r for r in info["families"] if r["family"].startswith(family) and r["tp"] == tp)


def test_cpu_machine_reports_everything_absent_and_torch_rungs():
    info = kernel_report.report()
    assert not any(k["present"] for k in info["kernels"])
    assert all(set(r["rungs"].values()) == {"torch"} for r in info["families"])


def test_a3_with_the_post3_mega_kernel():
    ops = {**gdn_sets.emulators(chip="A3", mega_variant=caps.MEGA_POST3), **conv_emu.emulators()}
    with seam.install_device_facts(chip="A3", sgl_kernel_npu_version="2026.05.01"), seam.install_emulators(ops):
        info = kernel_report.report()
        out = io.StringIO()
        kernel_report.render(info, out.write)
    mega = next(k for k in info["kernels"] if "mega" in k["kernel"])
    assert mega["present"] and mega["variant"].startswith("post3 head set")
    row = _row(info, "Qwen3.6-27B", 8)  # (6, 2)
    assert row["layout"] == "(6, 2) D=128"
    assert row["rungs"]["prefill (bf16 pool)"] == "npu_chunk"
    assert row["rungs"]["prefill (fp32 pool)"] == "torch"       # no Triton entry installed here
    assert row["rungs"]["verify (bf16 pool)"] == "npu_recurrent"
    assert row["rungs"]["verify (fp32 pool)"] == "torch"
    # SGLang's plain decode step (the serving decode ladder): no Triton decode entry installed here,
    # the recurrent op takes bf16 pools only
    assert row["rungs"]["decode (bf16 pool)"] == "npu_recurrent"
    assert row["rungs"]["decode (fp32 pool)"] == "torch"
    conv = _row(info, "LFM2", 1)
    assert conv["rungs"]["decode (fp16)"] == "npu_v2"   # the emulated machine has the unmerged v2 ops too
    # speculative verify of LFM2's width-3 conv: the aclnn op's speculative mode takes width 4 only
    assert conv["rungs"]["verify (bf16)"] == "torch"
    assert conv["rungs"]["verify (fp16)"] == "npu_update_v2"
    assert "chip: A3" in out.getvalue() and "Qwen3.6-27B" in out.getvalue()


def test_ascend_950_without_the_a3_only_ops():
    ops = gdn_sets.emulators(chip="950", npu_chunk=False, mega_variant=caps.MEGA_CURRENT)
    with seam.install_device_facts(chip="950", sgl_kernel_npu_version="2026.6.1"), seam.install_emulators(ops):
        info = kernel_report.report()
    row = _row(info, "Qwen3.5/3.6, Qwen3-Next (32)", 4)  # (8, 4): in the current mega set, but
    # mega_chunk_gdn is an A3-only op too (sgl-kernel-npu f425bdf1 csrc/CMakeLists.txt ~61, ~171-175):
    # no mega kernel on Ascend 950, and without the chunk op or the Triton entry prefill runs on torch
    assert row["rungs"]["prefill (bf16 pool)"] == "torch"
    assert row["rungs"]["prefill (fp32 pool)"] == "torch"
    assert row["rungs"]["verify (bf16 pool)"] == "torch"   # no recurrent op on Ascend 950


def test_the_kernel_rows_are_the_device_ops_the_ladders_call():
    """The report is derived from the ladders: one row per seam op a rung calls, in ladder order,
    naming the rungs that call it; every device rung names its ops, no torch rung does."""
    from sglang_ascend_hybrid.ops import catalog

    called = []
    for ladder in catalog.ladders():
        for rung in ladder.rungs:
            assert bool(rung.ops) == rung.device, (ladder.op, rung.name)
            called += [op for op in rung.ops if op not in called]
    rows = kernel_report.installed_kernels()
    notes = catalog._notes()
    assert [r["kernel"] for r in rows] == [notes[op][0] for op in called]
    by_kernel = {r["kernel"]: r for r in rows}
    assert by_kernel["sgl_kernel_npu run_mega_chunk_gdn"]["used_by"] == ["gdn_prefill:mega"]
    assert by_kernel["torch.ops.npu.recurrent_gated_delta_rule"]["used_by"] == [
        "gdn_serving_decode:npu_recurrent", "gdn_verify:npu_recurrent"]
    assert by_kernel["torch.ops.npu.causal_conv1d"]["used_by"] == [
        "causal_conv1d_fn:npu_aclnn", "causal_conv1d_update:npu_aclnn", "causal_conv1d_verify:npu_aclnn"]


def test_a_rung_op_without_a_contract_note_is_named(monkeypatch):
    from sglang_ascend_hybrid.ops import catalog
    from sglang_ascend_hybrid.ops.ladder import Ladder, Rung

    stray = Ladder("stray_op", [Rung("npu_x", lambda sig: None, lambda: None, device=True, ops=("pkg:new_kernel",)),
                                Rung("torch", lambda sig: None, lambda: None)])
    monkeypatch.setattr(catalog, "ladders", lambda: (stray,))
    with pytest.raises(RuntimeError, match=r"without a note in their contract's KERNEL_NOTES: \['pkg:new_kernel'\]"):
        kernel_report.installed_kernels()
