"""The environment of a process that runs on the emulated Ascend device."""

from __future__ import annotations

import os
from typing import Mapping, Optional

SITE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "site")


def environment(kernel_tree: str, *, records: Optional[str] = None,
                base: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with the emulated device switched on:
    ``site`` and ``kernel_tree`` (a folder :func:`.kernel_tree.generate` wrote) first on
    ``PYTHONPATH``, torch's backend autoload on, Triton's interpreter for SGLang's generic Triton
    kernels, and ``records`` as the file of what ran."""
    env = dict(os.environ if base is None else base)
    path = [SITE, kernel_tree] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(path)
    env["SGLANG_ASCEND_HYBRID_EMULATED_NPU"] = "1"
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "1"
    env["TRITON_INTERPRET"] = "1"
    if records:
        env["SGLANG_ASCEND_HYBRID_EMULATED_NPU_RECORDS"] = records
    return env
