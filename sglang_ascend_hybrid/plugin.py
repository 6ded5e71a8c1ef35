"""SGLang plugin entry points (see pyproject.toml).

``register`` is the ``sglang.srt.plugins`` entry, called once per SGLang
process (launcher, Engine, every scheduler / detokenizer / DP-controller
subprocess).  ``register_multimodal`` is the ``sglang.multimodal_gen.plugins``
entry of the diffusion runtime.  Both are idempotent, cheap (no ``torch_npu`` /
``sgl_kernel_npu`` import, no device work) and never raise into SGLang: every
problem is recorded in :data:`sglang_ascend_hybrid.status.STATUS` and logged;
strict mode turns recorded failures into a startup error at resolution time
(:func:`enforce_strict`).
"""

from __future__ import annotations

import logging

from sglang_ascend_hybrid import __version__, patches
from sglang_ascend_hybrid.envs import ENV
from sglang_ascend_hybrid.logutil import log_once
from sglang_ascend_hybrid.status import (
    APPLIED, DEFERRED, DISABLED, FAILED, REGISTERED, SKIPPED, STATUS, UNAVAILABLE, hook_registry,
)
from sglang_ascend_hybrid.versioning import installed_version, sglang_version_problem

logger = logging.getLogger("sglang_ascend_hybrid")


def register() -> None:
    """Entry point of ``sglang.srt.plugins``."""
    try:
        _register_runtime("srt")
    except Exception:  # never raise into SGLang's plugin loader
        logger.exception("sglang-ascend-hybrid: registration failed unexpectedly")


def register_multimodal() -> None:
    """Entry point of ``sglang.multimodal_gen.plugins`` (diffusion runtime)."""
    try:
        _register_runtime("multimodal")
    except Exception:
        logger.exception("sglang-ascend-hybrid: diffusion registration failed unexpectedly")


def _register_runtime(runtime: str) -> None:
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
    if current is not None and current.state in (REGISTERED, APPLIED):
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
    try:
        hook = patch.load_hook()
        if patch.kind == "hook":
            _register_hook(patch, hook)
            STATUS.set(patch.name, patch.target, REGISTERED)
        elif patch.kind == "resolution":
            register_resolution_hook_once(patch.target, hook)
            STATUS.set(patch.name, patch.target, APPLIED)
        else:  # choices / backend_registry: the hook performs the change itself
            hook()
            STATUS.set(patch.name, patch.target, APPLIED)
    except Exception as exc:
        STATUS.set(patch.name, patch.target, FAILED, f"{type(exc).__name__}: {exc}")


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
    """Apply the patches whose targets live in modules importing NPU packages.

    Called when SGLang builds the attention backend on NPU (from the
    ``attn_backend_wrapper`` hook), where those modules are imported anyway.
    Idempotent; failures are recorded, and stop startup in strict mode.
    """
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
    from sglang_ascend_hybrid.mode import hybrid_requested

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
