"""Launch-resolution harness: run SGLang's real server-argument resolution for
``--device npu`` on a machine without an NPU.

Used by the tests (``tests/integration/test_launch_resolution.py`` and the other
resolution tests), and runnable by an operator, to answer "would ``sglang serve
--device npu ...`` get through startup resolution with this model, and what did
the plugin adjust?" without loading weights or touching a device.  The plugin's
own code (its discovery, backends and CLI) never imports it.

What is emulated (see :func:`emulated_npu_platform`):

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
:func:`resolve_isolated`.

Nothing here imports SGLang at module import time.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import logging
import os
import pkgutil
import subprocess
import sys
import traceback
import types
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

from sglang_ascend_hybrid.envs import temporary_env

logger = logging.getLogger(__name__)

# NPU memory (MB) reported to SGLang's NPU defaults: 64 GiB, an Atlas A2 /
# 910B-class card (set_default_server_args buckets at 32 GiB and 64 GiB).
DEFAULT_NPU_MEMORY_MB = 65536

RESOLUTION_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TORCH_DEVICE_BACKEND_AUTOLOAD": "0",
}

# Fields reported in LaunchResult.resolved.
REPORTED_FIELDS = (
    "attention_backend",
    "prefill_attention_backend",
    "decode_attention_backend",
    "page_size",
    "disable_radix_cache",
    "mamba_radix_cache_strategy",
    "uses_mamba_radix_cache",
    "disable_overlap_schedule",
    "linear_attn_backend",
    "chunked_prefill_size",
    "tp_size",
    "device",
    "mamba_ssm_dtype",
    "speculative_algorithm",
)

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


@dataclass
class LaunchResult:
    """Outcome of one resolution."""

    argv: list[str]
    ok: bool
    resolved: dict[str, Any] = field(default_factory=dict)
    adjustments: list[str] = field(default_factory=list)
    log_lines: list[str] = field(default_factory=list)
    error_type: Optional[str] = None
    error: Optional[str] = None
    # Did the plugin record a request for ascend_hybrid (strict mode) during resolution?
    hybrid_requested: bool = False
    server_args: Any = field(default=None, repr=False, compare=False)

    def to_json(self) -> dict:
        out = asdict(self)
        out.pop("server_args", None)
        return out


# --------------------------------------------------------------------------
# NPU emulation
# --------------------------------------------------------------------------


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


# --------------------------------------------------------------------------
# Resolution
# --------------------------------------------------------------------------


def build_argv(
    model_path: str | os.PathLike,
    *,
    tp_size: int = 1,
    attention_backend: Optional[str] = "ascend",
    extra_args: Sequence[str] = (),
    device: str = "npu",
) -> list[str]:
    argv = [
        "--model-path", str(model_path),
        "--tp-size", str(int(tp_size)),
        "--device", device,
        "--skip-tokenizer-init",
    ]
    if attention_backend is not None:
        argv += ["--attention-backend", attention_backend]
    argv += list(extra_args)
    return argv


class _ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextlib.contextmanager
def _preserve_root_logging() -> Iterator[None]:
    """prepare_server_args calls logging.basicConfig(force=True); undo it."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        for h in list(root.handlers):
            if h not in handlers:
                root.removeHandler(h)
                with contextlib.suppress(Exception):
                    h.close()
        for h in handlers:
            if h not in root.handlers:
                root.addHandler(h)
        root.setLevel(level)


def register_launch_hooks() -> list[str]:
    """Register the plugin's launch hook with SGLang's resolution pipeline (idempotent), through
    the path plugin registration takes.

    Returns the names of the steps hooked.  Raises ``ValueError`` if SGLang no
    longer offers the step as overridable.
    """
    from sglang_ascend_hybrid import patches
    from sglang_ascend_hybrid.patches import apply
    from sglang_ascend_hybrid.integration.launch.registration import LAUNCH_PATCH

    patch = patches.by_name(LAUNCH_PATCH)
    apply.install(patch)  # the path registration takes
    return [patch.target]


@contextlib.contextmanager
def launch_hooks_suspended() -> Iterator[None]:
    """Temporarily take the launch hooks out of SGLang's registry (SGLang's own resolution)."""
    from sglang.srt.arg_groups import resolution_hooks

    from sglang_ascend_hybrid.integration.launch.registration import launch_hooks

    removed: list[tuple[str, int, Callable]] = []
    for step, fn in launch_hooks():
        chain = resolution_hooks._HOOKS.get(step, [])
        while fn in chain:
            i = chain.index(fn)
            chain.pop(i)
            removed.append((step, i, fn))
    try:
        yield
    finally:
        for step, i, fn in reversed(removed):
            resolution_hooks._HOOKS.setdefault(step, []).insert(i, fn)


@contextlib.contextmanager
def _hooks_state(register_hooks: bool) -> Iterator[None]:
    """Register the plugin's launch hooks, or hide them, for one resolution."""

    if register_hooks:
        register_launch_hooks()
        yield
    else:
        with launch_hooks_suspended():
            yield


def _resolved_fields(server_args: Any) -> dict[str, Any]:
    from sglang.srt.arg_groups.overrides import resolution_result

    out = {}
    for name in REPORTED_FIELDS:
        try:
            value = resolution_result(server_args, name)
        except Exception:  # pragma: no cover - field missing upstream
            continue
        if isinstance(value, (str, int, float, bool)) or value is None:
            out[name] = value
        else:
            out[name] = repr(value)
    return out


def resolve_launch(
    model_path: str | os.PathLike,
    *,
    tp_size: int = 1,
    attention_backend: Optional[str] = "ascend",
    extra_args: Sequence[str] = (),
    register_hooks: bool = True,
    load_plugins: bool = False,
    npu_memory_mb: int = DEFAULT_NPU_MEMORY_MB,
    argv: Optional[Sequence[str]] = None,
) -> LaunchResult:
    """Run ``prepare_server_args(argv)`` + ``resolve_once()`` in this process
    under NPU emulation.  Never raises for a resolution failure: the result
    carries ``ok=False`` with the exception type and message.

    ``register_hooks`` registers this plugin's launch-resolution hooks (False
    hides them, to see upstream's own behaviour); ``load_plugins`` runs
    SGLang's ``load_plugins()`` first (what ``sglang serve`` does), so the whole
    installed plugin takes part.
    """
    if argv is None:
        argv = build_argv(
            model_path, tp_size=tp_size, attention_backend=attention_backend, extra_args=extra_args
        )
    argv = list(argv)
    capture = _ListHandler()
    plugin_logger = logging.getLogger("sglang_ascend_hybrid")
    old_level = plugin_logger.level
    plugin_logger.addHandler(capture)
    if plugin_logger.getEffectiveLevel() > logging.INFO:
        plugin_logger.setLevel(logging.INFO)
    result = LaunchResult(argv=argv, ok=False)
    from sglang_ascend_hybrid.patches import mode

    mode._reset_for_tests()  # each resolution starts as a fresh launch would
    try:
        with emulated_npu_platform(npu_memory_mb), _preserve_root_logging():
            if load_plugins:
                from sglang.srt.plugins import load_plugins as _load_plugins

                _load_plugins()
            with _hooks_state(register_hooks):
                from sglang.srt.server_args import prepare_server_args

                server_args = None
                try:
                    server_args = prepare_server_args(argv)
                    server_args.resolve_once()
                except (Exception, SystemExit) as exc:  # noqa: BLE001 - reported, not raised
                    result.error_type = type(exc).__name__
                    result.error = str(exc) or repr(exc)
                    if server_args is not None:
                        result.adjustments = _adjustments_of(server_args)
                    logger.debug("resolution failed:\n%s", traceback.format_exc())
                else:
                    result.ok = True
                    result.server_args = server_args
                    result.resolved = _resolved_fields(server_args)
                    result.adjustments = _adjustments_of(server_args)
    finally:
        plugin_logger.removeHandler(capture)
        plugin_logger.setLevel(old_level)
    result.log_lines = list(capture.lines)
    result.hybrid_requested = mode.hybrid_requested()
    return result


def _adjustments_of(server_args: Any) -> list[str]:
    from sglang_ascend_hybrid.integration.launch.resolution import adjustments_of

    return adjustments_of(server_args)


# --------------------------------------------------------------------------
# Isolated (subprocess) resolution
# --------------------------------------------------------------------------


def resolve_isolated(requests: Sequence[dict], *, timeout: float = 900.0) -> list[dict]:
    """Run each request (keyword arguments of :func:`resolve_launch`) in one
    fresh Python process, sequentially; return their ``LaunchResult.to_json()``.

    One process for the whole batch keeps SGLang's import cost paid once while
    keeping the caller's process free of resolution side effects.
    """
    payload = json.dumps([_jsonable_request(r) for r in requests])
    env = dict(os.environ)
    env.update(RESOLUTION_ENV)
    repo_root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (repo_root, env.get("PYTHONPATH", "")) if p
    )
    proc = subprocess.run(
        [sys.executable, "-m", "sglang_ascend_hybrid.testing.launch_check", "--batch"],
        input=payload,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    marker = "@@LAUNCH_CHECK_RESULTS@@"
    for line in proc.stdout.splitlines():
        if line.startswith(marker):
            return json.loads(line[len(marker):])
    raise RuntimeError(
        f"launch_check subprocess produced no results (rc={proc.returncode}).\n"
        f"stdout tail:\n{proc.stdout[-4000:]}\nstderr tail:\n{proc.stderr[-8000:]}"
    )


def _jsonable_request(req: dict) -> dict:
    out = dict(req)
    if "model_path" in out:
        out["model_path"] = str(out["model_path"])
    if "extra_args" in out:
        out["extra_args"] = [str(a) for a in out["extra_args"]]
    return out


def _run_batch(stream) -> int:
    requests = json.load(stream)
    results = []
    for req in requests:
        res = resolve_launch(**req)
        results.append(res.to_json())
    sys.stdout.write("@@LAUNCH_CHECK_RESULTS@@" + json.dumps(results) + "\n")
    sys.stdout.flush()
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sglang_ascend_hybrid.testing.launch_check",
        description="Run SGLang's --device npu startup resolution on a CPU machine.",
    )
    parser.add_argument("--batch", action="store_true", help="read a JSON list of requests on stdin")
    parser.add_argument("--model-path")
    parser.add_argument("--tp-size", type=int, default=1)
    parser.add_argument("--attention-backend", default="ascend")
    parser.add_argument("--no-hooks", action="store_true", help="hide the plugin's launch hooks")
    parser.add_argument("--load-plugins", action="store_true", help="run SGLang's load_plugins() first")
    parser.add_argument("extra", nargs=argparse.REMAINDER, help="extra SGLang flags after --")
    args = parser.parse_args(argv)
    if args.batch:
        return _run_batch(sys.stdin)
    if not args.model_path:
        parser.error("--model-path is required")
    extra = [a for a in args.extra if a != "--"]
    res = resolve_launch(
        args.model_path,
        tp_size=args.tp_size,
        attention_backend=args.attention_backend or None,
        extra_args=extra,
        register_hooks=not args.no_hooks,
        load_plugins=args.load_plugins,
    )
    print(json.dumps(res.to_json(), indent=2))
    return 0 if res.ok else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
