"""Fixtures of the op tests."""

from __future__ import annotations

import pytest

GDN_SETTINGS = ("GDN_USE_MEGA_GDN", "GDN_ATTN_BACKEND_TRITON", "SGLANG_ASCEND_HYBRID_GDN_BACKEND")


@pytest.fixture
def fresh_gdn(monkeypatch):
    """No GDN kernel settings in the environment and no refusal remembered by the GDN ladders."""
    from sglang_ascend_hybrid.ops.gdn import decode, prefill

    for name in GDN_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    prefill.forget_refusals()
    decode.DECODE.forget_refusals()
    yield
    prefill.forget_refusals()
    decode.DECODE.forget_refusals()
