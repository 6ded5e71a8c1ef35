"""Smoke run of benchmarks/bench_startup.py (one repetition, no warm-up): every table and row is
printed, every goal gets a verdict and a summary line, and the JSON holds the same tables; the
numbers of a smoke run mean nothing and are not checked."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

ROWS = {
    "CLI: --help and an argument error vs a bare interpreter":
        ["python -c pass", "cli --help", "cli plan --tp two (usage error)", "cli --help (A/A)"],
    "plan --config examples/configs/qwen3_6-27b": ["python -c pass", "plan", "plan (A/A)"],
    "registration: SGLang's load_plugins() after importing sglang.launch_server":
        ["plugin disabled", "plugin enabled", "plugin enabled, cold target cache", "plugin enabled (A/A)"],
    "doctor (no goal)": ["doctor", "doctor (A/A)"],
}
GOALS = ["--help / bare interpreter", "argument error / bare interpreter", "plan seconds",
         "registration cost (enabled - disabled)"]


@pytest.mark.base_release_only  # the script's tables do not depend on the release; ~100 s per run
def test_smoke_prints_every_table_row_and_goal(tmp_path):
    import importlib.util

    if importlib.util.find_spec("sglang") is None:
        pytest.skip("sglang is not installed")
    out_json = tmp_path / "startup.json"
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0", XDG_CACHE_HOME=str(tmp_path / "xdg"))
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_startup.py"), "--smoke",
                           "--json", str(out_json)], capture_output=True, text=True, env=env, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    for title, rows in ROWS.items():
        assert f"== {title} | 1 thread(s), 1 interleaved reps" in out, title
        for row in rows:
            assert re.search(rf"^   {re.escape(row)}\s+median\s+[0-9.]+ ms\s+min\s+[0-9.]+ ms$", out, re.M), row
    assert out.count("A/A control: ") == len(ROWS)
    for goal in GOALS:
        assert len(re.findall(rf"^   VERDICT (MEETS|BELOW): {re.escape(goal)}", out, re.M)) == 1, goal
        assert len(re.findall(rf"^   (MEETS|BELOW)  1t  {re.escape(goal)}: ", out, re.M)) == 1, goal
    assert "SGLANG_PLUGINS=" in out and "overall:" in out

    data = json.loads(out_json.read_text())
    assert [t["title"] for t in data["tables"]] == list(ROWS)
    assert [g["label"] for g in data["absolute_goals"]] == GOALS[2:]
    assert data["smoke"] is True
