"""Process state a test starts from afresh, through ``monkeypatch``: whatever it replaces is back when
the test ends, so a test leaves the process as it found it.  Call one again within a test for the
next "process" (or the next package install).

* :func:`fresh_patch_state`: what patch application keeps (``sglang_ascend_hybrid.patches``);
* :func:`fresh_seam_lookups`: what the seam found installed (``sglang_ascend_hybrid.ops.seam``).

The learnt state of the ops (log-once keys, probe verdicts, ladder refusals) is the root
``tests/conftest.py`` fixture's, around every test.
"""

from __future__ import annotations

import sys


def fresh_patch_state(monkeypatch) -> None:
    """What a new SGLang process has before the plugin registers: no request for ascend_hybrid
    (``patches.mode``, its environment variable included), no patch records
    (``patches.status.STATUS``), no import watch (``patches.import_watch``, its finder off
    ``sys.meta_path``) and nothing parsed in memory (``patches.definitions_cache``; the cache file
    is where the test's ``XDG_CACHE_HOME`` puts it)."""
    from sglang_ascend_hybrid.envs import ENV
    from sglang_ascend_hybrid.patches import definitions_cache, import_watch, mode
    from sglang_ascend_hybrid.patches.status import STATUS

    monkeypatch.setattr(mode, "_requested", False)
    # set, then removed: so that its value before the test comes back, also where it was unset
    # (monkeypatch.delenv alone records nothing for an unset variable, and record_request sets it)
    monkeypatch.setenv(ENV.STRICT.name, "")
    monkeypatch.delenv(ENV.STRICT.name)
    for name, value in (("patches", {}), ("sglang_version", None), ("version_problem", None), ("disabled", False)):
        monkeypatch.setattr(STATUS, name, value)
    monkeypatch.setattr(import_watch, "_watched", {})
    monkeypatch.setattr(sys, "meta_path", [f for f in sys.meta_path if f is not import_watch._FINDER])
    monkeypatch.setattr(definitions_cache, "_memory", {})


def fresh_seam_lookups(monkeypatch) -> None:
    """The seam probes packages (``torch_npu``, ``sgl_kernel_npu``), resolves kernels and reads the
    installed sgl-kernel-npu version again on the next lookup, as a new process would: after the test
    put a (stub) package on ``sys.path``, or took one away."""
    from sglang_ascend_hybrid.ops import seam

    monkeypatch.setattr(seam, "_probe", {})
    monkeypatch.setattr(seam, "_resolved", {})
