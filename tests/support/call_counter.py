"""A device-op stand-in wrapper that counts its calls (which rung really ran)."""

from __future__ import annotations

from sglang_ascend_hybrid.ops import probes


class Counting:
    """``Counting(fn)`` calls ``fn`` and counts the serving calls in ``.calls``; the calls a probe
    makes (``ops/probes.py``, once per signature before serving) in ``.probe_calls``."""

    def __init__(self, fn):
        self.fn, self.calls, self.probe_calls = fn, 0, 0

    def __call__(self, *a, **kw):
        if probes.probing():
            self.probe_calls += 1
        else:
            self.calls += 1
        return self.fn(*a, **kw)
