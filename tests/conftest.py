"""Shared test set-up.  Test-area fixtures live in each directory's conftest.py."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# Must be set before triton / torch are imported anywhere in the run.
os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

NPU_STUBS = Path(__file__).parent / "npu_stubs"
REPO_ROOT = Path(__file__).parent.parent


@pytest.fixture(autouse=True)
def _fresh_log_once():
    from sglang_ascend_hybrid.logutil import reset_log_once

    reset_log_once()
    yield


@pytest.fixture
def npu_stub_packages(monkeypatch):
    """Make the test stubs of torch_npu / sgl_kernel_npu importable, so the real
    upstream Ascend backend modules import on a CPU.  The seam's probe cache is
    reset before and after so nothing leaks into other tests."""
    from sglang_ascend_hybrid.ops import seam

    monkeypatch.syspath_prepend(str(NPU_STUBS))
    seam.reset_probes()
    yield NPU_STUBS
    seam.reset_probes()
    for name in [m for m in sys.modules if m == "torch_npu" or m.startswith("torch_npu.")
                 or m == "sgl_kernel_npu" or m.startswith("sgl_kernel_npu.")]:
        sys.modules.pop(name, None)
