"""The chunk-state stride probe of sgl-kernel-npu's Triton prefill entry: 64-token states on its
Triton path, 128-token ones when it runs the mega kernel inside (GDN_USE_MEGA_GDN=1)."""

from __future__ import annotations

import logging

import pytest
import torch

from sglang_ascend_hybrid.emulators import gdn_sets
from sglang_ascend_hybrid.ops import probes, seam
from sglang_ascend_hybrid.ops.gdn.contract import OP_MEGA, OP_TRITON
from sglang_ascend_hybrid.ops.gdn.prefill import chunk_stride_probe as csp


@pytest.mark.parametrize("env,verdict", [({}, csp.STRIDE_64), ({"GDN_USE_MEGA_GDN": "1"}, csp.STRIDE_128)])
def test_each_stride_detected(env, verdict):
    with seam.install_emulators(gdn_sets.emulators(triton=True, environ=env)):
        v = csp.measure(16, 16, 128, 128, torch.bfloat16, "cpu", environ=env)
    assert v.verdict == verdict and v.usable == (verdict == csp.STRIDE_64), v


def test_garbage_chunk_states_match_neither_with_a_warning(caplog):
    real = gdn_sets.emulators(triton=True, environ={})[OP_TRITON]

    def noisy(*args, **kwargs):
        o, final, h = real(*args, **kwargs)
        return o, final, h + 1.0

    caplog.set_level(logging.INFO, logger="sglang_ascend_hybrid")
    with seam.install_emulators({OP_TRITON: noisy}):
        v = csp.stride_verdict(16, 16, 128, 128, torch.bfloat16, "cpu", before_serving=True)
    assert v.verdict == probes.NEITHER and not v.usable
    assert any(r.levelno == logging.WARNING and "gdn-triton-chunk-stride" in r.getMessage() for r in caplog.records)


def test_the_signature_follows_the_environment(monkeypatch):
    monkeypatch.delenv("GDN_USE_MEGA_GDN", raising=False)
    a = csp.signature(16, 16, 128, 128, torch.bfloat16)
    monkeypatch.setenv("GDN_USE_MEGA_GDN", "1")
    assert csp.signature(16, 16, 128, 128, torch.bfloat16) != a


def test_the_triton_rung_trusts_the_probe_over_the_release_prediction(caplog):
    """The seam reports a release whose Triton entry uses its Triton path unless GDN_USE_MEGA_GDN=1, but
    the installed entry runs the mega kernel by default (as 2026.6.0 does): with 64-token chunk states
    asked for, the probe's 128-token verdict keeps the rung out and torch serves exact states."""
    from sglang_ascend_hybrid.ops.gdn.api import chunk_with_states
    from sglang_ascend_hybrid.ops.gdn.torch_impl import chunk_gdn_torch, l2norm
    from tests.support.call_counter import Counting

    caplog.set_level(logging.INFO, logger="sglang_ascend_hybrid")
    gen = torch.Generator().manual_seed(3)
    T, H, D = 150, 16, 128
    q, k = (l2norm(torch.randn(1, T, H, D, generator=gen)).to(torch.bfloat16) for _ in range(2))
    v = (0.5 * torch.randn(1, T, H, D, generator=gen)).to(torch.bfloat16)
    g = -0.1 * torch.rand(1, T, H, generator=gen)
    beta = torch.sigmoid(torch.randn(1, T, H, generator=gen)).to(torch.bfloat16)
    cu = torch.tensor([0, T])
    ops = gdn_sets.emulators(triton=True, version="2026.6.0", environ={}, npu_chunk=False)
    ops.pop(OP_MEGA)  # only the Triton entry is a rung here (its mega kernel runs inside it)
    triton = Counting(ops[OP_TRITON])
    ops[OP_TRITON] = triton
    with seam.install_device_facts(sgl_kernel_npu_version="2026.6.1"), seam.install_emulators(ops):
        o, final, h = chunk_with_states(q, k, v, g, beta, cu_seqlens=cu, chunk_states=True, skip=("npu_chunk",))
    (verdict,) = probes.all_verdicts()
    assert verdict.verdict == csp.STRIDE_128
    assert triton.probe_calls == 1 and triton.calls == 0
    assert "runs on the torch kernel" in caplog.text
    _, _, ref_h = chunk_gdn_torch(q, k, v, g, beta, cu_seqlens=cu, scale=D ** -0.5, chunk_states=True)
    assert torch.equal(h, ref_h)


def test_a_changed_setting_is_probed_again_with_its_own_verdict(monkeypatch):
    monkeypatch.delenv("GDN_USE_MEGA_GDN", raising=False)
    with seam.install_emulators(gdn_sets.emulators(triton=True)):   # reads os.environ at every call
        first = csp.stride_verdict(16, 16, 128, 128, torch.bfloat16, "cpu", before_serving=True)
        monkeypatch.setenv("GDN_USE_MEGA_GDN", "1")
        second = csp.stride_verdict(16, 16, 128, 128, torch.bfloat16, "cpu", before_serving=True)
        again = csp.stride_verdict(16, 16, 128, 128, torch.bfloat16, "cpu", before_serving=True)
    assert (first.verdict, second.verdict) == (csp.STRIDE_64, csp.STRIDE_128)
    assert again is second and probes.runs(csp.PROBE.name) == 2
    assert "3 chunk states for 130 tokens" in first.detail and "2 chunk states" in second.detail


def test_construction_probe_records_a_verdict_the_rung_then_uses():
    """``probe_triton_entry_before_serving`` (backend construction) records the verdict, so a
    prefill whose capture check cannot be answered still finds it; fp32 inputs (which the entry
    refuses) and a build without the entry are not probed."""
    from sglang_ascend_hybrid.emulators import gdn_triton_chunk
    from sglang_ascend_hybrid.ops import seam
    from sglang_ascend_hybrid.ops.gdn import contract, prefill

    entry = gdn_triton_chunk.make_triton_chunk_emulator(mega=None, version="2026.6.1")
    with seam.install_emulators({}):
        assert prefill.probe_triton_entry_before_serving(6, 2, 128, 128, torch.bfloat16, "cpu") is None
    with seam.install_emulators({contract.OP_TRITON: entry}):
        assert prefill.probe_triton_entry_before_serving(6, 2, 128, 128, torch.float32, "cpu") is None
        v = prefill.probe_triton_entry_before_serving(6, 2, 128, 128, torch.bfloat16, "cpu")
        assert v.verdict == csp.STRIDE_64
        with seam.capture_region():
            assert csp.stride_verdict(6, 2, 128, 128, torch.bfloat16, "cpu") is v


@pytest.mark.parametrize("state_dtype,expected", [(torch.float32, True), (torch.bfloat16, False)])
def test_static_prefill_reasons_say_where_the_stride_probe_decides(state_dtype, expected):
    """``plan``'s per-rung verdicts mark the Triton rung as decided by the startup probe exactly
    where the rung itself would ask the probe (an fp32 pool, Triton not running the mega kernel)."""
    from sglang_ascend_hybrid.ops.gdn import prefill, signature

    sig = signature.GdnSignature(6, 2, 128, 128, torch.bfloat16, state_dtype=state_dtype)
    rows = {name: (reason, probe) for name, reason, probe in
            prefill.prefill_static_reasons(sig, environ={"GDN_USE_MEGA_GDN": "0"})}
    runs_mega = prefill.triton_runs_mega(sig, {"GDN_USE_MEGA_GDN": "0"}, True)
    assert rows["triton"][1] is (expected and not runs_mega)
    assert rows["triton"][1] == prefill.triton_needs_probe(sig, runs_mega)
    assert not rows["npu_chunk"][1] and not rows["torch"][1]
