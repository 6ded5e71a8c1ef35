"""Plugin registration against a mocked SGLang (no SGLang import in this process; the last test
runs the real one in fresh interpreters)."""

from __future__ import annotations

import logging
import re
import sys
import types
from collections import defaultdict

import pytest

from sglang_ascend_hybrid import patches, plugin
from sglang_ascend_hybrid.integration import registry
from sglang_ascend_hybrid.patches import apply, mode, releases, status
from sglang_ascend_hybrid.patches.releases import range_bounds
from tests.support.fresh_state import fresh_patch_state

NEWEST_TESTED = releases.tested_releases()[-1]


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
    # The fake tree replaces the whole of SGLang: a real SGLang package imported earlier in this
    # worker (e.g. sglang.srt.layers.attention.mamba) would otherwise make its submodules look
    # importable later and turn the hooks on them into on-import patches, test order deciding.
    for name in [n for n in sys.modules if n == "sglang" or n.startswith("sglang.")]:
        monkeypatch.delitem(sys.modules, name)
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

    eps = [EP("ascend_hybrid", "sglang_ascend_hybrid.integration.ascend_hybrid:create_ascend_hybrid_backend"),
           EP("third_party", "other.pkg:factory")]
    monkeypatch.setattr(registry, "entry_points", lambda group: eps if group == registry.GROUP else [])
    monkeypatch.setattr(apply, "installed_version", lambda dist: NEWEST_TESTED)
    # Static verification reads real sources; the fake SGLang has none, so each test decides.
    monkeypatch.setattr(patches, "verify", lambda p, version=None: None)
    # and every patch targets the fake release (no release-bounded patch is "not needed" there)
    monkeypatch.setattr(patches, "release_state", lambda p, version=None: None)
    monkeypatch.setattr(patches, "missing_requirements", lambda p: [])
    monkeypatch.delenv("SGLANG_PLUGINS", raising=False)
    monkeypatch.delenv("SGLANG_ASCEND_HYBRID_DISABLE", raising=False)
    fresh_patch_state(monkeypatch)
    yield types.SimpleNamespace(choices=choices, res=res, reg=reg, hooks=FakeHookRegistry)


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
    monkeypatch.setattr(patches, "verify",
                        lambda p, version=None: "'X' not found in fake" if p.name == broken else None)
    with caplog.at_level(logging.WARNING, logger="sglang_ascend_hybrid"):
        plugin.register()  # must not raise
    st = status.STATUS.patches[broken]
    assert st.state == status.FAILED and "not found" in st.reason
    assert any("failed" in r.getMessage() and broken_target in r.getMessage()
               for r in caplog.records for broken_target in [st.target])


def test_strict_mode_turns_failure_into_startup_error(fake_sglang, monkeypatch, caplog):
    broken = _srt_patches()[0]
    monkeypatch.setattr(patches, "verify",
                        lambda p, version=None: "gone in this release" if p.name == broken.name else None)
    plugin.register()
    with caplog.at_level(logging.WARNING, logger="sglang_ascend_hybrid"):
        apply.enforce_strict()  # plain 'ascend': warning only
    assert any(broken.target in r.getMessage() for r in caplog.records)
    mode.record_request()
    expected = re.escape(NEWEST_TESTED) + ".*" + broken.target.replace(".", r"\.")
    with pytest.raises(apply.PluginPatchError, match=expected):
        apply.enforce_strict()


def test_register_never_raises_on_unexpected_errors(fake_sglang, monkeypatch):
    def boom(patch):
        raise RuntimeError("unexpected")
    monkeypatch.setattr(apply, "_apply", boom)
    plugin.register()  # swallowed and logged


def test_untested_release_is_said_once_with_the_patches_not_applied(fake_sglang, monkeypatch, caplog):
    untested = range_bounds()[1]
    broken = _srt_patches()[0]
    monkeypatch.setattr(apply, "installed_version", lambda dist: untested)
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
        apply.enforce_strict()  # lenient under plain 'ascend'
    mode.record_request()
    with pytest.raises(apply.PluginPatchError, match=re.escape(untested) + ".*untested"):
        apply.enforce_strict()


def test_tested_release_says_nothing_about_testing(fake_sglang, caplog):
    with caplog.at_level(logging.INFO, logger="sglang_ascend_hybrid"):
        plugin.register()
    assert status.STATUS.version_problem is None
    assert not [r for r in caplog.records if "untested" in r.getMessage()]


def test_ascend_hybrid_factory_refuses_non_npu_clearly(monkeypatch):
    import sglang_ascend_hybrid.integration.ascend_hybrid as ah

    fake_utils = types.ModuleType("sglang.srt.utils")
    fake_utils.is_npu = lambda: False
    monkeypatch.setitem(sys.modules, "sglang.srt.utils", fake_utils)
    with pytest.raises(RuntimeError, match=r"'ascend_hybrid' runs only on Ascend NPUs \(--device npu\)"):
        ah.create_ascend_hybrid_backend(object())


def test_ascend_hybrid_factory_builds_the_ascend_backend_on_npu(fake_sglang, monkeypatch):
    import sglang_ascend_hybrid.integration.ascend_hybrid as ah

    fake_utils = types.ModuleType("sglang.srt.utils")
    fake_utils.is_npu = lambda: True
    monkeypatch.setitem(sys.modules, "sglang.srt.utils", fake_utils)
    plugin.register()
    with pytest.raises(apply.PluginPatchError):  # SGLang has not applied the hooks yet
        ah.create_ascend_hybrid_backend("runner")
    fake_sglang.hooks.apply_hooks()
    assert ah.create_ascend_hybrid_backend("runner") == "ascend-backend"
    assert mode.hybrid_requested()


def test_user_set_strict_env_makes_plain_ascend_strict(fake_sglang, monkeypatch):
    broken = _srt_patches()[0]
    monkeypatch.setattr(patches, "verify", lambda p, version=None: "gone" if p.name == broken.name else None)
    plugin.register()
    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_STRICT", "1")
    with pytest.raises(apply.PluginPatchError):
        apply.enforce_strict()


def _deferred_patches():
    return [p for p in patches.PATCHES if p.requires and p.runtime == "srt"]


def test_npu_module_patches_are_deferred_past_discovery(fake_sglang):
    assert _deferred_patches(), "expected patches on modules that import NPU packages"
    plugin.register()
    for p in _deferred_patches():
        assert status.STATUS.patches[p.name].state == status.DEFERRED
        assert p.target not in fake_sglang.hooks._hooks  # nothing for SGLang to import at discovery
    apply.apply_deferred()
    for p in _deferred_patches():
        assert any(h is p.load_hook() for _, h, _ in fake_sglang.hooks._hooks[p.target])
        assert status.STATUS.patches[p.name].state == status.APPLIED
    snapshot = {k: list(v) for k, v in fake_sglang.hooks._hooks.items()}
    apply.apply_deferred()  # idempotent
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
    with pytest.raises(apply.PluginPatchError, match=p.target.replace(".", r"\.")):
        apply.apply_deferred()


# ---------------------------------------------------------------------------
# Targets in modules not imported yet: put in place when SGLang imports them
# ---------------------------------------------------------------------------

LAZY_PKG = "lazydemo_pkg_t24"


class ApplyingHookRegistry(FakeHookRegistry):
    """SGLang's HookRegistry as far as the plugin relies on it: ``apply_hooks`` walks a snapshot of
    the targets, skips patched ones, resolves (imports) each target's module, then wraps it with
    the target's hook list; ``_apply_target`` is that per-target step."""

    @classmethod
    def apply_hooks(cls):
        for target, hooks in sorted(cls._hooks.items()):
            if target in cls._patched:
                continue
            cls._apply_target(target, hooks)
            cls._patched.add(target)

    @classmethod
    def _apply_target(cls, target, hooks):
        import importlib

        module_name, attr = target.rsplit(".", 1)
        module = importlib.import_module(module_name)  # resolves first, as pkgutil.resolve_name does
        wrapped = getattr(module, attr)
        for _, hook, _ in hooks:  # AROUND: hook(original, *args)
            wrapped = (lambda original, hook: lambda *a, **k: hook(original, *a, **k))(wrapped, hook)
        setattr(module, attr, wrapped)


CALLS = []


def lazy_hook(original, *args, **kwargs):
    CALLS.append("hook")
    return ("hooked", original(*args, **kwargs))


def failing_hook_loader():
    raise ImportError("hook module broke")


@pytest.fixture
def lazy_target(fake_sglang, tmp_path, monkeypatch):
    """A one-patch registry whose hook target lives in a real, not yet imported module (no import
    watched yet: ``fake_sglang``'s fresh patch state)."""
    pkg = tmp_path / LAZY_PKG
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text("IMPORTS = []\nIMPORTS.append(1)\ndef f():\n    return 'orig'\n")
    (pkg / "user.py").write_text(f"from {LAZY_PKG}.mod import f\n")
    (pkg / "broken.py").write_text("raise RuntimeError('upstream module broke')\ndef g():\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys.modules["sglang.srt.plugins.hook_registry"], "HookRegistry", ApplyingHookRegistry)
    ApplyingHookRegistry._hooks, ApplyingHookRegistry._patched = defaultdict(list), set()
    patch = patches.Patch(name="lazy-demo", target=f"{LAZY_PKG}.mod.f", kind="hook", hook_type="around",
                          hook="tests.test_plugin_unit:lazy_hook", why="w", how="h", removal="r")
    monkeypatch.setattr(patches, "PATCHES", (patch,))
    CALLS.clear()
    yield patch
    for name in [m for m in sys.modules if m.startswith(LAZY_PKG)]:
        del sys.modules[name]


def test_a_target_in_a_module_not_imported_yet_waits_for_its_import(lazy_target):
    from importlib.machinery import SourceFileLoader

    from sglang_ascend_hybrid.patches import import_watch

    plugin.register()
    assert f"{LAZY_PKG}.mod" not in sys.modules  # registration imported nothing
    st = status.STATUS.patches[lazy_target.name]
    assert (st.state, st.reason) == (apply.ON_IMPORT, f"put in place when SGLang imports {LAZY_PKG}.mod")
    apply.enforce_strict()  # waiting for an import is not a failure, even strict
    mode.record_request()
    apply.enforce_strict()

    import importlib

    user = importlib.import_module(f"{LAZY_PKG}.user")  # imports mod; its from-import copy gets the hook
    mod = sys.modules[f"{LAZY_PKG}.mod"]
    assert user.f() == ("hooked", "orig") and mod.f() == ("hooked", "orig")
    assert CALLS == ["hook", "hook"]
    assert mod.IMPORTS == [1]  # executed once
    assert type(mod.__loader__) is SourceFileLoader  # the real loader, untouched
    assert status.STATUS.patches[lazy_target.name].state == status.APPLIED
    assert lazy_target.target in ApplyingHookRegistry._patched
    assert import_watch.watched() == [] and import_watch._FINDER not in sys.meta_path
    plugin.register()  # idempotent afterwards too
    assert len(ApplyingHookRegistry._hooks[lazy_target.target]) == 1


def test_a_target_module_imported_already_is_registered_for_sglangs_apply(lazy_target):
    import importlib

    importlib.import_module(f"{LAZY_PKG}.mod")
    plugin.register()
    assert status.STATUS.patches[lazy_target.name].state == status.REGISTERED
    ApplyingHookRegistry.apply_hooks()  # what load_plugins does next
    status.STATUS.refresh_applied()
    assert status.STATUS.patches[lazy_target.name].state == status.APPLIED
    assert sys.modules[f"{LAZY_PKG}.mod"].f() == ("hooked", "orig")


def test_sglangs_apply_of_another_hook_on_the_target_wraps_ours_once(lazy_target):
    """Another plugin hooks the same target; SGLang's apply_hooks imports the module to apply
    it, which fires our callback mid-apply: ours joins that one chain (no double wrap)."""
    def someone_elses(original, *a, **k):
        CALLS.append("other")
        return original(*a, **k)

    plugin.register()
    ApplyingHookRegistry.register(lazy_target.target, someone_elses, FakeHookType.AROUND)
    ApplyingHookRegistry.apply_hooks()
    status.STATUS.refresh_applied()
    assert sys.modules[f"{LAZY_PKG}.mod"].f() == ("hooked", "orig")
    assert CALLS == ["hook", "other"]  # each hook ran once
    assert status.STATUS.patches[lazy_target.name].state == status.APPLIED


def test_a_failure_on_import_is_recorded_or_stops_strict_startup(lazy_target, monkeypatch, caplog):
    import importlib

    monkeypatch.setattr(patches.Patch, "load_hook", lambda self: failing_hook_loader())
    plugin.register()
    with caplog.at_level(logging.WARNING, logger="sglang_ascend_hybrid"):
        importlib.import_module(f"{LAZY_PKG}.mod")  # plain 'ascend': the import goes on
    st = status.STATUS.patches[lazy_target.name]
    assert (st.state, st.reason) == (status.FAILED, "ImportError: hook module broke")
    assert any("lazy-demo could not be put in place" in r.getMessage() for r in caplog.records)

    del sys.modules[f"{LAZY_PKG}.mod"]
    fresh_patch_state(monkeypatch)  # the next process
    mode.record_request()  # --attention-backend ascend_hybrid
    plugin.register()
    with pytest.raises(apply.PluginPatchError, match=r"lazydemo_pkg_t24\.mod\.f: ImportError: hook module broke"):
        importlib.import_module(f"{LAZY_PKG}.mod")


def test_import_pending_and_the_backend_build_put_every_waiting_patch_in_place(lazy_target, monkeypatch):
    broken = patches.Patch(name="lazy-broken", target=f"{LAZY_PKG}.broken.g", kind="hook", hook_type="around",
                           hook="tests.test_plugin_unit:lazy_hook", why="w", how="h", removal="r")
    monkeypatch.setattr(patches, "PATCHES", (lazy_target, broken))
    plugin.register()
    assert {s.state for s in status.STATUS.patches.values()} == {apply.ON_IMPORT}
    apply.apply_deferred()  # the first NPU attention-backend build imports what is waited for
    assert status.STATUS.patches[lazy_target.name].state == status.APPLIED
    assert status.STATUS.patches[broken.name].state == apply.ON_IMPORT  # its module cannot import
    assert apply.import_pending() == [
        f"importing {LAZY_PKG}.broken failed: RuntimeError: upstream module broke"]


def test_sglang_plugin_load_imports_no_attention_registry_and_parses_nothing_when_warm(tmp_path):
    """With the real SGLang, in fresh interpreters: plugin loading leaves SGLang's attention
    registry (and the short-conv kernels module) unimported, and once the target cache is warm
    it parses no source; importing the registry later still puts every patch in place."""
    import importlib.util
    import json
    import os
    import subprocess

    if importlib.util.find_spec("sglang") is None:
        pytest.skip("sglang is not installed")
    code = (
        "import ast, json, sys\n"
        "parsed = []\n"
        "real = ast.parse\n"
        "ast.parse = lambda src, filename='<unknown>', *a, **k: "
        "parsed.append(filename) or real(src, filename, *a, **k)\n"
        "from sglang.srt.plugins import load_plugins\n"
        "lazy = ('sglang.srt.layers.attention.attention_registry', 'sglang.srt.layers.attention.mamba.causal_conv1d')\n"
        "before = [m for m in lazy if m in sys.modules]\n"
        "load_plugins()\n"
        "from sglang_ascend_hybrid.patches.status import STATUS\n"
        "out = {'before': before, 'after': [m for m in lazy if m in sys.modules],\n"
        "       'parsed': [p for p in parsed if '/sglang/' in p],\n"
        "       'states': {n: s.state for n, s in STATUS.patches.items()}}\n"
        "import sglang.srt.layers.attention.attention_registry as reg\n"
        "import sglang.srt.models.lfm2\n"
        "out['later'] = {n: s.state for n, s in STATUS.patches.items()}\n"
        "out['factory'] = getattr(reg.ATTENTION_BACKENDS.get('ascend_hybrid'), 'entry_point', None)\n"
        "print(json.dumps(out))\n"
    )
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0", HF_HUB_OFFLINE="1", XDG_CACHE_HOME=str(tmp_path))
    env.pop("SGLANG_ASCEND_HYBRID_STRICT", None)
    runs = []
    for _ in range(2):  # cold cache, then warm
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    cold, warm = runs
    assert cold["before"] == [] and cold["after"] == [] and warm["after"] == []
    assert cold["parsed"], "the cold run should have parsed the targets (else the warm check proves nothing)"
    assert warm["parsed"] == []
    for name in ("backend-factories", "short-conv-backend", "conv1d-prefill", "conv1d-decode"):
        assert warm["states"][name] == apply.ON_IMPORT, (name, warm["states"][name])
        assert warm["later"][name] == status.APPLIED, (name, warm["later"][name])
    assert warm["factory"] == "sglang_ascend_hybrid.integration.ascend_hybrid:create_ascend_hybrid_backend"
