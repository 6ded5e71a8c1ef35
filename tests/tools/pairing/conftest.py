"""Fixtures of the pairing tests."""

from __future__ import annotations

import pytest

from sglang_ascend_hybrid.tools.pairing import kernel_package


@pytest.fixture
def kernel_path(monkeypatch):
    """Point the check at a fake sgl_kernel_npu: ``use(root)``."""
    def use(root):
        monkeypatch.setattr(kernel_package, "KERNEL_PATH", [str(root)])
    return use
