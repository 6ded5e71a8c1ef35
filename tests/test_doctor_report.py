"""``sglang-ascend-hybrid doctor --report``: one pasteable Markdown block with every patch, every
kernel, the probe verdicts, the settings in force and the model's plan; nothing secret."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from sglang_ascend_hybrid import doctor_report, envs, kernel_report, patches
from sglang_ascend_hybrid.patches.releases import installed_version
from tests.test_doctor_cli import run_cli

CONFIG = Path(__file__).resolve().parents[1] / "examples" / "configs" / "qwen3_6-27b"
SECRET = "hf_do_not_print_me_4242"


@pytest.fixture(scope="module")
def report():
    proc = run_cli("doctor", "--report", "--model-path", str(CONFIG), "--tp", "8",
                   env_extra={"HF_TOKEN": SECRET, "MY_API_KEY": SECRET, "GDN_USE_MEGA_GDN": "1",
                              "SGLANG_ASCEND_HYBRID_GDN_MAX_OVERHEAD": "2.0"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_report_names_versions_chip_and_release(report):
    assert report.startswith("### sglang-ascend-hybrid ")
    assert f"| sglang | {installed_version('sglang')} |" in report
    assert f"| torch | {installed_version('torch')} |" in report
    for row in ("| torch_npu | not found |", "| CANN | not found |", "| sgl-kernel-npu | not found |",
                "| sgl-kernel-npu variant |", "| chip | no NPU / unknown |"):
        assert row in report, row


def test_report_lists_every_patch_and_kernel(report):
    for p in patches.PATCHES:
        assert f"| {p.name} | `{p.target}` |" in report, p.name
    for k in kernel_report.installed_kernels():
        assert f"| {k['kernel']} | {'yes' if k['present'] else 'no'} |" in report, k["kernel"]
    assert "**Probe verdicts**" in report


def test_report_shows_the_settings_in_force_and_nothing_secret(report):
    for var in envs.all_vars():
        assert f"| {var.name} |" in report, var.name
    assert "| SGLANG_ASCEND_HYBRID_GDN_MAX_OVERHEAD | 2.0 |" in report  # set: no "(default)"
    assert "| GDN_USE_MEGA_GDN | 1 |" in report and "| GDN_ATTN_BACKEND_TRITON | unset |" in report
    assert SECRET not in report and "HF_TOKEN" not in report and "MY_API_KEY" not in report
    assert str(CONFIG) not in report  # the model directory's last component only


def test_report_holds_the_plan_of_the_model_at_that_tp(report, monkeypatch):
    plan_block = report.split("**Plan** of `qwen3_6-27b` at TP=8\n\n```\n", 1)[1].split("```", 1)[0]
    # the plan depends on the settings that choose kernels: the report's
    monkeypatch.setenv("GDN_USE_MEGA_GDN", "1")
    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_GDN_MAX_OVERHEAD", "2.0")
    assert plan_block == doctor_report.plan_text(str(CONFIG), 8)
    assert "TP=8" in plan_block and "TP=1 " not in plan_block


def test_a_bad_model_path_is_one_line_in_the_report_not_a_crash(tmp_path):
    text = doctor_report.plan_text(str(tmp_path), 2)
    assert text.startswith("plan: error: ") and text.count("\n") == 1


def test_home_directory_reads_as_tilde(monkeypatch):
    home = os.path.expanduser("~")
    info = dict(versions={"sglang-ascend-hybrid": "x"}, release="r", summary="s", patches=[
        dict(state="failed", name="p", target="t", reason=f"{home}/secret/file.py: boom")],
        kernels={}, device_ops={}, probes={}, pairing={}, settings={}, load_errors=[], setting_problems=[])
    out = io.StringIO()
    doctor_report.render_report(info, out.write)
    assert home not in out.getvalue() and "~/secret/file.py: boom" in out.getvalue()


def test_report_options_are_checked_before_anything_runs():
    bad_tp = run_cli("doctor", "--report", "--tp", "0")
    assert bad_tp.returncode == 2 and bad_tp.stdout == ""
    last = bad_tp.stderr.strip().splitlines()[-1]
    assert last == "sglang-ascend-hybrid doctor: error: --tp 0: expected a positive integer"
    alone = run_cli("doctor", "--model-path", str(CONFIG))
    assert alone.returncode == 2 and alone.stdout == "" and "expected --report" in alone.stderr
