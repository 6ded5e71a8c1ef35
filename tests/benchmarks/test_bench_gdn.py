"""Smoke test of ``benchmarks/bench_gdn.py``: it runs end to end at tiny sizes and prints a
verdict for every goal at every thread count under the chosen allocator, the op-count verdict,
the agreement check and the summary, and writes its JSON (the ratios of a smoke run mean
nothing)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

GOALS = [
    r"T=\d+ one sequence, matmul probe of the same FLOPs / subject",
    r"T=\d+ one sequence, >= 2x FLA naive chunk",
    r"T=\d+ one sequence, >= 2x transformers chunk",
    r"varlen \d+ sequences, >= 2x FLA naive \(faster form = (loop|padded)\)",
    r"varlen \d+ sequences, >= 2x transformers \(faster form = (loop|padded)\)",
]
ALLOCATORS = {"plain": r" \[plain CPU allocator\]", "caching": r" \[freed memory kept\]"}


@pytest.mark.parametrize("allocator", ["caching", "plain"])
def test_smoke_run_prints_every_verdict_and_writes_json(tmp_path, allocator):
    out_json = tmp_path / "gdn.json"
    env = dict(os.environ, TRITON_INTERPRET="1", TORCH_DEVICE_BACKEND_AUTOLOAD="0", HF_HUB_OFFLINE="1")
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "benchmarks" / "bench_gdn.py"), "--smoke",
                           "--threads", "1,2", "--json", str(out_json), "--allocator", allocator],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = proc.stdout
    verdicts = re.findall(r"VERDICT (MEETS|BELOW): (.+?): ", text)
    labels = [label for _, label in verdicts]
    for goal in GOALS:   # once per thread count (1 and 2), under the allocator asked for
        pattern = goal + ALLOCATORS[allocator]
        assert sum(bool(re.fullmatch(pattern, label)) for label in labels) == 2, (pattern, labels)
    assert f"allocator: {allocator}" in text
    op_line = re.search(r"VERDICT (MEETS|BELOW): op count: torch chunked issues (\d+) ATen ops per call "
                        r"\(goal <= 5000\)", text)
    assert op_line and int(op_line.group(2)) > 0
    assert "agreement: OK" in text and "DISAGREE" not in text
    assert "A/A control" in text and "== summary" in text and "overall:" in text
    data = json.loads(out_json.read_text())
    assert data["smoke"] is True and data["op_counts"]["subject"] == int(op_line.group(2))
    assert [t["threads"] for t in data["tables"]] == [1, 1, 2, 2]
    assert all(len(t["goals"]) == (3 if "one sequence" in t["title"] else 2) for t in data["tables"])
