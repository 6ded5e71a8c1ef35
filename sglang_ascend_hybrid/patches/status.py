"""What the plugin found and did in this process: one record per patch.

``doctor`` prints it; ``register()`` logs a one-line summary; strict mode
(``--attention-backend ascend_hybrid``) turns any failure into a startup error.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

APPLIED, REGISTERED, SKIPPED, FAILED, DISABLED = "applied", "registered", "skipped", "failed", "disabled"
# Verified, applied when SGLang first builds the attention backend on NPU (see patches.Patch.requires).
DEFERRED = "deferred"
# This SGLang release takes another route / offers no mechanism for the fix
# (patches.Patch.releases and .elsewhere).  Neither is a failure in strict mode.
NOT_NEEDED, UNAVAILABLE = "not needed", "unavailable"
NOT_APPLIED = "SGLang's HookRegistry did not apply it (see its log)"


@dataclass
class PatchStatus:
    name: str
    target: str
    state: str
    reason: str = ""


@dataclass
class PluginStatus:
    sglang_version: str | None = None
    version_problem: str | None = None
    disabled: bool = False
    patches: dict[str, PatchStatus] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def set(self, name: str, target: str, state: str, reason: str = "") -> None:
        with self._lock:
            self.patches[name] = PatchStatus(name, target, state, reason)

    def in_state(self, *states: str) -> list[PatchStatus]:
        with self._lock:
            return [p for p in self.patches.values() if p.state in states]

    def refresh_applied(self) -> None:
        """Promote 'registered' hooks that SGLang's HookRegistry has applied."""
        from sglang_ascend_hybrid.patches import by_name

        for p in self.in_state(REGISTERED, FAILED):
            patch = by_name(p.name)
            if patch.kind != "hook" or (p.state == FAILED and p.reason != NOT_APPLIED):
                continue
            registry = hook_registry(patch.runtime)
            if registry is not None and p.target in registry._patched:
                self.set(p.name, p.target, APPLIED)

    def fail_unapplied(self) -> None:
        """After SGLang applied its hooks: a hook still only 'registered' did not apply."""
        self.refresh_applied()
        from sglang_ascend_hybrid.patches import by_name

        for p in self.in_state(REGISTERED):
            if by_name(p.name).kind == "hook":
                self.set(p.name, p.target, FAILED, NOT_APPLIED)

    def summary(self) -> str:
        if self.disabled:
            return "disabled by SGLANG_ASCEND_HYBRID_DISABLE=1"
        counts = {}
        for p in self.patches.values():
            counts[p.state] = counts.get(p.state, 0) + 1
        parts = [f"{n} {s}" for s, n in sorted(counts.items())] or ["no patches"]
        text = f"SGLang {self.sglang_version or 'not installed'}: " + ", ".join(parts)
        failed = self.in_state(FAILED)
        if failed:
            text += "; failed: " + ", ".join(f"{p.target} ({p.reason})" for p in failed)
        return text


def hook_registry(runtime: str):
    try:
        if runtime == "multimodal":
            from sglang.multimodal_gen.runtime.platforms.plugins import HookRegistry
        else:
            from sglang.srt.plugins.hook_registry import HookRegistry
    except ImportError:
        return None
    return HookRegistry


STATUS = PluginStatus()
