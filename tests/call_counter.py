"""A device-op stand-in wrapper that counts its calls (which rung really ran)."""

from __future__ import annotations


class Counting:
    """``Counting(fn)`` calls ``fn`` and counts the calls in ``.calls``."""

    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, *a, **kw):
        self.calls += 1
        return self.fn(*a, **kw)
