"""The registry's data model: :class:`Patch`, :class:`Target`, :class:`Elsewhere`, kinds and states.

Nothing here imports SGLang; release specifiers are checked (parsed) when an entry is built, so a
malformed one fails at import, naming the entry.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable, Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet

Kind = Literal["hook", "resolution", "choices", "backend_registry"]
Runtime = Literal["srt", "multimodal"]

# States of a patch on a release outside its ``releases`` (see Elsewhere).
NOT_NEEDED = "not needed"  # that release takes another route; never a failure
UNAVAILABLE = "unavailable"  # that release offers no mechanism to install the fix


def specifier(releases: str, what: str) -> SpecifierSet:
    """``releases`` parsed as a PEP 440 specifier set (``">=0.5.22"``, ``">=0.5.20,<0.5.24"``; ``""``: every
    release); ValueError naming ``what`` when it is not one."""
    try:
        return SpecifierSet(releases)
    except InvalidSpecifier as exc:
        raise ValueError(f"releases of {what} must be a version specifier such as '>=0.5.22' "
                         f"(no package name), got {releases!r}") from exc


@dataclass(frozen=True)
class Target:
    """An upstream symbol checked only on the SGLang releases ``releases`` names (a specifier such as
    ``">=0.5.22"``; ``""``: every release): helpers whose name or signature differs between releases.
    A plain string in ``extra_targets`` / ``Elsewhere.route`` is a target on every release."""

    path: str
    releases: str = ""

    def __post_init__(self) -> None:
        if ";" in self.path or not self.path.strip() or self.path != self.path.strip():
            raise ValueError(f"target path {self.path!r} must be a dotted name; give the releases as "
                             "Target(path, releases='>=X')")
        specifier(self.releases, repr(self.path))


def as_target(entry: str | Target) -> Target:
    return entry if isinstance(entry, Target) else Target(entry)


@dataclass(frozen=True)
class Elsewhere:
    """What a patch is on the SGLang releases outside its ``releases``.

    ``state`` is :data:`NOT_NEEDED` (the release legitimately lacks the target
    because it takes another route, whose symbols ``route`` names and which are
    verified there like targets: a missing one is still a failure) or
    :data:`UNAVAILABLE` (the fix cannot be installed on that release; ``why``
    says so plainly and ``doctor`` prints it).
    """

    state: Literal["not needed", "unavailable"]
    why: str
    route: tuple[str | Target, ...] = ()
    # The target exists there too, off the route (``route`` decides); False: the release lacks it.
    target_present: bool = False


@dataclass(frozen=True)
class Patch:
    name: str
    # Upstream symbol: "pkg.module.attr", "pkg.module.Class.method", or for
    # kind="resolution" the overridable step name in SGLang's resolution pipeline.
    target: str
    kind: Kind
    # "module:function" inside this package; resolved lazily at registration.
    hook: str
    why: str
    how: str
    removal: str
    # The upstream change that would make the patch unnecessary: "owner/repo#N" (an issue or pull
    # request), or "none: <why there is none>".  Every registry entry says one (a test checks).
    upstream: str = ""
    hook_type: Literal["around", "replace", "before", "after", ""] = ""
    runtime: Runtime = "srt"
    # NPU packages the target module imports at top.  Without them the patch is
    # skipped (the target cannot be used on this machine either); with them it is
    # verified at discovery but applied only when SGLang first builds the attention
    # backend on NPU (patches.apply.apply_deferred), so discovery never imports them.
    requires: tuple[str, ...] = ()
    # Where the step name is declared, for kind="resolution".
    step_registry: str = "sglang.srt.arg_groups.resolution_hooks._OVERRIDABLE_HOOKS"
    # Further upstream symbols checked with the target.  A :class:`Target` with ``releases`` is
    # checked only on the releases it names: helpers whose name or signature differs between releases.
    extra_targets: tuple[str | Target, ...] = field(default=())
    # SGLang releases on which the target must exist: a specifier such as
    # ">=0.5.21" ("" = every release).  Keep it open-ended upwards so an untested
    # newer release is verified, not assumed.  Outside it, ``elsewhere`` says what
    # the patch is there; a release outside it without ``elsewhere`` is a failure.
    releases: str = ""
    elsewhere: Elsewhere | None = None

    def __post_init__(self) -> None:
        specifier(self.releases, f"patch {self.name!r}")

    def load_hook(self) -> Callable:
        module, _, attr = self.hook.partition(":")
        return getattr(importlib.import_module(module), attr)

    @property
    def verification(self) -> str:
        if self.kind == "resolution":
            return f"step name is in {self.step_registry}"
        return "target parsed from the installed source (no import); applied state read back from SGLang's HookRegistry"
