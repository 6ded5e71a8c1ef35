"""Did the user ask for ``ascend_hybrid``?  (strict mode)

On NPU SGLang resolves every attention backend to ``"ascend"``; the plugin
records the original request here and in ``SGLANG_ASCEND_HYBRID_STRICT`` so
every process (scheduler, detokenizer and DP-controller subprocesses inherit
the environment) can tell.
"""

from __future__ import annotations

import os

from sglang_ascend_hybrid.envs import ENV

BACKEND_NAME = "ascend_hybrid"
_requested = False


def record_request() -> None:
    global _requested
    _requested = True
    os.environ[ENV.STRICT.name] = "1"


def hybrid_requested() -> bool:
    """True once ascend_hybrid was asked for in this process or a parent (strict mode)."""
    return _requested or ENV.STRICT.get()


def forget_request() -> None:
    """Undo :func:`record_request`: this process (and the subprocesses it starts from now on) no
    longer counts as having asked for ascend_hybrid.

    :func:`sglang_ascend_hybrid.testing.launch_check.resolve_launch` calls it before each
    resolution: it resolves several launches in one process (``--batch``), and a launch that asked
    for ascend_hybrid must not leave the next one (which may not have) in strict mode."""
    global _requested
    _requested = False
    os.environ.pop(ENV.STRICT.name, None)
