"""Smoke run of benchmarks/bench_startup.py (one repetition, no warm-up) on its two fast tables (the CLI
and plan: ``--only cli,plan``): every row is printed, every goal gets a verdict and a summary line, the
tables left out are not run, and the JSON holds the same tables; the numbers of a smoke run mean
nothing and are not checked.  The registration and doctor tables (about 70 s of SGLang imports on this
machine) run only with the benchmark itself, for CI time."""

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
}
LEFT_OUT = ["registration: SGLang's load_plugins()", "doctor (no goal)"]
GOALS = ["--help / bare interpreter", "argument error / bare interpreter", "plan seconds"]


@pytest.mark.base_release_only  # the script's tables do not depend on the release
def test_smoke_prints_every_table_row_and_goal(tmp_path):
    import importlib.util

    if importlib.util.find_spec("sglang") is None:
        pytest.skip("sglang is not installed")
    out_json = tmp_path / "startup.json"
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0", XDG_CACHE_HOME=str(tmp_path / "xdg"))
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_startup.py"), "--smoke",
                           "--only", "cli,plan", "--json", str(out_json)],
                          capture_output=True, text=True, env=env, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    for title, rows in ROWS.items():
        assert f"== {title} | 1 thread(s), 1 interleaved reps" in out, title
        for row in rows:
            assert re.search(rf"^   {re.escape(row)}\s+median\s+[0-9.]+ ms\s+min\s+[0-9.]+ ms$", out, re.M), row
    assert out.count("A/A control: ") == len(ROWS)
    assert not any(f"== {title}" in out for title in LEFT_OUT)
    for goal in GOALS:
        assert len(re.findall(rf"^   VERDICT (MEETS|BELOW): {re.escape(goal)}", out, re.M)) == 1, goal
        assert len(re.findall(rf"^   (MEETS|BELOW)  1t  {re.escape(goal)}: ", out, re.M)) == 1, goal
    assert "overall:" in out  # (SGLANG_PLUGINS= is said by the registration table, left out)

    data = json.loads(out_json.read_text())
    assert [t["title"] for t in data["tables"]] == list(ROWS)
    assert [g["label"] for g in data["absolute_goals"]] == GOALS[2:]
    assert data["smoke"] is True
