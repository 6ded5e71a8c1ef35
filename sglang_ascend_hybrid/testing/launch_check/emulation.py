"""NPU platform emulation for SGLang's startup resolution on a machine without an NPU.

What is emulated (:func:`emulated_npu_platform`):

* the environment SGLang reads during resolution: ``HF_HUB_OFFLINE=1``,
  ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` and ``SGLANG_ZBAL_LOCAL_MEM_SIZE`` (NPU
  memory in MB, read instead of querying the device);
* an importable ``torch_npu``: when none is installed, an empty temporary
  module is put in ``sys.modules`` for the duration (nothing is installed);
* NPU platform detection: ``get_platform()`` facts through SGLang's own
  ``override_platform`` (``is_npu`` true, the other accelerators false), the
  lazily resolved ``current_platform`` object (an ``NPUSRTPlatform``) in
  ``sglang.srt.platforms`` and in every already-imported SGLang module that
  bound it, and ``sglang.srt.utils.common.is_npu`` for direct callers.

Everything is restored on exit.  SGLang modules that evaluate ``is_npu()`` at
import time are imported *before* the emulation starts so they keep their CPU
answer; still, resolution touches process-global state (hook registries,
memoized model configs, logging), so tests run it in a subprocess through
:func:`.isolated.resolve_isolated`.

Nothing here imports SGLang at module import time.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import pkgutil
import sys
import types
from typing import Any, Iterator

from sglang_ascend_hybrid.envs import temporary_env

logger = logging.getLogger(__name__)

# NPU memory (MB) reported to SGLang's NPU defaults: 64 GiB, an Atlas A2 /
# 910B-class card (set_default_server_args buckets at 32 GiB and 64 GiB).
DEFAULT_NPU_MEMORY_MB = 65536

RESOLUTION_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TORCH_DEVICE_BACKEND_AUTOLOAD": "0",
}

# Modules whose import-time state must be settled before NPU emulation starts.
_PREIMPORT = (
    "sglang.srt.server_args",
    "sglang.srt.platforms",
    "sglang.srt.platforms.npu",
    "sglang.srt.runtime_context",
    "sglang.srt.utils.common",
    "sglang.srt.configs.model_config",
    "sglang.srt.hardware_backend.npu.utils",
)
_PREIMPORT_PACKAGES = ("sglang.srt.arg_groups", "sglang.srt.arg_groups.model_overrides")

_PLATFORM_FACTS_NPU = dict(
    is_npu=True,
    is_cuda=False,
    is_hip=False,
    is_xpu=False,
    is_musa=False,
    is_mps=False,
    is_sm90=False,
    is_sm100=False,
    is_sm100_or_sm110=False,
    is_sm110=False,
    is_sm120=False,
    is_blackwell=False,
    is_hopper_with_cuda_12_3=False,
    has_flashinfer=False,
)


def platform_facts_npu() -> dict[str, Any]:
    """The NPU facts this SGLang release knows: releases differ in their fact list
    (``is_mps`` / ``is_sm110`` appeared in 0.5.22) and reject unknown ones."""
    from sglang.srt import runtime_context

    probes = getattr(runtime_context, "_PLATFORM_PROBES", None)
    if probes is None:  # a release without the table: pass every fact and let it say
        return dict(_PLATFORM_FACTS_NPU)
    known = set(probes) | set(getattr(runtime_context, "_PLATFORM_VALUES", {}))
    return {k: v for k, v in _PLATFORM_FACTS_NPU.items() if k in known}


def _preimport() -> None:
    for name in _PREIMPORT:
        importlib.import_module(name)
    for pkg_name in _PREIMPORT_PACKAGES:
        pkg = importlib.import_module(pkg_name)
        for info in pkgutil.iter_modules(pkg.__path__):
            try:
                importlib.import_module(f"{pkg_name}.{info.name}")
            except Exception:  # pragma: no cover - optional upstream pieces
                logger.debug("pre-import of %s.%s failed", pkg_name, info.name, exc_info=True)
    # Modules imported lazily from inside the pipeline.
    for name in (
        "sglang.srt.kernel_plugins.amd.binding",
        "sglang.srt.kernel_plugins.nvidia.binding",
    ):
        with contextlib.suppress(Exception):
            importlib.import_module(name)


@contextlib.contextmanager
def _importable_torch_npu() -> Iterator[bool]:
    """Yield True when a temporary empty ``torch_npu`` module was inserted."""
    if "torch_npu" in sys.modules:
        yield False
        return
    import importlib.util

    if importlib.util.find_spec("torch_npu") is not None:
        # A real (or test-stub) torch_npu is importable; leave it alone.
        yield False
        return
    import importlib.machinery

    stub = types.ModuleType("torch_npu")
    # A spec keeps importlib.util.find_spec("torch_npu") (transformers probes it) working.
    stub.__spec__ = importlib.machinery.ModuleSpec("torch_npu", loader=None)
    stub.__doc__ = "Temporary empty torch_npu from sglang_ascend_hybrid.testing.launch_check."
    stub.__version__ = "0.0.0+launch-check"
    sys.modules["torch_npu"] = stub
    try:
        yield True
    finally:
        if sys.modules.get("torch_npu") is stub:
            del sys.modules["torch_npu"]


@contextlib.contextmanager
def emulated_npu_platform(npu_memory_mb: int = DEFAULT_NPU_MEMORY_MB) -> Iterator[None]:
    """Make SGLang's startup resolution take its NPU branches on a CPU machine."""
    env = dict(RESOLUTION_ENV)
    env["SGLANG_ZBAL_LOCAL_MEM_SIZE"] = str(int(npu_memory_mb))
    with temporary_env(env):
        _preimport()
    with temporary_env(env), _importable_torch_npu():
        import sglang.srt.platforms as platforms_mod
        import sglang.srt.utils as utils_pkg
        import sglang.srt.utils.common as common
        from sglang.srt.platforms.npu import NPUSRTPlatform
        from sglang.srt.runtime_context import override_platform

        original_platform = platforms_mod.current_platform  # resolves the lazy singleton
        npu_platform = NPUSRTPlatform()
        original_is_npu = common.is_npu

        def _emulated_is_npu() -> bool:
            return True

        rebound: list[tuple[types.ModuleType, str, Any]] = []
        for mod in list(sys.modules.values()):
            if not isinstance(mod, types.ModuleType):
                continue
            if not (getattr(mod, "__name__", "") or "").startswith("sglang"):
                continue
            d = getattr(mod, "__dict__", {})
            if d.get("current_platform") is original_platform:
                rebound.append((mod, "current_platform", original_platform))
            if d.get("is_npu") is original_is_npu:
                rebound.append((mod, "is_npu", original_is_npu))

        saved_private = platforms_mod.__dict__.get("_current_platform")
        try:
            platforms_mod._current_platform = npu_platform
            for mod, name, _orig in rebound:
                setattr(mod, name, npu_platform if name == "current_platform" else _emulated_is_npu)
            with override_platform(**platform_facts_npu()):
                yield
        finally:
            for mod, name, orig in rebound:
                setattr(mod, name, orig)
            platforms_mod._current_platform = saved_private
            # utils re-exports common.is_npu; make sure both are original again.
            if getattr(utils_pkg, "is_npu", None) is _emulated_is_npu:  # pragma: no cover
                utils_pkg.is_npu = original_is_npu
