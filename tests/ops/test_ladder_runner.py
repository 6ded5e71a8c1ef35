"""Kept runners (``Rung.prepare``, ``Ladder.runner``): what a rung derives from a call's metadata is derived
once and the runner serves the calls of that metadata in place of the rung's ``run``; a failure of the runner
is handled exactly as one of ``run`` (a refusal marks the rung refused and the next rung serves the same
call, a decline hands this call on, anything else propagates)."""

from __future__ import annotations

import logging

import pytest

from sglang_ascend_hybrid.ops.ladder import DeclinedCall, Ladder, Rung
from tests.support.word_signature import SIG


class Kernel:
    """A device rung's kernel with a prepare step; ``fail``: what its calls raise (None: they serve)."""

    def __init__(self):
        self.prepared, self.ran, self.fail = [], [], None

    def prepare(self, x):
        self.prepared.append(x)

        def run(y):
            self.ran.append(y)
            if self.fail is not None:
                raise self.fail
            return ("fast", y)

        return run

    def run(self, x):
        return self.prepare(x)(x)


def _ladder(kernel: Kernel, torch_calls: list) -> Ladder:
    return Ladder("demo_runner", [
        Rung("fast", lambda sig, x: None, kernel.run, is_refusal=lambda exc: "refused" in str(exc), device=True,
             prepare=kernel.prepare),
        Rung("torch", lambda sig, x: None, lambda x: torch_calls.append(x) or ("torch", x)),
    ])


def test_the_runner_serves_in_place_of_run_and_is_prepared_once():
    kernel, torch_calls = Kernel(), []
    ladder = _ladder(kernel, torch_calls)
    runner = ladder.runner(1, ladder.first(SIG, 1))
    assert kernel.prepared == [1]
    assert [ladder(SIG, x, first=0, runner=runner) for x in (2, 3)] == [("fast", 2), ("fast", 3)]
    assert kernel.prepared == [1] and kernel.ran == [2, 3] and torch_calls == []


def test_no_runner_without_a_first_rung_or_a_prepare_step():
    kernel = Kernel()
    ladder = _ladder(kernel, [])
    assert ladder.runner(1, None) is None and ladder.runner(1, 1) is None and kernel.prepared == []


def test_a_refusing_runner_marks_the_rung_and_the_next_rung_serves_the_same_call(caplog):
    kernel, torch_calls = Kernel(), []
    ladder = _ladder(kernel, torch_calls)
    runner = ladder.runner(1, 0)
    kernel.fail = RuntimeError("refused: no such shape")
    with caplog.at_level(logging.INFO):
        assert ladder(SIG, 5, first=0, runner=runner) == ("torch", 5)
        assert ladder(SIG, 6, first=0, runner=runner) == ("torch", 6)   # a kept runner of a refused rung: not run
    assert kernel.ran == [5] and torch_calls == [5, 6] and ladder.refused("fast", SIG)
    lines = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert lines == ["sglang-ascend-hybrid: demo_runner kernel fast refused sig (refused: no such shape); using torch "
                     "for this shape from now on"]


def test_a_declining_runner_hands_on_this_call_only():
    kernel, torch_calls = Kernel(), []
    ladder = _ladder(kernel, torch_calls)
    runner = ladder.runner(1, 0)
    kernel.fail = DeclinedCall("not finite")
    assert ladder(SIG, 7, first=0, runner=runner) == ("torch", 7)
    kernel.fail = None
    assert ladder(SIG, 8, first=0, runner=runner) == ("fast", 8)
    assert not ladder.refused("fast", SIG) and torch_calls == [7]


def test_an_error_of_a_runner_propagates():
    kernel, torch_calls = Kernel(), []
    ladder = _ladder(kernel, torch_calls)
    kernel.fail = MemoryError("out of memory")
    with pytest.raises(MemoryError):
        ladder(SIG, 9, first=0, runner=ladder.runner(9, 0))
    assert torch_calls == [] and not ladder.refused("fast", SIG)


def test_a_forced_rung_runs_its_runner():
    kernel = Kernel()
    ladder = _ladder(kernel, [])
    runner = ladder.runner(1, 0)
    assert ladder(SIG, 4, backend="fast", first=0, runner=runner) == ("fast", 4) and kernel.prepared == [1]


def test_keyword_arguments_reach_the_runner():
    seen = []

    def prepare(x, *, scale):
        return lambda y, *, scale: seen.append((y, scale)) or y * scale

    ladder = Ladder("demo_runner_kwargs", [
        Rung("fast", lambda sig, x, scale: None, lambda x, scale: prepare(x, scale=scale)(x, scale=scale),
             prepare=prepare),
        Rung("torch", lambda sig, x, scale: None, lambda x, scale: -1),
    ])
    runner = prepare(1, scale=2)
    assert ladder(SIG, 3, scale=5, first=0, runner=runner) == 15 and seen == [(3, 5)]


def test_a_rung_with_a_prepare_step_derives_its_run():
    kernel, torch_calls = Kernel(), []
    ladder = Ladder("demo_derived_run", [
        Rung("fast", lambda sig, x: None, device=True, prepare=kernel.prepare),
        Rung("torch", lambda sig, x: None, lambda x: torch_calls.append(x) or ("torch", x)),
    ])
    assert ladder(SIG, 4) == ("fast", 4) and kernel.prepared == [4] and kernel.ran == [4]   # walked: prepare(x)(x)


def test_a_rung_without_run_or_prepare_is_refused_naming_it():
    with pytest.raises(ValueError) as err:
        Rung("lost", lambda sig, x: None)
    assert "run" in str(err.value) and "'lost'" in str(err.value) and "prepare step" in str(err.value)
