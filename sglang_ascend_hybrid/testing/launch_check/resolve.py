"""One resolution in this process: ``prepare_server_args(argv)`` + ``resolve_once()`` under NPU
emulation (:mod:`.emulation`), with the plugin's launch hooks registered or hidden (:mod:`.hooks`),
reported as a :class:`LaunchResult` (the resolved fields, the plugin's adjustments, its log lines)."""

from __future__ import annotations

import contextlib
import logging
import os
import traceback
from dataclasses import asdict, dataclass, field
from typing import Any, Iterator, Optional, Sequence

from sglang_ascend_hybrid.testing.launch_check.emulation import DEFAULT_NPU_MEMORY_MB, emulated_npu_platform
from sglang_ascend_hybrid.testing.launch_check.hooks import hooks_state

logger = logging.getLogger(__name__)

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

    mode.forget_request()  # each resolution starts as a fresh launch would
    try:
        with emulated_npu_platform(npu_memory_mb), _preserve_root_logging():
            if load_plugins:
                from sglang.srt.plugins import load_plugins as _load_plugins

                _load_plugins()
            with hooks_state(register_hooks):
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
