"""The generic kernel ladder and the seam's device facts, found weak by mutation testing:
keyword arguments reach every rung, the errors name the op, fatal device errors are recognised
by type and by text, the chip is classified from its device name, a real kernel serves only
NPU tensors."""

from __future__ import annotations

import itertools
import logging
import sys
from types import SimpleNamespace

import pytest
import torch

from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.ladder import Absent, ForcedRungUnavailable, Ladder, Rung, is_fatal_device_error
from tests.support.fresh_state import fresh_seam_lookups
from tests.support.word_signature import SIG, WordSignature


def _ladder(first_fails=None):
    seen = []

    def fast(sig, x, *, scale):
        seen.append(("fast", scale))
        if first_fails is not None:
            raise first_fails
        return x * scale

    def slow(sig, x, *, scale):
        seen.append(("slow", scale))
        return x * scale + 0.5

    ladder = Ladder("demo_op", [
        Rung("fast", lambda sig, x, *, scale: scale > 0, lambda x, *, scale: fast(None, x, scale=scale),
             is_refusal=lambda exc: "refuses" in str(exc), device=True, ops=("demo_kernel",)),
        Rung("slow", lambda sig, x, *, scale: True, lambda x, *, scale: slow(None, x, scale=scale)),
    ])
    return ladder, seen


def test_keyword_arguments_reach_predicates_and_rungs():
    ladder, seen = _ladder()
    assert ladder(SIG, 2.0, scale=3.0) == 6.0
    assert ladder(SIG, 2.0, scale=-1.0) == -1.5  # the predicate saw the keyword: slow rung
    assert ladder.choose(SIG, 2.0, scale=-1.0).name == "slow"
    assert ladder(SIG, 2.0, scale=3.0, backend="slow") == 6.5
    assert seen == [("fast", 3.0), ("slow", -1.0), ("slow", 3.0)]


def test_refusal_falls_to_the_next_rung_with_the_keywords():
    ladder, seen = _ladder(first_fails=RuntimeError("kernel refuses this shape"))
    assert ladder(SIG, 2.0, scale=3.0) == 6.5
    assert seen == [("fast", 3.0), ("slow", 3.0)]
    assert ladder.refused("fast", SIG) and not ladder.refused("fast", WordSignature("other"))
    ladder.forget_refusals()
    assert not ladder.refused("fast", SIG)


def test_forced_rung_that_cannot_serve_names_the_op_and_what_it_needs():
    ladder, _ = _ladder()
    with pytest.raises(ForcedRungUnavailable, match=r"^demo_op: the forced kernel 'fast' is unavailable for sig "
                                                    r"\(it calls demo_kernel\); use 'auto'"):
        ladder(SIG, 2.0, scale=-1.0, backend="fast")
    bare = Ladder("bare_op", [Rung("only", lambda sig: False, lambda: None)])
    with pytest.raises(ForcedRungUnavailable, match=r"unavailable for sig; use 'auto'"):
        bare(SIG, backend="only")
    with pytest.raises(RuntimeError, match=r"^bare_op: no rung can serve sig$"):
        bare.choose(SIG)
    with pytest.raises(ValueError, match=r"^Ladder 'empty': rungs=\[\]: expected at least one rung$"):
        Ladder("empty", [])


def test_every_rung_refusing_is_an_error_naming_the_op():
    refusing = Ladder("all_refuse", [
        Rung("a", lambda sig: True, lambda: (_ for _ in ()).throw(RuntimeError("a refuses")),
             is_refusal=lambda exc: True, device=True)])
    with pytest.raises(RuntimeError, match=r"^all_refuse: every rung refused sig$"):
        refusing(SIG)


@pytest.mark.parametrize("exc,fatal", [
    (MemoryError(), True),
    (type("OutOfMemoryError", (RuntimeError,), {})("x"), True),
    (RuntimeError("NPU Out Of Memory. Tried to allocate 2 GiB"), True),
    (RuntimeError("Device Lost"), True),
    (RuntimeError("unsupported head pair"), False),
    (ValueError("bad"), False),
])
def test_fatal_device_errors_by_type_and_text(exc, fatal):
    assert is_fatal_device_error(exc) is fatal


def test_a_non_device_rung_propagates_runtime_errors():
    r = Rung("torch", lambda sig: True, lambda: None)
    assert r.classify(RuntimeError("anything")) == "error"
    d = Rung("npu", lambda sig: True, lambda: None, device=True)
    assert d.classify(RuntimeError("anything")) == "unexpected"
    assert d.classify(ForcedRungUnavailable("x")) == "error"
    assert d.classify(ValueError("x")) == "error"


@pytest.mark.parametrize("name,chip", [
    ("Ascend910_9382", "A3"), ("Ascend 910C", "A3"), ("ascend910b4", "A2"), ("Ascend910B3", "A2"),
    ("Ascend950PR", "950"), ("Tesla V100", None),
])
def test_chip_is_classified_from_the_device_name(name, chip):
    assert seam.classify_chip(name) == chip


def test_a_real_kernel_serves_npu_tensors_only(monkeypatch):
    fresh_seam_lookups(monkeypatch)  # the probe of torch_npu and the absent kernel are not kept
    name = "demo_kernel_for_test"
    kernel = object()
    npu_tensor = SimpleNamespace(device=SimpleNamespace(type="npu"))
    with seam.install_real_kernels({name: kernel}):
        assert seam.lookup(name) is kernel and seam.available(name) and not seam.is_emulated(name)
        assert seam.serves(name, npu_tensor, npu_tensor)
        assert not seam.serves(name, npu_tensor, torch.zeros(1))
        assert not seam.serves(name, object())
        assert not seam.serves("absent_kernel_for_test", npu_tensor) or seam.available("absent_kernel_for_test")


def test_installed_emulators_is_a_read_only_snapshot_and_nests():
    def a(*args, **kwargs):
        return "a"

    def b(*args, **kwargs):
        return "b"

    before = dict(seam.installed_emulators())
    with seam.install_emulators({"demo_op_a_for_test": a}):
        snap = seam.installed_emulators()
        assert snap["demo_op_a_for_test"] is a and seam.is_emulated("demo_op_a_for_test")
        with pytest.raises(TypeError):
            snap["demo_op_a_for_test"] = b  # read-only: the seam's registry is not written through it
        wrapped = {name: (lambda *x, _fn=fn, **k: ("wrapped", _fn(*x, **k))) for name, fn in snap.items()}
        with seam.install_emulators(wrapped):  # wrap every installed emulator, as the graph tests do
            assert seam.call("demo_op_a_for_test") == ("wrapped", "a")
        assert seam.call("demo_op_a_for_test") == "a"
        assert seam.installed_emulators()["demo_op_a_for_test"] is a
    assert dict(seam.installed_emulators()) == before


def test_install_real_kernels_and_package_probes_are_undone_on_exit(monkeypatch):
    name = "demo_real_kernel_for_test"
    first, second = object(), object()
    fresh_seam_lookups(monkeypatch)
    with seam.install_real_kernels({name: first}):
        assert seam.lookup(name) is first and not seam.is_emulated(name)
        with seam.install_real_kernels({name: second}):
            assert seam.lookup(name) is second
        assert seam.lookup(name) is first
    with seam.install_package_probes({"torch_npu": False}):
        assert not seam.package_available("torch_npu")
        with seam.install_package_probes({"torch_npu": True}):
            assert seam.package_available("torch_npu")
        assert not seam.package_available("torch_npu")
    assert name not in seam.installed_emulators()
    with seam.install_package_probes({"torch_npu": False}):
        assert seam.lookup(name) is None  # not kept after its block: resolved afresh, without torch_npu


def test_real_kernel_resolution_through_the_package_stubs(npu_stub_packages, monkeypatch):
    """With (stub) torch_npu and sgl_kernel_npu importable: a ``pkg.module:attr`` entry resolves to
    the module's attribute, a missing attribute or package to None, and a torch.ops.npu op to the
    namespace's attribute once its owner imported."""
    from sgl_kernel_npu.fla import l2norm as stub_module

    assert seam.package_available("torch_npu") and seam.package_available("sgl_kernel_npu")
    assert not seam.package_available("no_such_kernel_package_for_test")
    assert seam.lookup("sgl_kernel_npu.fla.l2norm:l2norm_fwd") is stub_module.l2norm_fwd
    assert seam.lookup("sgl_kernel_npu.fla.l2norm:no_such_attr") is None
    assert seam.lookup("no_such_kernel_package_for_test.x:y") is None
    sentinel = object()
    monkeypatch.setattr(torch.ops, "npu", SimpleNamespace(chunk_gated_delta_rule=sentinel), raising=False)
    assert seam.lookup("chunk_gated_delta_rule") is sentinel
    assert seam.lookup("chunk_gated_delta_rule") is sentinel  # cached
    assert seam.lookup("no_such_npu_op_for_test") is None


def test_without_torch_npu_no_npu_op_resolves(monkeypatch):
    fresh_seam_lookups(monkeypatch)
    monkeypatch.setattr(torch.ops, "npu", SimpleNamespace(chunk_gated_delta_rule=object()), raising=False)
    with seam.install_package_probes({"torch_npu": False}):
        assert seam.lookup("chunk_gated_delta_rule") is None
        assert seam.chip_generation() is None


def test_a_recorded_verdict_is_read_back_per_probe_and_signature():
    seam.record_verdict("p", "sig-a", "A")
    assert seam.verdict_of("p", "sig-a") == "A"
    assert seam.verdict_of("p", "sig-b") is None and seam.verdict_of("q", "sig-a") is None


@pytest.mark.parametrize("answer,expected", [(False, False), (True, True), (RuntimeError("api"), True)])
def test_capturing_asks_torch_npu_where_it_is_installed(monkeypatch, answer, expected):
    def is_current_stream_capturing():
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(seam, "package_available", lambda name: name == "torch_npu")
    monkeypatch.setattr(torch, "npu", SimpleNamespace(is_current_stream_capturing=is_current_stream_capturing),
                        raising=False)
    assert seam.capturing() is expected


def test_capturing_without_torch_npu_is_false(monkeypatch):
    monkeypatch.setattr(seam, "package_available", lambda name: False)
    monkeypatch.setattr(torch, "npu", SimpleNamespace(is_current_stream_capturing=lambda: True), raising=False)
    assert seam.capturing() is False


def _reasoned_ladder(log, answers):
    """A two-rung ladder whose device rung answers from ``answers`` (None, a reason or an Absent)."""
    return Ladder("reasoned_op", [
        Rung("fast", lambda sig: answers[sig.word], lambda: "fast", device=True,
             ops=("pkg.mod:fast_entry", "fast_op")),
        Rung("torch", lambda sig: None, lambda: "torch"),
    ], rejection=lambda rung, sig, reason: f"demo {sig} cannot use the {rung} kernel: {reason}", log=log)


def test_a_predicate_reason_is_said_once_per_rung_and_signature(caplog):
    log = logging.getLogger("tests.reasoned_ladder")
    ladder = _reasoned_ladder(log, {"wide": "it takes at most 8 heads", "ok": None})
    with caplog.at_level(logging.INFO, logger=log.name):
        assert [ladder(WordSignature("wide")) for _ in range(3)] == ["torch"] * 3
        assert ladder(WordSignature("ok")) == "fast"
    said = [r for r in caplog.records if r.name == log.name]
    assert [r.getMessage() for r in said] == ["demo wide cannot use the fast kernel: it takes at most 8 heads"]
    assert said[0].levelno == logging.INFO
    assert ladder.why_not(ladder.rung("fast"), WordSignature("wide")) == "it takes at most 8 heads"
    assert ladder.why_not(ladder.rung("fast"), WordSignature("ok")) is None


def test_an_absent_kernel_is_not_logged_but_named_when_forced(caplog):
    log = logging.getLogger("tests.reasoned_ladder_absent")
    ladder = _reasoned_ladder(log, {"cpu": Absent("fast_op is not installed for cpu tensors")})
    with caplog.at_level(logging.INFO, logger=log.name):
        assert ladder(WordSignature("cpu")) == "torch"
    assert not [r for r in caplog.records if r.name == log.name]
    with pytest.raises(ForcedRungUnavailable, match=r"^reasoned_op: the forced kernel 'fast' is unavailable for cpu: "
                                                    r"fast_op is not installed for cpu tensors \(it calls "
                                                    r"pkg.mod:fast_entry, fast_op\); use 'auto'"):
        ladder(WordSignature("cpu"), backend="fast")


def test_a_refused_rung_is_not_asked_again_and_says_why():
    asked = []

    def fast():
        raise RuntimeError("kernel refuses this shape")

    ladder = Ladder("memo_op", [
        Rung("fast", lambda sig: asked.append(sig), fast, device=True, is_refusal=lambda exc: True),
        Rung("torch", lambda sig: None, lambda: "torch"),
    ])
    assert ladder(WordSignature("s")) == "torch" and ladder(WordSignature("s")) == "torch"
    assert asked == [WordSignature("s")]
    assert "refused s earlier" in ladder.why_not(ladder.rung("fast"), WordSignature("s"))


_RUNS = itertools.count()


def test_served_rungs_are_recorded_once_and_told_to_listeners():
    from sglang_ascend_hybrid.ops import ladder as ladder_module

    heard: list = []
    refusing = Rung("fast", lambda sig: True, lambda: (_ for _ in ()).throw(RuntimeError("no")), device=True)
    demo = Ladder("served_demo_op", [refusing, Rung("slow", lambda sig: True, lambda: 7)])
    assert demo(SIG) == 7
    assert ("served_demo_op", "slow") in ladder_module.served()
    assert ("served_demo_op", "fast") not in ladder_module.served()  # it refused: it did not serve
    ladder_module.on_first_serve(lambda op, rung: heard.append((op, rung)))
    assert ("served_demo_op", "slow") in heard  # pairs that served before the listener came are told at once
    heard.clear()
    # the record is process-wide: a name of its own per run keeps the test repeatable in one process
    new_op = f"served_forced_op_{next(_RUNS)}"
    forced = Ladder(new_op, [Rung("only", lambda sig: True, lambda: 1)])
    for _ in range(3):
        assert demo(SIG) == 7 and forced(SIG, backend="only") == 1
    assert heard == [(new_op, "only")]  # a new pair once, a known pair never again
    ladder_module._served_listeners.clear()


@pytest.mark.parametrize("device_name,expected", [("Ascend910_9382", "A3"), (RuntimeError("no device"), None)])
def test_the_chip_is_read_from_torch_npu_once_per_process(monkeypatch, caplog, device_name, expected):
    """Serving predicates ask for the chip on every call: torch_npu's device name is read once, a failure
    said once, and the device facts still override it."""
    reads = []

    def get_device_name():
        reads.append(1)
        if isinstance(device_name, Exception):
            raise device_name
        return device_name

    monkeypatch.setattr(seam, "_resolved", {})   # this test's process-wide answer goes with it
    monkeypatch.setitem(sys.modules, "torch_npu", SimpleNamespace(npu=SimpleNamespace(get_device_name=get_device_name)))
    caplog.set_level(logging.INFO, logger="sglang_ascend_hybrid")
    with seam.install_package_probes({"torch_npu": True}):
        assert [seam.chip_generation() for _ in range(3)] == [expected] * 3
        with seam.install_device_facts(chip="950"):
            assert seam.chip_generation() == "950"
        assert seam.chip_generation() == expected
    assert len(reads) == 1
    assert caplog.text.count("could not read the NPU device name") == (expected is None)
