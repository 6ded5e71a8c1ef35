"""doctor's collection and rendering called in-process (the CLI tests run it as a subprocess, where a
mutation test cannot see it): the pairing rows and their counts, the probe section, a patch's state,
the report's tables and the --report arguments reaching the plan."""

from __future__ import annotations

import argparse
import io
from pathlib import Path
from types import SimpleNamespace as NS

import pytest

from sglang_ascend_hybrid import patches
from sglang_ascend_hybrid.tools import doctor, doctor_report
from tests.e2e.plugin_install import sglang_plugin_state_restored

CONFIG = Path(__file__).resolve().parents[2] / "examples" / "configs" / "qwen3_6-27b"


@pytest.fixture(scope="module")
def info():
    """What ``doctor.collect()`` gathers; it loads the plugin in this process the way SGLang does, so
    everything that changes is put back afterwards (later tests in this worker see unpatched SGLang)."""
    with sglang_plugin_state_restored():
        return doctor.collect()


def _text(render, *args) -> str:
    out = io.StringIO()
    render(*args, out.write)
    return out.getvalue()


# ------------------------------------------------------------------ pairing


def _row(state, what, line, families=(), lazy=False, guarded=False, message="", path="", detail=""):
    return {"state": state, "import": what, "file": "sglang/srt/x.py", "line": line, "families": list(families),
            "lazy": lazy, "guarded": guarded, "detail": detail, "path": path, "message": message}


def test_the_pairing_section_counts_each_state_and_writes_one_line_per_import():
    data = {"installed": True, "origin": "/site/sgl_kernel_npu", "skipped": [{"file": "a.py", "reason": "bad"}],
            "rows": [_row("present", "m:a", 3, families=["gdn"], lazy=True), _row("present", "m:b", 4),
                     _row("missing", "m:c", 5, guarded=True, message="m.c lacks c"),
                     _row("unverifiable", "m:d", 6, path="/site/m.py", detail="unparsable")]}
    text = _text(doctor.render_pairing, data)
    assert "  sgl_kernel_npu at /site/sgl_kernel_npu: 4 imports, 2 present, 1 missing, 1 unverifiable; " \
           "1 SGLang files skipped\n" in text
    assert "  skipped        a.py: bad (its sgl_kernel_npu imports are not checked)\n" in text
    assert "  present        m:a  <- sglang/srt/x.py:3  [needed by gdn; in a function]\n" in text
    assert "  missing        m:c  <- sglang/srt/x.py:5  [optional: SGLang catches the ImportError]\n" \
           "      m.c lacks c\n" in text
    assert "  unverifiable   m:d  <- sglang/srt/x.py:6\n      /site/m.py: unparsable\n" in text


def test_the_pairing_section_without_sgl_kernel_npu_or_with_an_error():
    text = _text(doctor.render_pairing, {"installed": False, "imports": 7, "files": 3, "skipped": []})
    assert "(SGLang imports it 7 times in 3 files)" in text
    assert "could not be checked (E: x)" in _text(doctor.render_pairing, {"error": "E: x"})


class _Record(NS):
    __hash__ = object.__hash__


def test_collect_pairing_turns_each_record_into_a_row(monkeypatch):
    from sglang_ascend_hybrid.tools import pairing

    imp = NS(what="mod:f", file="sglang/srt/layers/attention/linear/kernels/gdn_triton.py", line=9, lazy=True,
             guarded=False)
    rec = _Record(state="missing", imp=imp, detail="d", path="p", missing=True)
    report = NS(installed=True, kernel_origin="/k", records=[rec], imports=[imp],
                skipped=[NS(file="s.py", reason="r")])
    monkeypatch.setattr(pairing, "check", lambda: report)
    monkeypatch.setattr(pairing, "message_of_each", lambda records: {rec: "the message"})
    data = doctor.collect_pairing()
    assert data == {"installed": True, "origin": "/k", "skipped": [{"file": "s.py", "reason": "r"}], "rows": [
        {"state": "missing", "import": "mod:f", "file": imp.file, "line": 9,
         "families": list(pairing.families_needing(imp.file)), "lazy": True, "guarded": False, "detail": "d",
         "path": "p", "message": "the message"}]}
    monkeypatch.setattr(pairing, "check", lambda: NS(installed=False, imports=[imp, imp], records=[], skipped=[]))
    assert doctor.collect_pairing() == {"installed": False, "imports": 2, "files": 1, "skipped": []}
    monkeypatch.setattr(pairing, "check", lambda: 1 / 0)
    assert doctor.collect_pairing() == {"error": "ZeroDivisionError: division by zero"}


def test_the_reports_pairing_line_names_at_most_eight_skipped_files():
    skipped = [{"file": f"f{i}.py", "reason": "r"} for i in range(10)]
    line = doctor_report._pairing_line({"installed": False, "imports": 2, "skipped": skipped})
    assert line.endswith("; 10 SGLang files skipped (unreadable): " + ", ".join(f"f{i}.py" for i in range(8)))


# ------------------------------------------------------------------ probes and patches


def test_the_probe_section_says_the_note_each_verdict_its_meaning_and_detail():
    data = {"note": "not probed here", "verdicts": [
        {"probe": "p", "signature": "s", "verdict": "key_first", "meaning": "reads transposed", "detail": "why"}]}
    assert _text(doctor.render_probes, data).endswith(
        "  not probed here\n  p s: key_first -> reads transposed\n      why\n")
    assert "  could not run: Boom\n" in _text(doctor.render_probes, {"error": "Boom"})


def test_a_patch_state_is_the_recorded_one_else_what_the_patch_is_on_this_release():
    p = patches.PATCHES[0]
    recorded = doctor._patch_state(p, NS(patches={p.name: NS(state="applied", reason="ok")}))
    assert (recorded["state"], recorded["reason"], recorded["name"]) == ("applied", "ok", p.name)
    unrecorded = doctor._patch_state(p, NS(patches={}))
    on_release = patches.release_state(p)
    assert (unrecorded["state"], unrecorded["reason"]) == (on_release if on_release else ("not attempted", ""))


# ------------------------------------------------------------------ the report


def test_the_report_tables_hold_each_kernel_the_probe_note_and_verdict_meanings(info):
    data = dict(info)
    data["kernels"] = {"kernels": [{"kernel": "k_here", "present": True, "variant": "v1", "used_by": ["a", "b"]},
                                   {"kernel": "k_gone", "present": False, "variant": "-", "used_by": []}]}
    data["probes"] = {"note": "the note", "verdicts": [{"probe": "p", "signature": "s", "verdict": "ok",
                                                        "meaning": "it means", "detail": ""}]}
    text = _text(lambda w: doctor_report.render_report(data, w))
    assert "| k_here | yes | v1 | a, b |" in text and "| k_gone | no | - | - |" in text
    assert "\nthe note\n\n| probe | signature | verdict | meaning |" in text
    assert "| p | s | ok | it means |" in text


def test_doctor_report_takes_the_model_path_and_tp_into_the_plan(info, monkeypatch, capsys):
    monkeypatch.setattr(doctor, "collect", lambda: info)
    args = argparse.Namespace(report=True, model_path=str(CONFIG), tp=8)
    assert doctor.main(args) == (2 if info["setting_problems"] else 0)
    out = capsys.readouterr().out
    assert "**Plan** of `qwen3_6-27b` at TP=8" in out
    args = argparse.Namespace(report=False, model_path=None, tp=1)
    assert doctor.main(args) == (2 if info["setting_problems"] else 0)
    assert "doctor\n\nVersions\n" in capsys.readouterr().out


def test_report_is_a_switch_on_the_command_line():
    from sglang_ascend_hybrid import cli

    args = cli.build_parser().parse_args(["doctor", "--report", "--tp", "2"])
    assert args.report is True and args.tp == 2
    assert cli.build_parser().parse_args(["doctor"]).report is False


def test_plan_help_says_what_it_plans_and_what_config_takes(capsys):
    from sglang_ascend_hybrid import cli

    parser = cli.build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["--help"])
    assert "what the plugin will run for a model config, per TP size" in " ".join(capsys.readouterr().out.split())
    with pytest.raises(SystemExit):
        parser.parse_args(["plan", "--help"])
    assert "a Hugging Face config.json, or a directory holding one" in " ".join(capsys.readouterr().out.split())


def test_the_report_says_unset_for_a_kernel_variable_not_set(info, monkeypatch):
    for name in doctor_report.KERNEL_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(doctor_report.KERNEL_ENV[0], "1")
    text = _text(lambda w: doctor_report.render_report(dict(info), w))
    assert f"| {doctor_report.KERNEL_ENV[0]} | 1 |" in text
    for name in doctor_report.KERNEL_ENV[1:]:
        assert f"| {name} | unset |" in text, name
