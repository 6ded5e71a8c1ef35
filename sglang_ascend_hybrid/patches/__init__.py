"""The registry of every upstream symbol the plugin touches (see PATCHES.md).

Each :class:`Patch` names its upstream target, the plugin hook, why it exists,
how it is applied, how it is verified at startup, when it can be removed and the
upstream change that would make it unnecessary.  ``register()`` walks :data:`PATCHES`;
``doctor`` prints their status; the test suite checks every target exists in the
tested SGLang release and that PATCHES.md lists every entry.

Modules: :mod:`.model` (the dataclasses, kinds and states), :mod:`.registry` (the
entries), :mod:`.locate` (finding a target on disk without importing it),
:mod:`.releases` (installed versions, release specifiers, what a patch is on a
release), :mod:`.verification` (startup checks), :mod:`.render` (PATCHES.md).
Putting them in place: :mod:`.apply` (registration, on import of a target's module through
:mod:`.import_watch`, deferred to the NPU backend build, strict mode), :mod:`.mode` (was
``ascend_hybrid`` asked for), :mod:`.status` (what happened to each patch in this process),
:mod:`.definitions_cache` (what a target's source file defines, kept across processes); this
package imports none of those.
Callers use the names re-exported here; :data:`PATCHES` is read from this package
at call time (:func:`by_name`, :func:`render_markdown`), so replacing it here
replaces it everywhere.
"""

from __future__ import annotations

from sglang_ascend_hybrid.patches.locate import find_target, missing_requirements, target_module
from sglang_ascend_hybrid.patches.model import (
    NOT_NEEDED,
    UNAVAILABLE,
    Elsewhere,
    Kind,
    Patch,
    Runtime,
    Target,
)
from sglang_ascend_hybrid.patches.registry import CHUNK_GDN, PATCHES, RES_STEP, by_name
from sglang_ascend_hybrid.patches.releases import (
    installed_version,
    matches,
    range_bounds,
    release_state,
    release_targets,
    sglang_version_problem,
    tested_releases,
)
from sglang_ascend_hybrid.patches.render import render_markdown
from sglang_ascend_hybrid.patches.verification import (
    HOOK_REGISTRIES,
    HOOK_REGISTRY_INTERNALS,
    RESOLUTION_INTERNALS,
    internals,
    verify,
)

__all__ = [
    "CHUNK_GDN", "HOOK_REGISTRIES", "HOOK_REGISTRY_INTERNALS", "NOT_NEEDED", "PATCHES", "RESOLUTION_INTERNALS",
    "RES_STEP", "UNAVAILABLE", "Elsewhere", "Kind", "Patch", "Runtime", "Target", "by_name", "find_target",
    "installed_version", "internals", "matches", "missing_requirements", "range_bounds", "release_state",
    "release_targets", "render_markdown", "sglang_version_problem", "target_module", "tested_releases", "verify",
]
