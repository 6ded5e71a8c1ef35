"""Smoke test of ``benchmarks/bench_hook_overhead.py``: ``--smoke`` runs a table for every verb
(GDN extend, both decode routes, verify, conv prefill and decode) at 1 and 2 threads with a
difference goal each; before timing, each plugin call ran its verb's stub (the rung a deployment
takes), no real math ran and the plugin's result is the stub's preallocated output."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from sglang_ascend_hybrid.ops import ladder, seam

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_hook_overhead.py"
VERBS = ["gdn extend", "gdn decode triton_decode", "gdn decode npu_recurrent", "gdn verify", "conv prefill",
         "conv decode"]


def _load():
    spec = importlib.util.spec_from_file_location("bench_hook_overhead_under_test", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module            # its dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[spec.name]
        raise
    return module


@pytest.fixture(scope="module")
def bench():
    module = _load()
    yield module
    sys.modules.pop("bench_hook_overhead_under_test", None)


def test_every_verb_runs_its_stub_on_the_expected_rung_and_returns_its_output(bench):
    verbs = bench.verbs()
    assert [v.name for v in verbs] == VERBS
    for verb in verbs:
        with bench.serving(verb):
            for name, stub in verb.stubs.items():
                assert seam.lookup(name) is stub, name              # the stub is what the seam serves
            seen = bench.check(verb)                                # raises unless stub ran, no math, its output
            served = {rung for _, rung in ladder.served()}
        assert verb.rung in served, (verb.name, ladder.served())
        assert all(n >= 1 for n in seen["stub_calls"].values()), verb.name
        assert seen["plugin_aten_ops"] > 0
        assert not any(op in bench.MATH_OPS for op in seen["plugin_ops_by_name"])
        up_before = sum(s.calls for s in verb.stubs.values())
        verb.upstream()                  # SGLang's call path runs on the stubs too (its own kernel's)
        assert sum(s.calls for s in verb.stubs.values()) > up_before, verb.name
    for verb in verbs:                                              # nothing left behind the seam
        assert not any(seam.is_emulated(name) for name in verb.stubs)


def test_check_catches_a_plugin_that_does_not_return_the_stubs_output(bench):
    verb = bench.conv_decode()
    verb.expect = lambda out: False
    with bench.serving(verb), pytest.raises(AssertionError, match="not the stub's output"):
        bench.check(verb)


def test_smoke_prints_a_difference_verdict_per_verb_and_thread_count(bench, tmp_path, capsys, monkeypatch):
    # the 2-thread sync probe (harness machinery, tested in test_harness.py) takes minutes on a busy
    # machine: a fixed good phase here keeps the smoke run short
    monkeypatch.setattr(bench.harness, "sync_probe", lambda threads, ops=400: 0.5)
    out_json = tmp_path / "hook_overhead.json"
    assert bench.main(["--smoke", "--json", str(out_json)]) == 0
    printed = capsys.readouterr().out
    tables = json.loads(out_json.read_text())["tables"]
    assert [t["threads"] for t in tables] == [1] * len(VERBS) + [2] * len(VERBS)
    for t in tables:
        # a device op the plugin must add, timed alone and before upstream's call: a second baseline
        added = ("x copy" if "conv prefill" in t["title"]
                 else "zeroing" if "gdn decode" in t["title"] or "gdn verify" in t["title"] else None)
        context = {added, f"upstream + {added}"} if added else set()
        assert set(t["times"]) == {"upstream", "plugin", "plugin (A/A)"} | context
        assert [(g["numerator"], g["denominator"]) for g in t["goals"]] == [("plugin", "upstream")] + (
            [("plugin", f"upstream + {added}")] if added else [])
        for goal in t["goals"]:
            assert goal["difference"] and goal["bar"] == pytest.approx(30e-6) and not goal["at_least"]
    for verb in VERBS:
        assert sum("VERDICT" in line and f": {verb}: plugin adds <= 30 us per layer call:" in line
                   for line in printed.splitlines()) == 2, verb
    assert sum("VERDICT" in line and "beyond upstream + x copy" in line for line in printed.splitlines()) == 2
    # decode on both rungs and verify, at two thread counts
    assert sum("VERDICT" in line and "beyond upstream + zeroing" in line for line in printed.splitlines()) == 6
    assert "plugin - upstream <= 30 us" in printed and " us (median)" in printed
    assert "== summary" in printed and "overall:" in printed
