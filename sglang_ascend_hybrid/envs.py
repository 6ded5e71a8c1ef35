"""Every environment variable the plugin reads, in one place.

Each variable is named ``SGLANG_ASCEND_HYBRID_*`` and documented in docs/configuration.md
("Environment variables").  Read them through :data:`ENV` so the parsing and
validation rules (and the defaults ``doctor`` prints) live here only.

Rules, for every variable:

* unset, or set to the empty string (``VAR=`` / only spaces), means the default;
* surrounding spaces are ignored;
* any other value that does not parse, or lies outside the variable's range or
  choices, raises ``ValueError("environment variable NAME=VALUE: expected ...")``
  -- the variable's name, the value as given and what is accepted, on one line.

:func:`problems` validates them all at once (``doctor``, the CLI's startup).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
from dataclasses import dataclass
from typing import Callable, Generic, Iterator, TypeVar

T = TypeVar("T")

# Rung names of the kernel ladders (fastest first), as the ladders in
# ``ops/gdn/prefill/ladder.py``, ``ops/gdn/decode/ladder.py`` and ``ops/conv/dispatch.py`` name them.  Listed here so
# validating the environment needs no op module (and no torch) import;
# ``tests/test_envs.py`` checks they equal the ladders' names.
GDN_PREFILL_RUNGS = ("npu_chunk", "mega", "triton", "torch")
GDN_DECODE_RUNGS = ("triton_decode", "npu_recurrent", "torch")
GDN_RUNGS = tuple(dict.fromkeys(GDN_PREFILL_RUNGS + GDN_DECODE_RUNGS))
CONV_RUNGS = ("npu_v2", "npu_aclnn", "npu_update_v2", "torch")  # npu_update_v2: decode only

# The emulated device's negative controls (sglang_ascend_hybrid/testing/emulated_npu/breakages.py;
# tests/test_envs.py checks they equal its table).
EMULATED_NPU_BREAKAGES = ("none", "ignore-saved-conv-state", "ignore-saved-ssm-state", "invert-decode-layout")

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _parse_bool(raw: str) -> bool:
    value = raw.lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"expected a boolean ({'/'.join(_TRUE)} or {'/'.join(_FALSE)})")


# Plain decimal numbers and inf / infinity (any case); Python's float() also takes '1_0' and
# non-ASCII digits, which are not accepted here.
_NUMBER = re.compile(r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf|infinity|nan)", re.ASCII | re.IGNORECASE)


def _parse_path(raw: str) -> str:
    """An absolute file path (read by processes with other working directories)."""
    if not os.path.isabs(raw):
        raise ValueError("expected an absolute file path")
    return raw


def _parse_overhead(raw: str) -> float:
    """A compute-overhead limit: a number >= 1, or ``inf`` for no limit."""
    if not _NUMBER.fullmatch(raw):
        raise ValueError("expected a number >= 1 (or inf for no limit)")
    value = float(raw)
    if math.isnan(value) or value < 1.0:
        raise ValueError("expected a number >= 1 (or inf for no limit)")
    return value


def _choice(choices: tuple[str, ...]) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        if raw not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}")
        return raw

    parse.choices = choices  # type: ignore[attr-defined]
    return parse


_ENCODED: dict[str, object] = {}


def read_environ(name: str) -> str | None:
    """``os.environ.get(name)`` for a variable read on every serving call (this registry's and the
    upstream ones the hooks mirror, e.g. sgl-kernel-npu's ``GDN_ATTN_BACKEND_TRITON``), without the
    public lookup's exception for an unset variable: CPython's ``os.environ`` keeps its entries in
    ``_data`` under encoded keys, updated by every assignment through ``os.environ``; elsewhere the
    public lookup."""
    data = getattr(os.environ, "_data", None)
    if not isinstance(data, dict):
        return os.environ.get(name)
    key = _ENCODED.get(name)
    if key is None:
        key = _ENCODED[name] = os.environ.encodekey(name)
    raw = data.get(key)
    return None if raw is None else os.environ.decodevalue(raw)


@dataclass(frozen=True)
class EnvVar(Generic[T]):
    name: str
    default: T
    parse: Callable[[str], T]  # raises ValueError("expected ...") on a bad value
    help: str

    def is_set(self) -> bool:
        """Set to something other than the empty string."""
        return bool(os.environ.get(self.name, "").strip())

    @property
    def choices(self) -> tuple[str, ...] | None:
        return getattr(self.parse, "choices", None)

    def get(self) -> T:
        raw = read_environ(self.name)
        if raw is None or not raw.strip():
            return self.default
        try:
            return self.parse(raw.strip())
        except ValueError as exc:
            raise ValueError(f"environment variable {self.name}={raw!r}: {exc}") from None

    def problem(self) -> str | None:
        """The one-line error of the current value, or None when it is valid."""
        try:
            self.get()
        except ValueError as exc:
            return str(exc)
        return None


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
        "SGLANG_ASCEND_HYBRID_GDN_BACKEND", "auto", _choice(("auto",) + GDN_RUNGS),
        "auto (default) walks the GDN kernel ladders; a rung name forces that rung "
        "(prefill: npu_chunk, mega, triton, torch; decode: triton_decode (SGLang's decode steps only), "
        "npu_recurrent, torch).",
    )
    GDN_MAX_OVERHEAD = EnvVar(
        "SGLANG_ASCEND_HYBRID_GDN_MAX_OVERHEAD", 1.5, _parse_overhead,
        "Largest compute overhead (launched / real value-head work) a head plan may "
        "have before GDN falls back to the next kernel rung: a number >= 1, or inf "
        "for no limit.",
    )
    CONV_BACKEND = EnvVar(
        "SGLANG_ASCEND_HYBRID_CONV_BACKEND", "auto", _choice(("auto",) + CONV_RUNGS),
        "auto (default) walks the short-conv causal_conv1d ladders (npu_v2 -> npu_aclnn -> "
        "[decode: npu_update_v2 ->] torch); a rung name forces that rung; a decode-only rung "
        "(npu_update_v2) leaves prefill on its ladder.",
    )
    DEBUG_CHECKS = EnvVar(
        "SGLANG_ASCEND_HYBRID_DEBUG_CHECKS", False, _parse_bool,
        "1 turns on value checks (slot ranges, duplicate slots, offsets) on the serving "
        "decode path too, and compares caller-given host boundary copies with their "
        "device tensors; they read tensor values on the host, so they break NPU graph "
        "capture: for debugging only.",
    )
    EMULATED_NPU = EnvVar(
        "SGLANG_ASCEND_HYBRID_EMULATED_NPU", False, _parse_bool,
        "1 lets the emulated Ascend device (test and rehearsal tooling, "
        "sglang_ascend_hybrid.testing.emulated_npu) install itself at `import torch` where its "
        "site folder is on the Python path; never set it on a machine with a real NPU.",
    )
    EMULATED_NPU_WIDEN_FP32 = EnvVar(
        "SGLANG_ASCEND_HYBRID_EMULATED_NPU_WIDEN_FP32", False, _parse_bool,
        "1 lets the emulated Ascend device's attention and KV-cache emulators take fp32, which the real "
        "ATB ops refuse: an instrument for fp32 numerics checks against transformers, never a contract.",
    )
    EMULATED_NPU_BREAK = EnvVar(
        "SGLANG_ASCEND_HYBRID_EMULATED_NPU_BREAK", "none", _choice(EMULATED_NPU_BREAKAGES),
        "Test tooling (the runtime tier's negative controls): on the emulated Ascend device, break one "
        "plugin function in every process (sglang_ascend_hybrid.testing.emulated_npu.breakages); none "
        "(default) breaks nothing.",
    )
    EMULATED_NPU_RECORDS = EnvVar(
        "SGLANG_ASCEND_HYBRID_EMULATED_NPU_RECORDS", "", _parse_path,
        "A file the emulated Ascend device appends one JSON line to for each distinct device op "
        "and plugin kernel that served, in every process (rehearsals and the runtime tests read it).",
    )


ENV = _Registry()


def all_vars() -> list[EnvVar]:
    return [v for v in vars(_Registry).values() if isinstance(v, EnvVar)]


def problems() -> list[str]:
    """One line per invalid variable (empty when every variable is valid)."""
    return [p for p in (var.problem() for var in all_vars()) if p]


def effective_settings() -> dict[str, str]:
    """Name -> effective value (as text, with '(default)' when unset), for doctor.
    An invalid value reads ``INVALID: <the one-line error>``."""
    out = {}
    for var in all_vars():
        try:
            value = repr(var.get())
        except ValueError as exc:
            out[var.name] = f"INVALID: {exc}"
            continue
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
