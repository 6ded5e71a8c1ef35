"""``ops.decisions``: what a serving call decides from metadata is kept per metadata key while the serving
state is unchanged, decided again after any change of it, never kept from a failure or a graph capture;
and the serving paths built on it decide again where a fresh call would decide otherwise."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import pytest
import torch

from sglang_ascend_hybrid.ops import decisions, probes, seam
from sglang_ascend_hybrid.ops.conv import dispatch as conv_dispatch
from sglang_ascend_hybrid.ops.decisions import Decisions, key_of
from sglang_ascend_hybrid.ops.ladder import Ladder, Rung
from sglang_ascend_hybrid.ops.signature import Signature


class Make:
    def __init__(self):
        self.calls = 0

    def __call__(self):
        self.calls += 1
        return self.calls


# ----------------------------------------------------------------------------- the table


def test_kept_while_the_generation_stands_and_decided_again_after_a_change():
    table, make = Decisions("t"), Make()
    assert table.decide("k", make) == 1 and table.decide("k", make) == 1
    assert table.decide("other", make) == 2                   # another key: its own decision
    decisions.changed()
    assert table.decide("k", make) == 3 and table.decide("k", make) == 3


def test_a_failed_decision_is_not_kept():
    table, calls = Decisions("t"), []

    def failing():
        calls.append(1)
        raise ValueError("bad input")

    for _ in range(2):
        with pytest.raises(ValueError, match="bad input"):
            table.decide("k", failing)
    assert len(calls) == 2


def test_nothing_decided_inside_a_graph_capture_is_kept():
    table, make = Decisions("t"), Make()
    with seam.capture_region():
        assert table.decide("k", make) == 1 and table.decide("k", make) == 2
    assert table.decide("k", make) == 3 and table.decide("k", make) == 3
    with seam.capture_region():                                # a decision kept before is read inside one
        assert table.decide("k", make) == 3


def test_a_decision_made_while_the_state_changed_is_not_kept():
    table, calls = Decisions("t"), []

    def changing():
        calls.append(1)
        decisions.changed()                                   # e.g. a probe recorded its verdict meanwhile
        return len(calls)

    assert table.decide("k", changing) == 1 and table.decide("k", changing) == 2
    assert len(calls) == 2


def test_an_unhashable_key_is_decided_every_call_and_a_full_table_starts_afresh():
    table, make = Decisions("t", capacity=2), Make()
    assert table.decide(("k", [1]), make) == 1 and table.decide(("k", [1]), make) == 2
    table.decide("a", make)
    table.decide("b", make)
    assert len(table._table) == 2 and table.decide("a", make) == 3
    table.decide("c", make)                                   # full: afresh, then c
    assert len(table._table) == 1 and table.decide("c", make) == 5 and table.decide("a", make) == 6


# ----------------------------------------------------------------------------- the key


@dataclass
class Call:
    x: torch.Tensor
    y: Optional[torch.Tensor]
    pair: tuple
    n: int
    mode: str = "a"
    _cached: Optional[int] = field(default=None)


def _call(**changes):
    base = dict(x=torch.zeros(4, 6), y=None, pair=(torch.zeros(3), None), n=1)
    base.update(changes)
    return Call(**base)


def test_every_public_field_and_every_tensor_fact_a_decision_reads_is_in_the_key():
    base = torch.zeros(5, 6)
    same = key_of(_call())
    assert key_of(_call()) == same and hash(key_of(_call())) == hash(same)
    assert key_of(_call(x=torch.ones(4, 6))) == same                      # values are not
    assert key_of(_call(_cached=7)) == same                               # private fields are not
    for other in (_call(x=torch.zeros(6, 4)),                             # shape
                  _call(x=torch.zeros(6, 4).t()),                         # strides
                  _call(x=base[1:]),                                      # storage offset
                  _call(x=torch.zeros(4, 6, dtype=torch.float16)),        # dtype
                  _call(x=torch.zeros(4, 6, device="meta")),              # device
                  _call(y=torch.zeros(1)),                                # a tensor instead of None
                  _call(pair=(torch.zeros(4), None)),                     # a tuple's tensor entry
                  _call(pair=(torch.zeros(3), 1)),                        # a tuple's plain entry
                  _call(n=2), _call(mode="b")):                           # plain fields
        assert key_of(other) != same, other
    assert key_of(_call(x=torch.nn.Parameter(torch.zeros(4, 6)))) == same   # a tensor subclass: by metadata too


# ----------------------------------------------------------------------------- what changes the generation


def _bumps(action) -> bool:
    before = decisions.generation()
    action()
    return decisions.generation() != before


def _entered(cm):
    def run():
        with cm():
            pass
    return run


def test_every_change_of_the_serving_state_starts_a_new_generation():
    with seam.install_emulators({}):
        pass
    assert _bumps(_entered(lambda: seam.install_emulators({"op": lambda: None})))
    assert _bumps(_entered(lambda: seam.install_real_kernels({"op": lambda: None})))
    assert _bumps(_entered(lambda: seam.install_package_probes({"torch_npu": False})))
    assert _bumps(_entered(lambda: seam.install_device_facts(chip="A2")))
    verdict = probes.Verdict("p", "sig", "ok", True, "test")
    assert _bumps(lambda: seam.record_verdict("p", "sig", verdict))
    assert _bumps(seam.forget_verdicts)
    ladder = Ladder("t", [Rung("torch", lambda sig: None, lambda: 1)])
    assert _bumps(lambda: ladder.mark_refused("torch", "sig"))
    assert _bumps(ladder.forget_refusals)
    key = ("test-tiling-key", 1)
    assert _bumps(lambda: conv_dispatch._tiling_record(key, torch.float16))
    assert not _bumps(lambda: conv_dispatch._tiling_record(key, torch.float16))   # known: nothing changed
    assert _bumps(conv_dispatch.reset_state)


def test_leaving_an_installed_state_starts_a_new_generation_too():
    inside = []
    with seam.install_emulators({"op": lambda: None}):
        inside.append(decisions.generation())
    assert decisions.generation() != inside[0]


# ----------------------------------------------------------------------------- the ladder's kept first rung


@dataclass(frozen=True)
class Sig(Signature):
    name: str


def test_a_kept_first_rung_runs_without_its_predicate_and_skips_the_rungs_before_it():
    asked = []

    def pred(name, answer):
        def supports(sig):
            asked.append(name)
            return answer
        return supports

    ladder = Ladder("t", [Rung("a", pred("a", "no"), lambda: "a"), Rung("b", pred("b", None), lambda: "b"),
                          Rung("torch", pred("torch", None), lambda: "torch")])
    sig = Sig("s")
    assert ladder.first(sig) == 1 and asked == ["a", "b"]
    asked.clear()
    assert ladder(sig, first=1) == "b" and asked == []
    ladder.mark_refused("b", sig)                             # refused since: the kept answer is stale
    assert ladder(sig, first=1) == "torch" and asked == ["torch"]


def test_a_forced_rung_that_cannot_serve_has_no_first_and_raises_when_called():
    from sglang_ascend_hybrid.ops.ladder import ForcedRungUnavailable

    ladder = Ladder("t", [Rung("a", lambda sig: "not here", lambda: "a"), Rung("torch", lambda sig: None, lambda: 1)])
    sig = Sig("s")
    assert ladder.first(sig, backend="a") is None and ladder.first(sig, backend="torch") == 1
    with pytest.raises(ForcedRungUnavailable, match="the forced kernel 'a' is unavailable for"):
        ladder(sig, backend="a", first=None)
    with pytest.raises(ValueError, match="backend='nope'"):
        ladder.first(sig, backend="nope")


# ----------------------------------------------------------------------------- the serving ops keep them


class AskCount:
    """Counts the predicate questions a ladder asks (its ``why_not``)."""

    def __init__(self, monkeypatch, ladder):
        self.asked = 0
        real = ladder.why_not

        def why_not(*args, **kwargs):
            self.asked += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(ladder, "why_not", why_not)


def test_the_serving_ops_ask_their_predicates_once_per_metadata(monkeypatch):
    from sglang_ascend_hybrid.ops.conv import api as conv_api
    from sglang_ascend_hybrid.ops.gdn import decode, verify
    from tests.support import gdn_inputs

    x = gdn_inputs.sglang_gating(2, hv=4, hk=2, k_dim=16, v_dim=16, slots=6, seed=0, dtype=torch.bfloat16,
                                 pool_dtype=torch.float32)

    def decode_call():
        return decode.DecodeCall(x["q"], x["k"], x["v"], x["a"], x["b"], x["A_log"], x["dt_bias"], x["pool"],
                                 torch.tensor([1, 3], dtype=torch.int32), torch.arange(3, dtype=torch.int32))

    gen = torch.Generator().manual_seed(1)
    B, S, nk, nv, dk, dv = 2, 2, 1, 2, 8, 8

    def verify_call():
        return verify.VerifyCall(torch.randn(B, S, 2 * nk * dk + nv * dv, generator=gen),
                                 torch.zeros(4, nv, dv, dk), torch.randn(B, S, nv, generator=gen), None, dk ** -0.5,
                                 torch.full((B,), S, dtype=torch.int32),
                                 torch.arange(B * S, dtype=torch.int32).view(B, S), nk, nv,
                                 intermediate_state=torch.zeros((B + 1) * S, nv, dv, dk),
                                 cache_indices=torch.tensor([0, 2], dtype=torch.int32))

    conv_state = torch.zeros(5, 16, 3)

    def conv_update():
        return conv_api.causal_conv1d_update(torch.randn(2, 16, generator=gen), conv_state,
                                             torch.randn(16, 4, generator=gen), conv_state_indices=torch.tensor(
                                                 [1, 4], dtype=torch.int32), check_values=False)

    for ladder, run in ((decode.DECODE, lambda: decode.run_decode(decode_call(), check_values=False)),
                        (verify.VERIFY, lambda: verify.recurrent_verify(verify_call(), check_values=False)),
                        (conv_dispatch.UPDATE_LADDER, conv_update)):
        count = AskCount(monkeypatch, ladder)
        run()
        first = count.asked
        run()
        run()
        assert first >= 1 and count.asked == first, ladder.op    # the same metadata: decided once
        decisions.changed()
        run()
        assert count.asked == 2 * first, ladder.op                # a new generation: decided again


def test_the_key_of_a_call_type_met_for_the_first_time():
    """A call class key_of has not seen yet (defined here, so no earlier test or process warmed its cache)."""

    @dataclass
    class Fresh:
        t: torch.Tensor
        mode: str
        _private: int = 0

    call = Fresh(torch.zeros(2, 3), "m", 7)
    assert key_of(call) == (Fresh, (torch.Size([2, 3]), (3, 1), 0, torch.float32, torch.device("cpu")), "m")
