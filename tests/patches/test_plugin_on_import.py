"""The plugin core's on-import patch application, for mutants a sampled mutation run found alive: a
release-decided patch is recorded under its own name, an on-import patch
under its own target, a target is applied alone through the registry's per-target step, and a
target without pending hooks is not being applied by anybody."""

from __future__ import annotations

import dataclasses

import pytest

from sglang_ascend_hybrid import patches
from sglang_ascend_hybrid.patches import apply
from sglang_ascend_hybrid.patches.status import APPLIED, STATUS


class FakeRegistry:
    def __init__(self, hooks=None, per_target=True):
        self._hooks = dict(hooks or {})
        self._patched: set = set()
        self.calls = []
        if per_target:
            self._apply_target = lambda target, hooks: self.calls.append(("one", target))

    def apply_hooks(self):
        self.calls.append(("all",))
        self._patched.update(self._hooks)


def test_a_target_is_applied_alone_through_the_per_target_step():
    reg = FakeRegistry({"a.b": [("around", object(), None)], "c.d": [("around", object(), None)]})
    apply._apply_target(reg, "a.b")
    assert reg.calls == [("one", "a.b")] and reg._patched == {"a.b"}


def test_a_registry_without_the_per_target_step_applies_what_is_pending():
    reg = FakeRegistry({"a.b": []}, per_target=False)
    apply._apply_target(reg, "a.b")
    assert reg.calls == [("all",)]


def test_a_target_the_registry_did_not_apply_is_an_error_with_the_reason():
    reg = FakeRegistry({}, per_target=False)   # apply_hooks patches nothing for a.b
    with pytest.raises(RuntimeError) as err:
        apply._apply_target(reg, "a.b")
    assert str(err.value) == apply.NOT_APPLIED


def test_a_target_without_pending_hooks_is_not_being_applied():
    ours = object()
    assert apply._applying_now(FakeRegistry(), "x.y", ours) is False
    assert apply._applying_now(FakeRegistry({"x.y": [("around", ours, None)]}), "x.y", ours) is False
    assert apply._applying_now(FakeRegistry({"x.y": [("around", object(), None)]}), "x.y", ours) is True


@pytest.fixture
def fresh_status(monkeypatch):
    monkeypatch.setattr(STATUS, "patches", {})
    return STATUS


def test_a_release_decided_patch_is_recorded_under_its_name_and_target(fresh_status, monkeypatch):
    patch = dataclasses.replace(patches.PATCHES[0], name="test-release-decided")
    monkeypatch.setattr(patches, "release_state", lambda p, version=None: ("unavailable", "not on this release"))
    apply._apply(patch)
    rec = fresh_status.patches["test-release-decided"]
    assert (rec.target, rec.state, rec.reason) == (patch.target, "unavailable", "not on this release")


def test_an_on_import_patch_is_recorded_with_its_target(fresh_status, monkeypatch):
    patch = dataclasses.replace(next(p for p in patches.PATCHES if p.kind == "backend_registry"),
                                name="test-on-import")
    monkeypatch.setattr(type(patch), "load_hook", lambda self: (lambda: None))
    apply._apply_on_import(patch)
    rec = fresh_status.patches["test-on-import"]
    assert rec.target == patch.target and rec.state == APPLIED
