"""The benchmark harness: interleaving, the A/A copy, goals on medians and minima, op counting."""

from __future__ import annotations

import sys

import pytest
import torch

from benchmarks import harness


def test_measure_runs_every_method_and_an_aa_copy_interleaved():
    calls = []
    table = harness.measure("t", [("a", lambda: calls.append("a")), ("b", lambda: calls.append("b"))], "a",
                            reps=4, threads=1, warmup=0)
    assert set(table.times) == {"a", "b", "a (A/A)"}
    assert all(len(v) == 4 for v in table.times.values())
    assert calls.count("a") == 8 and calls.count("b") == 4          # the subject twice per repetition
    b_positions = {calls[3 * r:3 * r + 3].index("b") for r in range(4)}
    assert len(b_positions) > 1                                      # the order rotates


def test_goals_need_both_the_median_and_the_minimum():
    t = harness.Table("t", 1, 3, 0.0, {"s": [1.0, 1.0, 1.0], "s (A/A)": [1.0, 1.0, 1.0], "base": [2.0, 2.0, 1.1]},
                      [harness.Goal("faster", "base", "s", 1.5),
                       harness.Goal("at most", "s", "base", 0.6, at_least=False)], "s")
    (g1, med1, min1, ok1), (g2, med2, min2, ok2) = t.goal_results()
    assert (med1, min1) == (2.0, 1.1) and not ok1                    # median clears 1.5, the minimum does not
    assert (med2, min2) == (0.5, 1.0 / 1.1) and not ok2
    t.times["base"] = [2.0, 2.0, 2.0]
    assert all(ok for *_, ok in t.goal_results())
    assert not t.noisy and not t.loaded


def test_loaded_and_noisy_flags():
    t = harness.Table("t", 1, 2, 0.9, {"s": [1.0, 1.0], "s (A/A)": [1.2, 1.2]}, [], "s")
    assert t.loaded and t.noisy
    t.others_load = float("nan")
    assert t.loaded                                                  # unknown load is not a quiet run


def test_thread_counts_are_validated():
    assert harness.thread_counts("1,2") == [1, 2]
    for bad in ("", "0", "a", "1,-2"):
        with pytest.raises(SystemExit, match="--threads"):
            harness.thread_counts(bad)


def test_subject_must_be_a_method():
    with pytest.raises(ValueError, match="subject='x'"):
        harness.measure("t", [("a", lambda: None)], "x", reps=1)


def test_count_torch_ops_counts_aten_calls():
    a = torch.ones(3)
    n, by_op = harness.count_torch_ops(lambda: (a + 1).mul_(2).sum())
    assert n == 3 and by_op == {"aten.add": 1, "aten.mul_": 1, "aten.sum": 1}


def test_others_load_sees_a_busy_neighbour():
    import subprocess
    probe = harness.OthersLoad()
    busy = subprocess.Popen([sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<1.0: pass"])
    busy.wait()
    assert probe.cores() > 0.3


def test_slow_sync_flag_and_probe():
    t = harness.Table("t", 2, 2, 0.0, {"s": [1.0, 1.0], "s (A/A)": [1.0, 1.0]}, [], "s", sync_ratio=0.81)
    assert t.slow_sync and not t.loaded
    t.sync_ratio = 0.58
    assert not t.slow_sync
    ratio = harness.sync_probe(1, ops=20)
    assert 0.3 < ratio < 3.0                     # the same op at the same thread count
    table = harness.measure("t", [("a", lambda: None)], "a", reps=1, threads=2, warmup=0)
    assert table.sync_ratio > 0.0


def test_slow_sync_phase_is_waited_out_and_a_slow_table_measured_again(monkeypatch):
    """Within the sync wait, a table waits for a good probe before measuring and is measured again
    when its closing probe is slow; its notes say so.  Without a wait it is measured as found."""
    probes = iter([0.9, 0.9, 0.6, 0.85, 0.6, 0.6])   # bad, bad, good -> measure; closing bad -> again
    monkeypatch.setattr(harness, "sync_probe", lambda threads: next(probes))
    monkeypatch.setattr(harness.time, "sleep", lambda s: None)
    monkeypatch.setattr(harness, "_sync_wait", [1e6])
    calls = []
    table = harness.measure("t", [("a", lambda: calls.append(1))], "a", reps=1, threads=2, warmup=0)
    assert not table.slow_sync and table.sync_ratio == 0.6
    assert len(calls) == 4                                   # measured twice (subject + A/A each time)
    assert any("waited 20 s" in n and "measured 2 time(s)" in n for n in table.notes)
    assert next(probes, None) is None                        # every probe was used

    monkeypatch.setattr(harness, "sync_probe", lambda threads: 0.9)
    monkeypatch.setattr(harness, "_sync_wait", [0.0])
    table = harness.measure("t", [("a", lambda: None)], "a", reps=1, threads=2, warmup=0)
    assert table.slow_sync and not any("slow-sync phase" in n for n in table.notes)


def test_sync_wait_argument_is_validated_and_applied(monkeypatch):
    monkeypatch.setattr(harness, "_sync_wait", [0.0])
    monkeypatch.setattr(harness, "keep_freed_memory", lambda: True)
    args = harness.arguments("x").parse_args(["--sync-wait", "30"])
    assert "sync wait 30 s" in harness.setup(args) and harness._sync_wait[0] == 30.0
    with pytest.raises(SystemExit, match="--sync-wait=-1"):
        harness.setup(harness.arguments("x").parse_args(["--sync-wait", "-1"]))
    assert harness.arguments("x").parse_args([]).sync_wait == harness.SYNC_WAIT_S
    harness.setup(harness.arguments("x").parse_args(["--smoke"]))
    assert harness._sync_wait[0] == 0.0                      # smoke runs never wait


def test_difference_goal_compares_medians_and_minima_in_seconds():
    """A difference goal (time(numerator) - time(denominator), shown in us) next to a ratio goal,
    which keeps its meaning; both need the median and the minimum to clear the bar."""
    times = {"plugin": [50e-6, 60e-6, 70e-6], "plugin (A/A)": [50e-6, 60e-6, 70e-6],
             "upstream": [20e-6, 30e-6, 40e-6]}
    added = harness.Goal("added", "plugin", "upstream", 30e-6, at_least=False, difference=True)
    t = harness.Table("t", 1, 3, 0.0, times, [added, harness.Goal("ratio", "plugin", "upstream", 2.5,
                                                                   at_least=False)], "plugin")
    (g, med, mn, ok), (_, rmed, rmn, rok) = t.goal_results()
    assert (med, mn) == pytest.approx((30e-6, 30e-6)) and ok
    assert (rmed, rmn) == pytest.approx((2.0, 2.5)) and rok
    assert g.wording() == "plugin - upstream <= 30 us" and g.show(med) == "30.00 us"
    t.times["plugin"] = [50e-6, 61e-6, 70e-6]                  # median 31 us over: below the bar
    assert not t.goal_results()[0][3]
    assert harness.Goal("r", "a", "b", 1.5).show(2.0) == "2.000"   # ratio goals print as before
