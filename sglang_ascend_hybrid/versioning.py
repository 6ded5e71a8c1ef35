"""Installed-version facts (no imports of the packages themselves)."""

from __future__ import annotations

import re
from importlib import metadata

from sglang_ascend_hybrid import TESTED_SGLANG_RANGE


def installed_version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _release(version: str) -> tuple[int, ...]:
    match = re.match(r"(\d+(?:\.\d+)*)", version)
    if not match:
        raise ValueError(f"unparseable version {version!r}")
    return tuple(int(x) for x in match.group(1).split("."))


def _cmp(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = max(len(a), len(b))
    a, b = a + (0,) * (n - len(a)), b + (0,) * (n - len(b))
    return (a > b) - (a < b)


def in_range(version: str, spec: tuple[str, ...] = TESTED_SGLANG_RANGE) -> bool:
    """``spec`` is a tuple of '>=X' / '<Y' / '==Z' clauses."""
    ver = _release(version)
    for clause in spec:
        op = re.match(r"(>=|<=|==|<|>)", clause).group(1)
        c = _cmp(ver, _release(clause[len(op):]))
        ok = {">=": c >= 0, "<=": c <= 0, "==": c == 0, "<": c < 0, ">": c > 0}[op]
        if not ok:
            return False
    return True


def range_bounds(spec: tuple[str, ...] = TESTED_SGLANG_RANGE) -> tuple[str, str]:
    """(lowest tested release, first release above the range) of a '>=X', '<Y' spec."""
    low = next(c[2:] for c in spec if c.startswith(">="))
    high = next(c[1:] for c in spec if c.startswith("<") and not c.startswith("<="))
    return low, high


def tested_releases(spec: tuple[str, ...] = TESTED_SGLANG_RANGE) -> tuple[str, ...]:
    """Every release the range covers, assuming patch releases of one minor series
    (what CI tests: scripts/test.sh runs the suite on each)."""
    low, high = (_release(v) for v in range_bounds(spec))
    if low[:-1] != high[:-1]:
        raise ValueError(f"tested range {spec} spans more than one minor series")
    return tuple(".".join(map(str, (*low[:-1], n))) for n in range(low[-1], high[-1]))


def sglang_version_problem(version: str | None) -> str | None:
    if version is None:
        return "sglang is not installed"
    if not in_range(version):
        return (f"SGLang {version} is untested: outside the tested range {','.join(TESTED_SGLANG_RANGE)} "
                f"(sglang-ascend-hybrid is tested on every release from {range_bounds()[0]} to below "
                f"{range_bounds()[1]})")
    return None
