"""The CLI answers ``--help`` and argument errors without importing torch or SGLang.

Each case runs the real entry (``python -X importtime -m sglang_ascend_hybrid.cli ...``) in a
fresh interpreter and reads the modules it imported from ``-X importtime``'s report on stderr: a
property of the imports, not a timing (``benchmarks/bench_startup.py`` measures the time).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import pytest

HEAVY = ("torch", "sglang", "numpy", "transformers", "triton")
IMPORT_LINE = re.compile(r"^import time:\s+\d+\s+\|\s+\d+\s+\|\s+(?P<name>\S+)\s*$")


def run_cli(*argv, env_extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_ASCEND_HYBRID_")}
    env.update(TORCH_DEVICE_BACKEND_AUTOLOAD="0", HF_HUB_OFFLINE="1", **(env_extra or {}))
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "sglang_ascend_hybrid.cli", *argv],
                          capture_output=True, text=True, env=env, timeout=300)
    imported, other = set(), []
    for line in proc.stderr.splitlines():
        m = IMPORT_LINE.match(line)
        if m:
            imported.add(m.group("name").strip())
        elif not line.startswith("import time:"):
            other.append(line)
    return proc, imported, "\n".join(other)


def heavy(imported: set[str]) -> list[str]:
    return sorted(m for m in imported if m.split(".")[0] in HEAVY)


def test_the_import_report_is_read():
    """The parser of ``-X importtime`` lines sees the plugin's own modules (else the checks below
    would pass on an empty set)."""
    _, imported, _ = run_cli("--help")
    assert {"argparse", "sglang_ascend_hybrid"} <= imported, sorted(imported)


@pytest.mark.parametrize("argv", [
    ["--help"], ["doctor", "--help"], ["plan", "--help"], ["selftest", "--help"],
], ids=["help", "doctor-help", "plan-help", "selftest-help"])
def test_help_imports_no_torch_or_sglang(argv):
    proc, imported, err = run_cli(*argv)
    assert proc.returncode == 0, err
    assert proc.stdout.startswith("usage: sglang-ascend-hybrid"), proc.stdout
    assert heavy(imported) == [], heavy(imported)


@pytest.mark.parametrize("argv,needle", [
    ([], "the following arguments are required: command"),
    (["nosuchcommand"], "invalid choice: 'nosuchcommand'"),
    (["plan"], "the following arguments are required: --config"),
    (["plan", "--config", "x", "--tp", "two"], "argument --tp: invalid int value: 'two'"),
    (["selftest", "--device", "tpu"], "argument --device: invalid choice: 'tpu'"),
], ids=["no-command", "unknown-command", "plan-no-config", "plan-bad-tp", "selftest-bad-device"])
def test_argument_errors_import_no_torch_or_sglang(argv, needle):
    proc, imported, err = run_cli(*argv)
    assert proc.returncode == 2, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("sglang-ascend-hybrid"), err  # argparse names the program (and subcommand)
    assert needle in last, err
    assert heavy(imported) == [], heavy(imported)


def test_invalid_setting_stops_selftest_before_torch_is_imported():
    proc, imported, err = run_cli("selftest", env_extra={"SGLANG_ASCEND_HYBRID_GDN_BACKEND": "bogus"})
    assert proc.returncode == 2, err
    assert err.strip().startswith("sglang-ascend-hybrid selftest: error: "), err
    assert heavy(imported) == [], heavy(imported)


@pytest.mark.skipif(importlib.util.find_spec("torch_npu") is not None, reason="torch_npu installed here")
def test_selftest_still_imports_what_it_needs():
    """The counter-case: a command that runs really imports torch (so the reader sees it)."""
    proc, imported, err = run_cli("selftest", "--device", "npu")
    assert proc.returncode == 2, err
    assert "torch" in imported
    assert err.strip().splitlines()[-1].startswith("sglang-ascend-hybrid selftest: error: --device npu: "), err


@pytest.mark.parametrize("columns", ["50", "200", "0", "wide"])
def test_help_is_what_stock_argparse_prints(monkeypatch, columns):
    """The parser reads the terminal width itself (so that --help does not import shutil), with
    shutil.get_terminal_size's answer: the help equals stock argparse's for every $COLUMNS."""
    import argparse

    from sglang_ascend_hybrid import cli

    monkeypatch.setenv("COLUMNS", columns)
    ours, stock = cli.build_parser(), cli.build_parser()
    for parser in (stock, *stock._subparsers._group_actions[0].choices.values()):
        parser.formatter_class = argparse.HelpFormatter
    plan = [p._subparsers._group_actions[0].choices["plan"] for p in (ours, stock)]
    assert type(plan[0]._get_formatter()) is cli._HelpFormatter
    assert type(plan[1]._get_formatter()) is argparse.HelpFormatter
    assert ours.format_help() == stock.format_help()
    assert plan[0].format_help() == plan[1].format_help()
    assert plan[0].format_usage() == plan[1].format_usage()
