"""ops.ladder.env_forced_rung: the one resolver of SGLANG_ASCEND_HYBRID_*_BACKEND for every ladder."""

from __future__ import annotations

import logging

from sglang_ascend_hybrid.envs import ENV
from sglang_ascend_hybrid.ops.ladder import env_forced_rung


def test_a_rung_of_the_ladder_is_forced(monkeypatch):
    monkeypatch.setenv(ENV.CONV_BACKEND.name, "npu_v2")
    assert env_forced_rung(ENV.CONV_BACKEND, ("npu_v2", "torch"), "conv", "fn") == "npu_v2"
    monkeypatch.setenv(ENV.CONV_BACKEND.name, "auto")
    assert env_forced_rung(ENV.CONV_BACKEND, ("npu_v2", "torch"), "conv", "fn") == "auto"
    monkeypatch.delenv(ENV.CONV_BACKEND.name)
    assert env_forced_rung(ENV.CONV_BACKEND, ("npu_v2", "torch"), "conv", "fn") == "auto"


def test_another_ladders_rung_leaves_auto_and_is_said_once_per_ladder(monkeypatch, caplog):
    monkeypatch.setenv(ENV.GDN_BACKEND.name, "npu_recurrent")
    with caplog.at_level(logging.INFO):
        for _ in range(3):
            assert env_forced_rung(ENV.GDN_BACKEND, ("mega", "torch"), "GDN", "prefill") == "auto"
        assert env_forced_rung(ENV.GDN_BACKEND, ("npu_recurrent", "torch"), "GDN", "decode") == "npu_recurrent"
        assert env_forced_rung(ENV.GDN_BACKEND, ("torch",), "GDN", "verify") == "auto"
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        "sglang-ascend-hybrid: SGLANG_ASCEND_HYBRID_GDN_BACKEND=npu_recurrent is not a GDN prefill kernel; "
        "prefill walks its ladder ('mega', 'torch')",
        "sglang-ascend-hybrid: SGLANG_ASCEND_HYBRID_GDN_BACKEND=npu_recurrent is not a GDN verify kernel; "
        "verify walks its ladder ('torch',)",
    ]
