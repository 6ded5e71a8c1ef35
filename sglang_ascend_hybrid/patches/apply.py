"""Putting the patches of :data:`sglang_ascend_hybrid.patches.PATCHES` in place in this process.

:func:`register_runtime` is what SGLang's plugin entry points (:mod:`sglang_ascend_hybrid.plugin`)
run, once per SGLang process (launcher, Engine, every scheduler / detokenizer / DP-controller
subprocess).  It is idempotent, cheap (no ``torch_npu`` / ``sgl_kernel_npu`` import, no device
work) and records every problem in :data:`sglang_ascend_hybrid.patches.status.STATUS`; strict mode
(:mod:`sglang_ascend_hybrid.patches.mode`) turns recorded failures into a startup error at
resolution time (:func:`enforce_strict`).

Registration imports nothing SGLang's process has not imported already: every target is verified
statically from its source (parsed once per file content,
:mod:`sglang_ascend_hybrid.patches.definitions_cache`); a hook or backend-registry patch whose
target module is not imported yet is put in place the moment SGLang imports that module
(:mod:`sglang_ascend_hybrid.patches.import_watch`; state :data:`ON_IMPORT` until then), so a
process that never imports SGLang's attention registry (the launcher, the detokenizer) never pays
for it.  :func:`import_pending` imports those modules now (``doctor`` does, to report every patch
in place).  Patches whose targets live in modules importing NPU packages wait (state ``DEFERRED``)
until SGLang builds the attention backend on NPU (:func:`apply_deferred`).
"""

from __future__ import annotations

import importlib
import logging

from sglang_ascend_hybrid import __version__, patches
from sglang_ascend_hybrid.envs import ENV
from sglang_ascend_hybrid.logutil import log_once
from sglang_ascend_hybrid.patches import import_watch
from sglang_ascend_hybrid.patches.releases import installed_version, sglang_version_problem
from sglang_ascend_hybrid.patches.status import (
    APPLIED,
    DEFERRED,
    DISABLED,
    FAILED,
    NOT_APPLIED,
    REGISTERED,
    SKIPPED,
    STATUS,
    UNAVAILABLE,
    hook_registry,
)

logger = logging.getLogger("sglang_ascend_hybrid")

# Verified; put in place when SGLang imports the target's module (not imported in this process
# yet).  Not a failure in strict mode: nothing can call the target before that import.
ON_IMPORT = "on import"


def register_runtime(runtime: str) -> None:
    """Verify and put in place every patch of ``runtime`` (``"srt"`` or ``"multimodal"``), or
    record why not; logs a one-line summary."""
    if ENV.DISABLE.get():
        STATUS.disabled = True
        for p in patches.PATCHES:
            if p.runtime == runtime:
                STATUS.set(p.name, p.target, DISABLED, "SGLANG_ASCEND_HYBRID_DISABLE=1")
        logger.info("sglang-ascend-hybrid %s: disabled by %s=1", __version__, ENV.DISABLE.name)
        return
    STATUS.sglang_version = installed_version("sglang")
    STATUS.version_problem = sglang_version_problem(STATUS.sglang_version)
    if STATUS.sglang_version is None:
        return
    for patch in patches.PATCHES:
        if patch.runtime == runtime:
            _apply(patch)
    STATUS.refresh_applied()
    level = logging.WARNING if STATUS.in_state(FAILED) else logging.INFO
    logger.log(level, "sglang-ascend-hybrid %s: %s", __version__, STATUS.summary())
    if STATUS.version_problem:
        warn_untested_release()


def warn_untested_release() -> None:
    """One WARNING per process on an SGLang release outside the tested range: the
    plugin still verified every target and applied what it could; say which
    patches did not apply (strict mode then stops on the failed ones)."""
    not_applied = STATUS.in_state(FAILED, UNAVAILABLE)
    log_once(
        logger,
        ("untested-sglang-release", STATUS.sglang_version),
        "sglang-ascend-hybrid %s: %s; every patch target was verified and what exists was applied; %s",
        __version__,
        STATUS.version_problem,
        ("patches not applied: " + "; ".join(f"{p.name} ({p.target}: {p.reason})" for p in not_applied))
        if not_applied else "every patch applied",
        level=logging.WARNING,
    )


def _apply(patch: patches.Patch) -> None:
    current = STATUS.patches.get(patch.name)
    if current is not None and current.state in (REGISTERED, APPLIED, ON_IMPORT):
        return  # idempotent
    on_release = patches.release_state(patch, STATUS.sglang_version)
    if on_release is not None:  # this release takes another route (or offers no mechanism)
        STATUS.set(patch.name, patch.target, *on_release)
        return
    missing = patches.missing_requirements(patch)
    if missing:
        STATUS.set(patch.name, patch.target, SKIPPED, f"needs {', '.join(missing)} (not installed)")
        return
    problem = patches.verify(patch, STATUS.sglang_version)
    if problem:
        STATUS.set(patch.name, patch.target, FAILED, problem)
        return
    if patch.requires:  # its module imports NPU packages: apply on first NPU backend build
        STATUS.set(patch.name, patch.target, DEFERRED)
        return
    module = _lazy_module(patch)
    if module is not None:
        STATUS.set(patch.name, patch.target, ON_IMPORT, f"put in place when SGLang imports {module}")
        import_watch.when_imported(module, lambda _module, patch=patch: _apply_on_import(patch))
        return
    try:
        STATUS.set(patch.name, patch.target, install(patch))
    except Exception as exc:
        STATUS.set(patch.name, patch.target, FAILED, f"{type(exc).__name__}: {exc}")


def install(patch: patches.Patch) -> str:
    """Put one verified patch in place and return its state: the one path every hook takes into
    SGLang (registration, and tools that put a registry patch in place themselves, e.g.
    ``testing.launch_check.register_launch_hooks``).  Idempotent."""
    hook = patch.load_hook()
    if patch.kind == "hook":
        _register_hook(patch, hook)
        return REGISTERED
    if patch.kind == "resolution":
        register_resolution_hook_once(patch.target, hook)
        return APPLIED
    hook()  # choices / backend_registry: the hook performs the change itself
    return APPLIED


def _lazy_module(patch: patches.Patch) -> str | None:
    """The module whose import puts ``patch`` in place, when that should wait: an srt hook or
    backend-registry patch whose target module is not imported yet (but can be)."""
    if patch.runtime != "srt" or patch.kind not in ("hook", "backend_registry"):
        return None
    module = patches.target_module(patch.target)
    return module if module is not None and import_watch.importable_later(module) else None


def _apply_on_import(patch: patches.Patch) -> None:
    """Run right after SGLang imported the target's module (before the importer gets it)."""
    try:
        hook = patch.load_hook()
        if patch.kind == "hook":
            registry = hook_registry(patch.runtime)
            _register_hook(patch, hook)
            if _applying_now(registry, patch.target, hook):
                STATUS.set(patch.name, patch.target, REGISTERED)
            else:
                _apply_target(registry, patch.target)
                STATUS.set(patch.name, patch.target, APPLIED)
        else:  # backend_registry: the hook performs the change itself
            hook()
            STATUS.set(patch.name, patch.target, APPLIED)
    except Exception as exc:
        STATUS.set(patch.name, patch.target, FAILED, f"{type(exc).__name__}: {exc}")
        logger.warning("sglang-ascend-hybrid %s: %s could not be put in place on import of its module: %s",
                       __version__, patch.name, STATUS.patches[patch.name].reason)
        from sglang_ascend_hybrid.patches.mode import hybrid_requested

        if hybrid_requested():
            enforce_strict()  # raises PluginPatchError: this import is part of startup


def _applying_now(registry, target: str, ours) -> bool:
    """Whether SGLang's HookRegistry is applying ``target`` at this moment: another plugin's hook
    on it, not yet applied, means its ``apply_hooks`` is importing the module (that is the only
    way the module gets imported with such a hook pending) and will build the chain from the
    same list, ours included; applying it here too would wrap it twice."""
    return target not in registry._patched and any(h is not ours for _, h, _ in registry._hooks.get(target, ()))


def _apply_target(registry, target: str) -> None:
    """Apply the hooks of ``target`` alone, as SGLang's ``apply_hooks`` does for each target."""
    if target in registry._patched:
        raise RuntimeError(f"SGLang's HookRegistry already applied {target} without this hook")
    apply_one = getattr(registry, "_apply_target", None)
    if apply_one is None:  # a registry without the per-target step: apply whatever is pending
        registry.apply_hooks()
    else:
        apply_one(target, registry._hooks[target])
        registry._patched.add(target)
    if target not in registry._patched:
        raise RuntimeError(NOT_APPLIED)


def import_pending() -> list[str]:
    """Import every module a patch waits for (:data:`ON_IMPORT`), as a process that runs a model
    does, so that every patch is in place and its state final; returns one line per module that
    failed to import.  For ``doctor`` and tests: a server never needs it."""
    errors = []
    for name in import_watch.watched():
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001  (reported, never raised into doctor)
            errors.append(f"importing {name} failed: {type(exc).__name__}: {exc}")
    STATUS.refresh_applied()
    return errors


def _register_hook(patch: patches.Patch, hook) -> None:
    from sglang.srt.plugins.hook_registry import HookType

    HookRegistry = hook_registry(patch.runtime)
    if HookRegistry is None:
        raise RuntimeError(f"SGLang's hook registry for the {patch.runtime} runtime is not importable")
    hook_type = HookType[patch.hook_type.upper()]
    if any(h is hook for _, h, _ in HookRegistry._hooks.get(patch.target, ())):
        return
    HookRegistry.register(patch.target, hook, hook_type)


def register_resolution_hook_once(step: str, hook) -> None:
    """Register ``hook`` on SGLang's resolution ``step`` unless it is already there."""
    from sglang.srt.arg_groups import resolution_hooks

    if hook in resolution_hooks._HOOKS.get(step, ()):
        return
    resolution_hooks.register_resolution_hook(step)(hook)


def apply_deferred() -> None:
    """Apply the patches whose targets live in modules importing NPU packages, and put in
    place those still waiting for their module's import (:data:`ON_IMPORT`: that module is
    imported now, a few hundredths of a second in a process about to run a model).

    Called when SGLang builds the attention backend on NPU (from the
    ``attn_backend_wrapper`` hook), where those modules are imported anyway.
    Idempotent; failures are recorded, and stop startup in strict mode.
    """
    if import_watch.watched():
        for problem in import_pending():
            logger.warning("sglang-ascend-hybrid: %s", problem)
    deferred = STATUS.in_state(DEFERRED)
    if not deferred:
        return
    for st in deferred:
        patch = patches.by_name(st.name)
        try:
            _register_hook(patch, patch.load_hook())
            STATUS.set(patch.name, patch.target, REGISTERED)
        except Exception as exc:
            STATUS.set(patch.name, patch.target, FAILED, f"{type(exc).__name__}: {exc}")
    for runtime in {patches.by_name(st.name).runtime for st in deferred}:
        registry = hook_registry(runtime)
        if registry is not None:
            registry.apply_hooks()
    enforce_strict()
    logger.info("sglang-ascend-hybrid: applied the NPU-backend patches: %s", STATUS.summary())


class PluginPatchError(RuntimeError):
    pass


def enforce_strict() -> None:
    """Called at resolution once SGLang has applied hooks: under ascend_hybrid any
    patch that is not in place stops startup; under plain 'ascend' it is a warning."""
    from sglang_ascend_hybrid.patches.mode import hybrid_requested

    STATUS.fail_unapplied()
    failed = STATUS.in_state(FAILED)
    if not failed:
        return
    # The untested-release WARNING itself is logged once at registration (warn_untested_release).
    version = STATUS.sglang_version + (" (an untested release)" if STATUS.version_problem else "")
    text = (f"sglang-ascend-hybrid {__version__} could not apply its patches on SGLang {version}: "
            + "; ".join(f"{p.target}: {p.reason}" for p in failed))
    if hybrid_requested():
        raise PluginPatchError(
            text + ". --attention-backend ascend_hybrid requires every patch; install a tested SGLang "
            "release or use --attention-backend ascend to continue with these fixes missing."
        )
    logger.warning("%s; continuing because --attention-backend is not ascend_hybrid", text)
