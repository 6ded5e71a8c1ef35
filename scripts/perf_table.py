"""Render benchmark JSON results (``benchmarks/*.py --json FILE``) as the performance table of docs/performance.md.

    python scripts/perf_table.py perf/*.json

File names are ``<benchmark>-<allocator>.json`` (e.g. ``bench_gdn-caching.json``); one row per
goal and allocator, with the 1- and 2-thread ratios (median / minimum; differences in us for a
difference goal) side by side, the A/A
control and the CPU time other processes took while the table was measured.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def rows(path: Path):
    bench, _, allocator = path.stem.rpartition("-")
    data = json.loads(path.read_text())
    by_goal: dict[str, dict[int, tuple]] = {}
    order: list[str] = []
    for table in data["tables"]:
        for goal in table["goals"]:
            label = goal["label"]
            if label not in by_goal:
                by_goal[label] = {}
                order.append(label)
            by_goal[label][table["threads"]] = (goal, table["aa"], table["others_load"], table.get("sync_ratio", 0.0))
    if "op_counts" in data:
        n, bar = data["op_counts"]["subject"], data["op_goal"]
        yield (f"| `{bench}` | ATen ops per call of the subject | {allocator} | ≤ {bar} | {n} "
               f"{'✅' if data['op_goal_met'] else '❌'} | (same) | {'met' if data['op_goal_met'] else 'not met'} |")
    for label in order:
        cells = []
        met_all = True
        for threads in (1, 2):
            if threads not in by_goal[label]:
                cells.append("-")
                continue
            goal, aa, load, sync = by_goal[label][threads]
            met_all &= goal["met"]
            shown = ((f"{goal['median'] * 1e6:.1f} / {goal['min'] * 1e6:.1f} us") if goal.get("difference")
                     else f"{goal['median']:.2f} / {goal['min']:.2f}")
            cells.append(f"{shown} {'✅' if goal['met'] else '❌'} "
                         f"(A/A {aa[0]:.2f}, others {load:.2f}" + (f", sync {sync:.2f}" if threads > 1 else "") + ")")
        bar = f"{'≥' if goal['at_least'] else '≤'} " + (f"{goal['bar'] * 1e6:g} us" if goal.get("difference")
                                                         else f"{goal['bar']:g}")
        verdict = "met" if met_all else "not met"
        yield f"| `{bench}` | {label} | {allocator} | {bar} | {cells[0]} | {cells[1]} | {verdict} |"


def main(argv: list[str]) -> int:
    print("| benchmark | goal (ratio = numerator / denominator time, or their difference in us) | allocator | bar "
          "| 1 thread: median / min | 2 threads: median / min | |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in argv:
        for row in rows(Path(name)):
            print(row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
