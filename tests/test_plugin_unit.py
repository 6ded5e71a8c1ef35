"""Plugin registration against a mocked SGLang (no SGLang import)."""

from __future__ import annotations

import logging
import re
import sys
import types
from collections import defaultdict

import pytest

from sglang_ascend_hybrid import mode, patches, plugin, status
from sglang_ascend_hybrid.backends import registry
from sglang_ascend_hybrid import versioning
from sglang_ascend_hybrid.versioning import range_bounds

NEWEST_TESTED = versioning.tested_releases()[-1]


class FakeHookType:
    class _T:
        def __init__(self, name):
            self.name = name

    AROUND, REPLACE, BEFORE, AFTER = _T("AROUND"), _T("REPLACE"), _T("BEFORE"), _T("AFTER")

    def __class_getitem__(cls, key):
        return getattr(cls, key)


class FakeHookRegistry:
    _hooks = defaultdict(list)
    _patched = set()

    @classmethod
    def register(cls, target, hook, hook_type):
        cls._hooks[target].append((hook_type, hook, None))

    @classmethod
    def apply_hooks(cls):
        for target in cls._hooks:
            if target == "fake.module.unappliable":
                continue
            cls._patched.add(target)


@pytest.fixture
def fake_sglang(monkeypatch):
    FakeHookRegistry._hooks = defaultdict(list)
    FakeHookRegistry._patched = set()
    hook_mod = types.ModuleType("sglang.srt.plugins.hook_registry")
    hook_mod.HookRegistry = FakeHookRegistry
    hook_mod.HookType = FakeHookType
    choices = types.ModuleType("sglang.srt.arg_groups.choices")
    choices.ATTENTION_BACKEND_CHOICES = ["ascend", "triton"]
    choices.DRAFT_ATTENTION_BACKEND_CHOICES = ["ascend"]
    res = types.ModuleType("sglang.srt.arg_groups.resolution_hooks")
    res._HOOKS = {}
    res._OVERRIDABLE_HOOKS = frozenset({"handle_npu_backends"})

    def register_resolution_hook(name):
        def deco(fn):
            res._HOOKS.setdefault(name, []).append(fn)
            return fn
        return deco

    res.register_resolution_hook = register_resolution_hook
    reg = types.ModuleType("sglang.srt.layers.attention.attention_registry")
    reg.ATTENTION_BACKENDS = {"ascend": lambda runner: "ascend-backend"}
    for name, mod in {
        "sglang": types.ModuleType("sglang"),
        "sglang.srt": types.ModuleType("sglang.srt"),
        "sglang.srt.plugins": types.ModuleType("sglang.srt.plugins"),
        "sglang.srt.plugins.hook_registry": hook_mod,
        "sglang.srt.arg_groups": types.ModuleType("sglang.srt.arg_groups"),
        "sglang.srt.arg_groups.choices": choices,
        "sglang.srt.arg_groups.resolution_hooks": res,
        "sglang.srt.layers": types.ModuleType("sglang.srt.layers"),
        "sglang.srt.layers.attention": types.ModuleType("sglang.srt.layers.attention"),
        "sglang.srt.layers.attention.attention_registry": reg,
    }.items():
        monkeypatch.setitem(sys.modules, name, mod)
    sys.modules["sglang.srt.arg_groups"].choices = choices
    sys.modules["sglang.srt.arg_groups"].resolution_hooks = res

    class EP:
        def __init__(self, name, value):
            self.name, self.value = name, value

        def load(self):
            return lambda runner: f"built-{self.name}"

    eps = [EP("ascend_hybrid", "sglang_ascend_hybrid.backends.ascend_hybrid:create_ascend_hybrid_backend"),
           EP("third_party", "other.pkg:factory")]
    monkeypatch.setattr(registry, "entry_points", lambda group: eps if group == registry.GROUP else [])
    monkeypatch.setattr(plugin, "installed_version", lambda dist: NEWEST_TESTED)
    # Static verification reads real sources; the fake SGLang has none, so each test decides.
    monkeypatch.setattr(patches, "verify", lambda p, version=None: None)
    monkeypatch.setattr(patches, "missing_requirements", lambda p: [])
    monkeypatch.delenv("SGLANG_PLUGINS", raising=False)
    monkeypatch.delenv("SGLANG_ASCEND_HYBRID_DISABLE", raising=False)
    status._reset_for_tests()
    mode._reset_for_tests()
    yield types.SimpleNamespace(choices=choices, res=res, reg=reg, hooks=FakeHookRegistry)
    status._reset_for_tests()
    mode._reset_for_tests()


def _srt_patches():
    return [p for p in patches.PATCHES if p.runtime == "srt"]


def test_register_adds_every_entry_point_backend(fake_sglang):
    plugin.register()
    for name in ("ascend_hybrid", "third_party"):
        assert name in fake_sglang.choices.ATTENTION_BACKEND_CHOICES
        assert name in fake_sglang.choices.DRAFT_ATTENTION_BACKEND_CHOICES
        assert fake_sglang.reg.ATTENTION_BACKENDS[name]("runner") == f"built-{name}"
    assert fake_sglang.reg.ATTENTION_BACKENDS["ascend"]("r") == "ascend-backend"  # untouched


def test_register_is_idempotent(fake_sglang):
    plugin.register()
    snapshot = (list(fake_sglang.choices.ATTENTION_BACKEND_CHOICES), dict(fake_sglang.reg.ATTENTION_BACKENDS),
                {k: list(v) for k, v in fake_sglang.res._HOOKS.items()},
                {k: list(v) for k, v in fake_sglang.hooks._hooks.items()})
    plugin.register()
    assert snapshot == (list(fake_sglang.choices.ATTENTION_BACKEND_CHOICES), dict(fake_sglang.reg.ATTENTION_BACKENDS),
                        {k: list(v) for k, v in fake_sglang.res._HOOKS.items()},
                        {k: list(v) for k, v in fake_sglang.hooks._hooks.items()})
    assert len(fake_sglang.res._HOOKS["handle_npu_backends"]) == 1


def test_register_records_status_for_every_patch(fake_sglang):
    plugin.register()
    assert {p.name for p in _srt_patches()} <= set(status.STATUS.patches)
    assert not status.STATUS.in_state(status.FAILED)


def test_hook_patches_go_through_hook_registry(fake_sglang):
    plugin.register()
    hook_patches = [p for p in _srt_patches() if p.kind == "hook" and not p.requires]
    for p in hook_patches:
        assert any(h is p.load_hook() for _, h, _ in fake_sglang.hooks._hooks[p.target]), p.name
        assert status.STATUS.patches[p.name].state == status.REGISTERED
    fake_sglang.hooks.apply_hooks()
    status.STATUS.refresh_applied()
    for p in hook_patches:
        assert status.STATUS.patches[p.name].state == status.APPLIED


def test_disable_env_turns_everything_off(fake_sglang, monkeypatch):
    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_DISABLE", "1")
    plugin.register()
    assert "ascend_hybrid" not in fake_sglang.choices.ATTENTION_BACKEND_CHOICES
    assert not fake_sglang.res._HOOKS
    assert {s.state for s in status.STATUS.patches.values()} == {status.DISABLED}


def test_sglang_plugins_whitelist_filters_backend_entries(fake_sglang, monkeypatch):
    monkeypatch.setenv("SGLANG_PLUGINS", "ascend_hybrid")
    plugin.register()
    assert "ascend_hybrid" in fake_sglang.choices.ATTENTION_BACKEND_CHOICES
    assert "third_party" not in fake_sglang.choices.ATTENTION_BACKEND_CHOICES


def test_missing_target_is_failed_not_raised(fake_sglang, monkeypatch, caplog):
    broken = _srt_patches()[0].name
    monkeypatch.setattr(patches, "verify", lambda p, version=None: "'X' not found in fake" if p.name == broken else None)
    with caplog.at_level(logging.WARNING, logger="sglang_ascend_hybrid"):
        plugin.register()  # must not raise
    st = status.STATUS.patches[broken]
    assert st.state == status.FAILED and "not found" in st.reason
    assert any("failed" in r.getMessage() and broken_target in r.getMessage()
               for r in caplog.records for broken_target in [st.target])


def test_strict_mode_turns_failure_into_startup_error(fake_sglang, monkeypatch, caplog):
    broken = _srt_patches()[0]
    monkeypatch.setattr(patches, "verify", lambda p, version=None: "gone in this release" if p.name == broken.name else None)
    plugin.register()
    with caplog.at_level(logging.WARNING, logger="sglang_ascend_hybrid"):
        plugin.enforce_strict()  # plain 'ascend': warning only
    assert any(broken.target in r.getMessage() for r in caplog.records)
    mode.record_request()
    with pytest.raises(plugin.PluginPatchError, match=re.escape(NEWEST_TESTED) + ".*" + broken.target.replace(".", r"\.")):
        plugin.enforce_strict()


def test_register_never_raises_on_unexpected_errors(fake_sglang, monkeypatch):
    def boom(patch):
        raise RuntimeError("unexpected")
    monkeypatch.setattr(plugin, "_apply", boom)
    plugin.register()  # swallowed and logged


def test_untested_release_is_said_once_with_the_patches_not_applied(fake_sglang, monkeypatch, caplog):
    untested = range_bounds()[1]
    broken = _srt_patches()[0]
    monkeypatch.setattr(plugin, "installed_version", lambda dist: untested)
    monkeypatch.setattr(patches, "verify", lambda p, version=None: "renamed" if p.name == broken.name else None)
    with caplog.at_level(logging.INFO, logger="sglang_ascend_hybrid"):
        plugin.register()
        plugin.register()
    lines = [r for r in caplog.records if "is untested" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING
    assert f"SGLang {untested} is untested" in lines[0].getMessage()
    assert f"{broken.name} ({broken.target}: renamed)" in lines[0].getMessage()
    # every other srt patch was still applied
    assert {p.name for p in status.STATUS.in_state(status.FAILED)} == {broken.name}
    with caplog.at_level(logging.WARNING, logger="sglang_ascend_hybrid"):
        plugin.enforce_strict()  # lenient under plain 'ascend'
    mode.record_request()
    with pytest.raises(plugin.PluginPatchError, match=re.escape(untested) + ".*untested"):
        plugin.enforce_strict()


def test_tested_release_says_nothing_about_testing(fake_sglang, caplog):
    with caplog.at_level(logging.INFO, logger="sglang_ascend_hybrid"):
        plugin.register()
    assert status.STATUS.version_problem is None
    assert not [r for r in caplog.records if "untested" in r.getMessage()]


def test_ascend_hybrid_factory_refuses_non_npu_clearly(monkeypatch):
    import sglang_ascend_hybrid.backends.ascend_hybrid as ah

    fake_utils = types.ModuleType("sglang.srt.utils")
    fake_utils.is_npu = lambda: False
    monkeypatch.setitem(sys.modules, "sglang.srt.utils", fake_utils)
    with pytest.raises(RuntimeError, match=r"'ascend_hybrid' runs only on Ascend NPUs \(--device npu\)"):
        ah.create_ascend_hybrid_backend(object())


def test_ascend_hybrid_factory_builds_the_ascend_backend_on_npu(fake_sglang, monkeypatch):
    import sglang_ascend_hybrid.backends.ascend_hybrid as ah

    fake_utils = types.ModuleType("sglang.srt.utils")
    fake_utils.is_npu = lambda: True
    monkeypatch.setitem(sys.modules, "sglang.srt.utils", fake_utils)
    plugin.register()
    with pytest.raises(plugin.PluginPatchError):  # SGLang has not applied the hooks yet
        ah.create_ascend_hybrid_backend("runner")
    fake_sglang.hooks.apply_hooks()
    assert ah.create_ascend_hybrid_backend("runner") == "ascend-backend"
    assert mode.hybrid_requested()


def test_user_set_strict_env_makes_plain_ascend_strict(fake_sglang, monkeypatch):
    broken = _srt_patches()[0]
    monkeypatch.setattr(patches, "verify", lambda p, version=None: "gone" if p.name == broken.name else None)
    plugin.register()
    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_STRICT", "1")
    with pytest.raises(plugin.PluginPatchError):
        plugin.enforce_strict()


def _deferred_patches():
    return [p for p in patches.PATCHES if p.requires and p.runtime == "srt"]


def test_npu_module_patches_are_deferred_past_discovery(fake_sglang):
    assert _deferred_patches(), "expected patches on modules that import NPU packages"
    plugin.register()
    for p in _deferred_patches():
        assert status.STATUS.patches[p.name].state == status.DEFERRED
        assert p.target not in fake_sglang.hooks._hooks  # nothing for SGLang to import at discovery
    plugin.apply_deferred()
    for p in _deferred_patches():
        assert any(h is p.load_hook() for _, h, _ in fake_sglang.hooks._hooks[p.target])
        assert status.STATUS.patches[p.name].state == status.APPLIED
    snapshot = {k: list(v) for k, v in fake_sglang.hooks._hooks.items()}
    plugin.apply_deferred()  # idempotent
    assert snapshot == {k: list(v) for k, v in fake_sglang.hooks._hooks.items()}


def test_deferred_patch_that_does_not_apply_stops_strict_startup(fake_sglang, monkeypatch):
    p = _deferred_patches()[0]
    plugin.register()
    real_apply = fake_sglang.hooks.apply_hooks

    def apply_all_but(cls=fake_sglang.hooks):
        real_apply()
        cls._patched.discard(p.target)

    monkeypatch.setattr(fake_sglang.hooks, "apply_hooks", apply_all_but)
    mode.record_request()
    with pytest.raises(plugin.PluginPatchError, match=p.target.replace(".", r"\.")):
        plugin.apply_deferred()
