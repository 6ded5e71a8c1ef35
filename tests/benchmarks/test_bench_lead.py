"""Smoke runs of the GDN decode, GDN verify, packed-attention and bf16 conv-forms benchmarks (tiny
sizes, 1 thread):
each runs, checks its methods agree, and prints one verdict per goal and the summary."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(script: str) -> str:
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--smoke", "--threads", "1"],
                          capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.parametrize("script,goals", [
    ("bench_gdn_decode.py", 2),        # fp32 and bf16 pools
    ("bench_gdn_verify.py", 2),        # per-request loop and batched loop
    ("bench_packed_attention.py", 3),  # compaction, device fast path, reference path
    ("bench_conv_bf16_forms.py", 4),   # rung, block loop, Toeplitz bmm, bf16 taps against the probe
])
def test_benchmark_prints_a_verdict_per_goal(script, goals):
    out = _run(script)
    assert len(re.findall(r"^   VERDICT (MEETS|BELOW): ", out, re.M)) == goals, out
    assert len(re.findall(r"^   (MEETS|BELOW)  1t  ", out, re.M)) == goals, out
    assert "A/A control" in out and "overall:" in out
    for m in re.finditer(r"max \|[^|]+\|[^:]*: ([0-9.e+-]+)", out):   # the methods agreed
        assert float(m.group(1)) < 0.05, m.group(0)
