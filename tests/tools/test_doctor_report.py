"""``sglang-ascend-hybrid doctor --report``: one pasteable Markdown block with every patch, every
kernel, the probe verdicts, the settings in force and the model's plan; nothing secret."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from sglang_ascend_hybrid import envs, patches
from sglang_ascend_hybrid.patches.releases import installed_version
from sglang_ascend_hybrid.tools import doctor_report, kernel_report
from tests.tools.test_doctor_cli import run_cli

CONFIG = Path(__file__).resolve().parents[2] / "examples" / "configs" / "qwen3_6-27b"
SECRET = "hf_do_not_print_me_4242"


# The report's sections are checked in the base release only (CI time): doctor itself, with this release's
# versions, patches and pairing, runs on every release in test_doctor_cli.py.
pytestmark = pytest.mark.base_release_only


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


# ------------------------------------------------------------------ a bad --model-path: its last component only


def unreadable_config(tmp_path: Path) -> Path:
    """A model directory whose config.json cannot be read: chmod 000 where that stops the reader
    (not as root, which CI runs as), else a config.json that is not JSON."""
    model = tmp_path / "private-dir" / "unreadable-model"
    model.mkdir(parents=True)
    (model / "config.json").write_text('{"model_type": "qwen3_5",')
    if os.geteuid() != 0:
        (model / "config.json").write_text('{"model_type": "qwen3_5"}')
        (model / "config.json").chmod(0)
    return model


def test_a_missing_model_dir_is_named_by_its_last_component(tmp_path):
    missing = tmp_path / "private-dir" / "no-such-model"
    proc = run_cli("doctor", "--report", "--model-path", str(missing))
    assert proc.returncode == 0, proc.stderr[-3000:]
    plan_block = proc.stdout.split("**Plan** of `no-such-model` at TP=1\n\n```\n", 1)[1].split("```", 1)[0]
    assert plan_block == "plan: error: no config.json at no-such-model\n"
    assert str(tmp_path) not in proc.stdout and "private-dir" not in proc.stdout


@pytest.mark.parametrize("make, expected", [
    (unreadable_config, ("plan: error: cannot read unreadable-model/config.json: Permission denied\n"
                         if os.geteuid() != 0 else
                         "plan: error: unreadable-model/config.json is not valid JSON: Expecting property name "
                         "enclosed in double quotes: line 1 column 26 (char 25)\n")),
    # config.json that is a directory: no file to read
    (lambda tmp: (tmp / "private-dir" / "unreadable-model" / "config.json").mkdir(parents=True)
     or tmp / "private-dir" / "unreadable-model", "plan: error: no config.json at unreadable-model\n"),
])
def test_an_unreadable_config_is_named_by_the_model_dirs_last_component(tmp_path, monkeypatch, make, expected):
    model = make(tmp_path)
    info = dict(versions={"sglang-ascend-hybrid": "x"}, release="r", summary="s", patches=[], kernels={},
                device_ops={}, probes={}, pairing={}, settings={}, load_errors=[], setting_problems=[])
    for given in (str(model), os.path.relpath(model), str(model) + "/", str(model / "config.json")):
        out = io.StringIO()
        doctor_report.render_report(info, out.write, given, 2)
        text = out.getvalue()
        assert str(tmp_path) not in text and "private-dir" not in text, given
        if not given.endswith(("config.json", "/")):  # as given: "dir/" reads "unreadable-model/"
            assert text.endswith(f"**Plan** of `unreadable-model` at TP=2\n\n```\n{expected}```\n"), given
    monkeypatch.chdir(model)  # "." is the directory's name too
    out = io.StringIO()
    doctor_report.render_report(info, out.write, ".", 2)
    assert "**Plan** of `unreadable-model` at TP=2" in out.getvalue() and str(tmp_path) not in out.getvalue()


def test_device_ops_are_reported_by_module_qualified_name():
    """sgl-kernel-npu has a chunk_gated_delta_rule_npu in fla.chunk (the entry the plugin hooks) and, since its
    PR #747, in fla.chunk_gated_delta_rule_npu (a wrapper of torch.ops.npu.chunk_gated_delta_rule)."""
    from sglang_ascend_hybrid.tools import doctor

    ops = {"sgl_kernel_npu.fla.chunk:chunk_gated_delta_rule_npu": True,
           "sgl_kernel_npu.fla.chunk_gated_delta_rule_npu:chunk_gated_delta_rule_npu": False,
           "chunk_gated_delta_rule": False}
    info = dict(versions={"sglang-ascend-hybrid": "x"}, release="r", summary="s", patches=[], kernels={},
                device_ops=ops, probes={}, pairing={}, settings={}, load_errors=[], setting_problems=[])
    out = io.StringIO()
    doctor_report.render_report(info, out.write)
    assert ("**Device ops through the seam**: `sgl_kernel_npu.fla.chunk:chunk_gated_delta_rule_npu` present, "
            "`sgl_kernel_npu.fla.chunk_gated_delta_rule_npu:chunk_gated_delta_rule_npu` absent, "
            "`torch.ops.npu.chunk_gated_delta_rule` absent\n") in out.getvalue()
    out = io.StringIO()
    doctor.render(info, out)
    lines = [ln.split() for ln in out.getvalue().split("Device ops (through the plugin's seam)\n", 1)[1]
             .split("\n\n", 1)[0].splitlines()]
    assert lines == [["sgl_kernel_npu.fla.chunk:chunk_gated_delta_rule_npu", "present"],
                     ["sgl_kernel_npu.fla.chunk_gated_delta_rule_npu:chunk_gated_delta_rule_npu", "absent"],
                     ["torch.ops.npu.chunk_gated_delta_rule", "absent"]]


def test_the_pairing_line_lists_skipped_files_without_their_reasons():
    line = doctor_report._pairing_line({"installed": True, "rows": [
        {"state": "missing symbol", "import": "sgl_kernel_npu.fla.chunk:chunk_gated_delta_rule_npu"}],
        "skipped": [{"file": "sglang/srt/x.py", "reason": "a symlink to /home/op/secret that cannot be followed"}]})
    assert line == ("1 imports: 1 missing symbol; not found: sgl_kernel_npu.fla.chunk:chunk_gated_delta_rule_npu; "
                    "1 SGLang files skipped (unreadable): sglang/srt/x.py")
