"""A rung that declines one call (:class:`DeclinedCall`: a value-dependent failure, e.g. non-finite
outputs from finite inputs) hands that call to the next rung without being marked unsupported for
the signature, logs it once at INFO, and, when forced, raises ForcedRungUnavailable naming it."""

from __future__ import annotations

import logging

import pytest

from sglang_ascend_hybrid.ops.ladder import DeclinedCall, ForcedRungUnavailable, Ladder, Rung
from tests.support.word_signature import SIG


def _ladder(seen, declines=lambda x: x < 0):
    def fast(x):
        seen.append("fast")
        if declines(x):
            raise DeclinedCall(f"x={x} is out of the fast kernel's range")
        return x * 2

    return Ladder("demo_declined", [
        Rung("fast", lambda sig, x: True, fast, device=True, is_refusal=lambda exc: True),
        Rung("torch", lambda sig, x: True, lambda x: seen.append("torch") or x * 3),
    ])


def test_a_declined_call_goes_to_the_next_rung_and_the_rung_stays_available(caplog):
    seen = []
    ladder = _ladder(seen)
    with caplog.at_level(logging.INFO):
        assert ladder(SIG, -1) == -3
        assert ladder(SIG, -2) == -6
        assert ladder(SIG, 5) == 10  # not remembered: the fast rung serves the next call
    assert seen == ["fast", "torch", "fast", "torch", "fast"]
    assert not ladder.refused("fast", SIG)
    lines = [r for r in caplog.records if "declined" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.INFO
    assert "demo_declined kernel fast declined a call on sig (x=-1 is out of the fast kernel's range); " \
           "using torch" in lines[0].getMessage()


def test_a_forced_rung_that_declines_names_the_op_the_rung_and_why():
    ladder = _ladder([])
    with pytest.raises(ForcedRungUnavailable) as err:
        ladder(SIG, -1, backend="fast")
    assert str(err.value) == ("demo_declined: the forced kernel 'fast' declined this call for sig (x=-1 is out of "
                              "the fast kernel's range); use 'auto' to let the ladder ('fast', 'torch') choose")
    assert isinstance(err.value.__cause__, DeclinedCall)
    assert ladder(SIG, 4, backend="fast") == 8


def test_declined_is_never_a_refusal_nor_an_unexpected_failure():
    r = Rung("d", lambda s: True, lambda: None, device=True, is_refusal=lambda exc: False)
    assert r.classify(DeclinedCall("x")) == "error"  # the ladder handles it before classifying


def test_the_next_rung_is_asked_only_when_needed():
    asked = []
    ladder = Ladder("demo_lazy", [
        Rung("a", lambda sig: asked.append("a") or True, lambda: "a"),
        Rung("b", lambda sig: asked.append("b") or True, lambda: "b"),
    ])
    assert ladder(SIG) == "a" and asked == ["a"]
    assert ladder.choose(SIG).name == "a" and asked == ["a", "a"]
