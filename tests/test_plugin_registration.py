"""Plugin / strict-mode properties the other plugin tests leave unchecked (found by mutation testing):

* ``register`` and ``register_multimodal`` never raise, and the swallowed error is logged
  with its traceback (a silent swallow fails);
* strict mode reaches subprocesses: a child Python started after ``record_request`` (as SGLang
  starts its scheduler / detokenizer) sees it, one started before it or after ``forget_request`` does not;
* the in-process record stands on its own (an environment rewritten later does not undo it).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_ascend_hybrid import plugin
from sglang_ascend_hybrid.envs import ENV
from sglang_ascend_hybrid.patches import apply, mode
from tests.support.fresh_state import fresh_patch_state
from tests.test_plugin_unit import fake_sglang  # noqa: F401  (fixture)

PACKAGE_ROOT = str(Path(mode.__file__).resolve().parent.parent)


@pytest.mark.parametrize("entry,text", [("register", "registration failed unexpectedly"),
                                        ("register_multimodal", "diffusion registration failed unexpectedly")])
def test_registration_never_raises_and_logs_the_error(entry, text, fake_sglang, monkeypatch,  # noqa: F811
                                                      caplog):
    def boom(runtime):
        raise RuntimeError("unexpected internal state")

    monkeypatch.setattr(plugin, "register_runtime", boom)
    with caplog.at_level(logging.ERROR, logger="sglang_ascend_hybrid"):
        getattr(plugin, entry)()  # must not raise
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert text in errors[0].getMessage()
    assert errors[0].exc_info is not None and "unexpected internal state" in str(errors[0].exc_info[1])


def _child_sees_strict(env) -> str:
    """What a fresh Python process (SGLang's subprocesses) reports; it imports the same copy of
    the package as this process."""
    env = dict(env)
    env["PYTHONPATH"] = os.pathsep.join([PACKAGE_ROOT, env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", "from sglang_ascend_hybrid.patches import mode; "
                          "print(mode.hybrid_requested())"],
                         env=env, capture_output=True, text=True, timeout=120, check=True)
    return out.stdout.strip()


def test_strict_mode_is_inherited_by_subprocesses(monkeypatch):
    fresh_patch_state(monkeypatch)  # not requested, the variable unset; both as they were after the test
    assert _child_sees_strict(os.environ) == "False"
    mode.record_request()
    assert os.environ[ENV.STRICT.name] == "1"
    assert _child_sees_strict(os.environ) == "True"
    mode.forget_request()
    assert ENV.STRICT.name not in os.environ and not mode.hybrid_requested()
    assert _child_sees_strict(os.environ) == "False"


def test_in_process_record_does_not_depend_on_the_environment(monkeypatch):
    fresh_patch_state(monkeypatch)
    assert not mode.hybrid_requested()
    mode.record_request()
    os.environ[ENV.STRICT.name] = "0"  # e.g. a launcher rewriting the environment later
    assert mode.hybrid_requested() is True


# ------------------------------------------------------------------ what registration records

from sglang_ascend_hybrid import patches  # noqa: E402
from sglang_ascend_hybrid.patches import status  # noqa: E402


def _srt():
    return [p for p in patches.PATCHES if p.runtime == "srt"]


def _failing_load(monkeypatch, name, exc):
    original = patches.Patch.load_hook

    def load_hook(self):
        if self.name == name:
            raise exc
        return original(self)

    monkeypatch.setattr(patches.Patch, "load_hook", load_hook)


def test_missing_requirements_are_recorded_with_target_and_reason(fake_sglang, monkeypatch):  # noqa: F811
    victim = next(p for p in _srt() if not p.requires)
    monkeypatch.setattr(patches, "missing_requirements",
                        lambda p: ["torch_npu", "sgl_kernel_npu"] if p.name == victim.name else [])
    plugin.register()
    st = status.STATUS.patches[victim.name]
    assert (st.name, st.target, st.state, st.reason) == (
        victim.name, victim.target, status.SKIPPED, "needs torch_npu, sgl_kernel_npu (not installed)")


@pytest.mark.parametrize("kind", ["hook", "resolution", "choices"])
def test_a_hook_that_fails_to_load_is_recorded_failed(kind, fake_sglang, monkeypatch):  # noqa: F811
    victim = next(p for p in _srt() if p.kind == kind and not p.requires)
    _failing_load(monkeypatch, victim.name, ImportError("no module named 'x'"))
    plugin.register()
    st = status.STATUS.patches[victim.name]
    assert (st.name, st.target, st.state, st.reason) == (
        victim.name, victim.target, status.FAILED, "ImportError: no module named 'x'")
    others = [status.STATUS.patches[p.name] for p in _srt() if p.name != victim.name]
    assert all(s.state != status.FAILED for s in others)


def test_every_applied_or_registered_patch_records_its_target(fake_sglang):  # noqa: F811
    plugin.register()
    for p in _srt():
        st = status.STATUS.patches[p.name]
        assert st.target == p.target, p.name
        expected = (status.DEFERRED if p.requires else
                    status.REGISTERED if p.kind == "hook" else status.APPLIED)
        assert st.state == expected, p.name


def test_a_second_register_does_not_reload_any_hook(fake_sglang, monkeypatch):  # noqa: F811
    original = patches.Patch.load_hook
    loads = []

    def load_hook(self):
        loads.append(self.name)
        return original(self)

    monkeypatch.setattr(patches.Patch, "load_hook", load_hook)
    plugin.register()
    first = sorted(loads)
    plugin.register()
    assert sorted(loads) == first and len(first) == len(set(first)) > 0


def test_another_hook_on_the_target_does_not_stop_ours(fake_sglang):  # noqa: F811
    victim = next(p for p in _srt() if p.kind == "hook" and not p.requires)

    def someone_elses(*a, **kw):
        return None

    fake_sglang.hooks._hooks[victim.target].append((None, someone_elses, None))
    plugin.register()
    hooks = [h for _, h, _ in fake_sglang.hooks._hooks[victim.target]]
    assert hooks[0] is someone_elses and any(h is victim.load_hook() for h in hooks[1:])


def test_disabled_registration_records_why(fake_sglang, monkeypatch):  # noqa: F811
    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_DISABLE", "1")
    plugin.register()
    assert status.STATUS.disabled is True
    for p in _srt():
        st = status.STATUS.patches[p.name]
        assert (st.target, st.state, st.reason) == (p.target, status.DISABLED, "SGLANG_ASCEND_HYBRID_DISABLE=1")


def test_the_installed_sglang_distribution_is_what_is_asked(fake_sglang, monkeypatch):  # noqa: F811
    version = apply.installed_version("sglang")  # the fixture's
    asked = []
    monkeypatch.setattr(apply, "installed_version", lambda dist: asked.append(dist) or (
        version if dist == "sglang" else None))
    plugin.register()
    assert asked == ["sglang"] and status.STATUS.sglang_version == version
    assert status.STATUS.patches  # went on to the patches


def test_a_clean_registration_logs_info_not_warning(fake_sglang, caplog):  # noqa: F811
    with caplog.at_level(logging.INFO, logger="sglang_ascend_hybrid"):
        plugin.register()
    mine = [r for r in caplog.records if r.name == "sglang_ascend_hybrid"]
    assert [r.levelno for r in mine] == [logging.INFO]
    assert status.STATUS.summary() in mine[0].getMessage()


def test_multimodal_patches_go_to_the_diffusion_hook_registry(fake_sglang, monkeypatch):  # noqa: F811
    import types
    from collections import defaultdict

    class DiffusionRegistry:
        _hooks = defaultdict(list)
        _patched = set()

        @classmethod
        def register(cls, target, hook, hook_type):
            cls._hooks[target].append((hook_type, hook, None))

    mod = types.ModuleType("sglang.multimodal_gen.runtime.platforms.plugins")
    mod.HookRegistry = DiffusionRegistry
    monkeypatch.setitem(sys.modules, "sglang.multimodal_gen.runtime.platforms.plugins", mod)
    mm = [p for p in patches.PATCHES if p.runtime == "multimodal"]
    assert mm
    plugin.register_multimodal()
    for p in mm:
        assert status.STATUS.patches[p.name].state == status.REGISTERED
        assert any(h is p.load_hook() for _, h, _ in DiffusionRegistry._hooks[p.target])
        assert p.target not in fake_sglang.hooks._hooks
    assert all(p.name not in status.STATUS.patches for p in _srt())  # the diffusion entry leaves srt alone


def test_deferred_patch_that_fails_is_recorded_and_the_rest_applied(fake_sglang, monkeypatch):  # noqa: F811
    plugin.register()
    deferred = [p for p in _srt() if p.requires]
    assert len(deferred) >= 2
    victim = deferred[0]
    _failing_load(monkeypatch, victim.name, ImportError("torch_npu"))
    apply.apply_deferred()  # plain 'ascend': recorded, not raised
    st = status.STATUS.patches[victim.name]
    assert (st.target, st.state, st.reason) == (victim.target, status.FAILED, "ImportError: torch_npu")
    for p in deferred[1:]:
        assert status.STATUS.patches[p.name].state == status.APPLIED
        assert p.target in fake_sglang.hooks._patched  # SGLang's registry applied them


def test_strict_error_names_every_failure_and_the_way_out(fake_sglang, monkeypatch):  # noqa: F811
    broken = [p for p in _srt() if p.kind != "hook"][:2]
    monkeypatch.setattr(patches, "verify", lambda p, *_a, **_k: f"{p.name} gone" if p in broken else None)
    plugin.register()
    mode.record_request()
    with pytest.raises(apply.PluginPatchError) as err:
        apply.enforce_strict()
    text = str(err.value)
    assert f"could not apply its patches on SGLang {status.STATUS.sglang_version}: " in text
    assert f"{broken[0].target}: {broken[0].name} gone; {broken[1].target}: {broken[1].name} gone; " in text
    assert text.endswith(". --attention-backend ascend_hybrid requires every patch; install a tested SGLang "
                         "release or use --attention-backend ascend to continue with these fixes missing.")


def test_an_unimportable_hook_registry_is_recorded_failed(fake_sglang, monkeypatch):  # noqa: F811
    """No diffusion runtime (its registry module does not import): its patches fail with the
    reason named."""
    monkeypatch.setitem(sys.modules, "sglang.multimodal_gen.runtime.platforms.plugins", None)
    plugin.register_multimodal()
    for p in (p for p in patches.PATCHES if p.runtime == "multimodal"):
        st = status.STATUS.patches[p.name]
        assert (st.state, st.reason) == (
            status.FAILED, "RuntimeError: SGLang's hook registry for the multimodal runtime is not importable")


def test_registration_never_puts_a_hook_twice_on_a_target(fake_sglang, monkeypatch):  # noqa: F811
    """Even when the status is fresh again (a re-imported plugin), SGLang's registry keeps one
    copy of each hook."""
    plugin.register()
    fresh_patch_state(monkeypatch)
    plugin.register()
    for p in (p for p in _srt() if p.kind == "hook" and not p.requires):
        assert sum(h is p.load_hook() for _, h, _ in fake_sglang.hooks._hooks[p.target]) == 1, p.name
