"""Every environment variable the plugin reads, in one place.

Each variable is named ``SGLANG_ASCEND_HYBRID_*`` and documented in README.md
("Environment variables").  Read them through :data:`ENV` so the parsing rules
(and the defaults ``doctor`` prints) live here only.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Callable, Generic, Iterator, TypeVar

T = TypeVar("T")


def _parse_bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"expected a boolean (1/0/true/false), got {raw!r}")


def _parse_float(raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"expected a number, got {raw!r}") from None


@dataclass(frozen=True)
class EnvVar(Generic[T]):
    name: str
    default: T
    parse: Callable[[str], T]
    help: str

    def is_set(self) -> bool:
        return self.name in os.environ

    def get(self) -> T:
        raw = os.environ.get(self.name)
        if raw is None:
            return self.default
        try:
            return self.parse(raw)
        except ValueError as exc:
            raise ValueError(f"environment variable {self.name}: {exc}") from None


class _Registry:
    DISABLE = EnvVar(
        "SGLANG_ASCEND_HYBRID_DISABLE", False, _parse_bool,
        "1 turns the whole plugin off: register() records 'disabled' and patches nothing.",
    )
    STRICT = EnvVar(
        "SGLANG_ASCEND_HYBRID_STRICT", False, _parse_bool,
        "Set by the plugin (inherited by SGLang subprocesses) once the user asked for "
        "--attention-backend ascend_hybrid; 1 makes an unapplied patch a startup error. "
        "Users may set it themselves to get strict mode under plain 'ascend'.",
    )
    GDN_BACKEND = EnvVar(
        "SGLANG_ASCEND_HYBRID_GDN_BACKEND", "auto", str,
        "auto (default) walks the GDN kernel ladder; a rung name forces that rung.",
    )
    GDN_MAX_OVERHEAD = EnvVar(
        "SGLANG_ASCEND_HYBRID_GDN_MAX_OVERHEAD", 1.5, _parse_float,
        "Largest compute overhead (launched / real value-head work) a head plan may "
        "have before GDN falls back to the next kernel rung.",
    )
    CONV_BACKEND = EnvVar(
        "SGLANG_ASCEND_HYBRID_CONV_BACKEND", "auto", str,
        "auto (default) walks the short-conv causal_conv1d ladder (npu_v2 -> npu_aclnn -> "
        "torch); a rung name forces that rung.",
    )
    DEBUG_CHECKS = EnvVar(
        "SGLANG_ASCEND_HYBRID_DEBUG_CHECKS", False, _parse_bool,
        "1 turns on value checks (slot ranges, duplicate slots, offsets) on the serving "
        "decode path too; they read tensor values on the host, so they break NPU graph "
        "capture: for debugging only.",
    )


ENV = _Registry()


def all_vars() -> list[EnvVar]:
    return [v for v in vars(_Registry).values() if isinstance(v, EnvVar)]


def effective_settings() -> dict[str, str]:
    """Name -> effective value (as text, with '(default)' when unset), for doctor."""
    out = {}
    for var in all_vars():
        try:
            value = repr(var.get())
        except ValueError as exc:
            value = f"INVALID ({exc})"
        out[var.name] = value if var.is_set() else f"{value} (default)"
    return out


@contextlib.contextmanager
def temporary_env(values: dict[str, str]) -> Iterator[None]:
    """Set environment variables for the duration of a block, restoring the previous values."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
