"""Smoke test of benchmarks/bench_short_conv.py: ``--smoke`` runs every table (tiny sizes,
1-2 repetitions), checks the methods agree before timing, and prints one VERDICT line per
goal and thread count; ``--json`` writes the same goals."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_short_conv.py"


def _load():
    spec = importlib.util.spec_from_file_location("bench_short_conv_under_test", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_smoke_prints_a_verdict_per_goal(tmp_path, capsys):
    bench = _load()
    out_json = tmp_path / "short_conv.json"
    assert bench.main(["--smoke", "--json", str(out_json)]) == 0
    printed = capsys.readouterr().out

    tables = json.loads(out_json.read_text())["tables"]
    goals = [(t["threads"], g["label"]) for t in tables for g in t["goals"]]
    # prefill: loop, padded, bandwidth per dtype; decode: one per dtype and batch; at 1 and 2 threads
    assert len(goals) == 2 * (2 * 3 + 2 * 2)
    assert sorted({threads for threads, _ in goals}) == [1, 2]
    verdicts = [line for line in printed.splitlines() if "VERDICT" in line]
    assert len(verdicts) == len(goals)
    for _, label in goals:
        assert sum(f": {label}:" in line for line in verdicts) == 2, label
    assert "A/A control" in printed and "== summary" in printed and "overall:" in printed
