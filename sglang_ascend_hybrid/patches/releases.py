"""SGLang releases: the installed version, PEP 440 release specifiers, and what a patch is on a release.

Specifiers are :class:`packaging.specifiers.SpecifierSet` strings (``">=0.5.21"``, ``"<0.5.21"``,
``">=0.5.20,<0.5.24"``; ``""``: every release).  A version is matched by its release segment only
(:func:`release_of`): ``0.5.23.post1``, ``0.5.24.dev0``, ``0.5.24rc1`` and ``0.5.23+local`` count as
``0.5.23``, ``0.5.24``, ``0.5.24`` and ``0.5.23`` -- a development build of a release is treated as that
release, so its patches are verified and applied, never skipped by PEP 440's pre-release ordering.
An unknown version (``None``: SGLang is not installed) matches every specifier.
"""

from __future__ import annotations

import re
from importlib import metadata

from packaging.version import InvalidVersion, Version

from sglang_ascend_hybrid import TESTED_SGLANG_RANGE
from sglang_ascend_hybrid.patches.locate import find_target
from sglang_ascend_hybrid.patches.model import Patch, Target, as_target, specifier


def installed_version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def release_of(version: str) -> Version:
    """``version``'s release segment as a :class:`~packaging.version.Version` (pre-, post-, dev- and local
    parts dropped); a string PEP 440 rejects is read by its leading ``N(.N)*``.  ValueError when it has
    none."""
    try:
        release = Version(version).release
    except InvalidVersion:
        match = re.match(r"\d+(?:\.\d+)*", version)
        if not match:
            raise ValueError(f"unparseable version {version!r}") from None
        release = tuple(int(x) for x in match.group(0).split("."))
    return Version(".".join(map(str, release)))


def matches(spec: str, version: str | None) -> bool:
    """Whether SGLang ``version`` satisfies ``spec`` ("" or an unknown version: yes)."""
    if not spec or version is None:
        return True
    # The candidate is a final release (release_of), so prereleases=True only says: never filter it.
    return specifier(spec, repr(spec)).contains(release_of(version), prereleases=True)


def _spec(spec: tuple[str, ...] | str) -> str:
    return spec if isinstance(spec, str) else ",".join(spec)


def range_bounds(spec: tuple[str, ...] | str = TESTED_SGLANG_RANGE) -> tuple[str, str]:
    """(lowest tested release, first release above the range) of a '>=X', '<Y' spec."""
    clauses = list(specifier(_spec(spec), repr(spec)))
    try:
        low = next(c.version for c in clauses if c.operator == ">=")
        high = next(c.version for c in clauses if c.operator == "<")
    except StopIteration:
        raise ValueError(f"range {spec!r} needs a '>=X' and a '<Y' clause") from None
    return low, high


def tested_releases(spec: tuple[str, ...] | str = TESTED_SGLANG_RANGE) -> tuple[str, ...]:
    """Every release the range covers, assuming patch releases of one minor series
    (what CI tests: scripts/test.sh runs the suite on each)."""
    low, high = (release_of(v).release for v in range_bounds(spec))
    if low[:-1] != high[:-1]:
        raise ValueError(f"tested range {spec} spans more than one minor series")
    return tuple(".".join(map(str, (*low[:-1], n))) for n in range(low[-1], high[-1]))


def sglang_version_problem(version: str | None) -> str | None:
    if version is None:
        return "sglang is not installed"
    if not matches(_spec(TESTED_SGLANG_RANGE), version):
        return (f"SGLang {version} is untested: outside the tested range {','.join(TESTED_SGLANG_RANGE)} "
                f"(sglang-ascend-hybrid is tested on every release from {range_bounds()[0]} to below "
                f"{range_bounds()[1]})")
    return None


def _sglang_version(version: str | None) -> str | None:
    return version if version is not None else installed_version("sglang")


def release_targets(entries: tuple[str | Target, ...], version: str | None = None) -> tuple[str, ...]:
    """The paths of the entries of ``extra_targets`` / ``route`` that apply to SGLang ``version``
    (default: the installed one): plain strings always, a :class:`Target` on its ``releases``."""
    version = _sglang_version(version)
    return tuple(t.path for t in map(as_target, entries) if matches(t.releases, version))


def release_state(patch: Patch, version: str | None = None) -> tuple[str, str] | None:
    """None when ``patch`` targets SGLang ``version`` (verify and apply it as usual);
    else ``(state, reason)``: :data:`NOT_NEEDED` or :data:`UNAVAILABLE` from its
    ``elsewhere``, or ``("failed", why)`` when the other route is missing or the
    patch does not say what it is on this release."""
    version = _sglang_version(version)
    if matches(patch.releases, version):
        return None
    if patch.elsewhere is None:
        return "failed", (f"declared for SGLang {patch.releases} only and says nothing about {version}")
    for target in release_targets(patch.elsewhere.route, version):
        reason = find_target(target)
        if reason:
            return "failed", f"SGLang {version} should take another route, but {reason}"
    return patch.elsewhere.state, f"SGLang {version}: {patch.elsewhere.why}"
