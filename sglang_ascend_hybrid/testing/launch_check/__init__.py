"""Launch-resolution harness: run SGLang's real server-argument resolution for
``--device npu`` on a machine without an NPU.

Used by the tests (``tests/integration/test_launch_resolution.py`` and the other
resolution tests), and runnable by an operator, to answer "would ``sglang serve
--device npu ...`` get through startup resolution with this model, and what did
the plugin adjust?" without loading weights or touching a device.  The plugin's
own code (its discovery, backends and CLI) never imports it.  Nothing here imports
SGLang at module import time.

* :mod:`.emulation` -- the NPU platform emulation (:func:`emulated_npu_platform`);
* :mod:`.hooks` -- the plugin's launch hooks registered (:func:`register_launch_hooks`) or
  hidden (:func:`launch_hooks_suspended`) for one resolution;
* :mod:`.resolve` -- one resolution in this process (:func:`resolve_launch`, :class:`LaunchResult`);
* :mod:`.isolated` -- a batch of resolutions in a fresh process (:func:`resolve_isolated`);
* :mod:`.cli` -- ``python -m sglang_ascend_hybrid.testing.launch_check`` (:func:`main`).

The entry names are importable from this package.
"""

from sglang_ascend_hybrid.testing.launch_check.cli import main
from sglang_ascend_hybrid.testing.launch_check.emulation import (
                                                                 DEFAULT_NPU_MEMORY_MB,
                                                                 RESOLUTION_ENV,
                                                                 emulated_npu_platform,
                                                                 platform_facts_npu,
)
from sglang_ascend_hybrid.testing.launch_check.hooks import launch_hooks_suspended, register_launch_hooks
from sglang_ascend_hybrid.testing.launch_check.isolated import resolve_isolated
from sglang_ascend_hybrid.testing.launch_check.resolve import LaunchResult, build_argv, resolve_launch

__all__ = ["DEFAULT_NPU_MEMORY_MB", "RESOLUTION_ENV", "LaunchResult", "build_argv", "emulated_npu_platform",
           "launch_hooks_suspended", "main", "platform_facts_npu", "register_launch_hooks", "resolve_isolated",
           "resolve_launch"]
