"""The gates of a GDN target-verify step (``ops/gdn/verify_gates.py``, the ``gdn_verify_gates`` ladder, and the
``gdn-verify-gates`` hook): SGLang's without-sigmoid gating kernel where its tiling serves the token count, the
sibling ``fused_gdn_gating_npu`` or torch elsewhere, against an fp64 loop."""

from __future__ import annotations

import logging
import math

import pytest
import torch

from sglang_ascend_hybrid.emulators import gdn_gating as emu
from sglang_ascend_hybrid.integration import gdn_hooks
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.gdn import contract as caps
from sglang_ascend_hybrid.ops.gdn import verify_gates as vg
from sglang_ascend_hybrid.ops.gdn.contract import GATING_ARANGE_TEXT, OP_GATING
from tests.support.call_counter import Counting
from tests.support.sync_counter import SyncCounter


def _inputs(T, H, seed=0, dtype=torch.bfloat16):
    gen = torch.Generator().manual_seed(seed)
    return dict(A_log=torch.randn(H, generator=gen) * 0.5, a=(torch.randn(T, H, generator=gen) * 2).to(dtype),
                b=torch.randn(T, H, generator=gen).to(dtype), dt_bias=torch.randn(H, generator=gen))


def _fp64_g(x, beta=1.0, threshold=20.0):
    """g[t, h] = -exp(A_log[h]) * softplus(a[t, h] + dt_bias[h]), one element at a time in fp64."""
    T, H = x["a"].shape
    g = torch.empty(1, T, H, dtype=torch.float64)
    for t in range(T):
        for h in range(H):
            z = float(x["a"][t, h]) + float(x["dt_bias"][h])
            sp = z if beta * z > threshold else math.log1p(math.exp(beta * z)) / beta
            g[0, t, h] = -math.exp(float(x["A_log"][h])) * sp
    return g


@pytest.fixture(autouse=True)
def _fresh_ladder():
    vg.VERIFY_GATES.forget_refusals()
    yield
    vg.VERIFY_GATES.forget_refusals()


def test_the_tiling_rule_is_the_emulated_kernels():
    """The predicate mirrors the kernel's host (the emulator, written from it, run under Triton's interpreter):
    for every head count and token count, it says no exactly where the kernel raises its tiling error."""
    for H in (1, 4, 6, 8, 9, 16, 17, 32, 48, 64, 121, 128, 200, 377, 385):
        w = torch.zeros(H)
        for T in range(1, 340, 1 if H < 16 else 7):
            a = torch.zeros(T, H)
            try:
                emu.fused_gdn_gating_kernel_without_sigmoid(w, a, a, w)
                tiles = True
            except ValueError as exc:
                assert GATING_ARANGE_TEXT in str(exc)
                tiles = False
            reason = caps.without_sigmoid_tiling_reason(T, H)
            assert (reason is None) == tiles, (T, H, reason)
            if reason is not None:
                assert f"{T} tokens x {H} heads" in reason and GATING_ARANGE_TEXT in reason
    assert "empty range" in caps.without_sigmoid_tiling_reason(0, 6)


@pytest.mark.parametrize("T, served_by", [(96, "without_sigmoid"), (97, "npu_gating"), (100, "npu_gating"),
                                          (144, "npu_gating"), (145, "without_sigmoid"), (200, "npu_gating")])
def test_the_hook_serves_every_token_count_with_the_kernels_g(T, served_by, caplog):
    """Qwen3.6-27B at TP=8 (6 value heads per rank), 4 draft tokens: 97..144 tokens are 25..36 requests."""
    x = _inputs(T, 6, seed=T)
    kernel, npu = Counting(emu.fused_gdn_gating_kernel_without_sigmoid), Counting(emu.fused_gdn_gating_npu)
    with seam.install_emulators({OP_GATING: npu}), caplog.at_level(logging.INFO):
        g, b = gdn_hooks.ascend_verify_gates(kernel, x["A_log"], x["a"], x["b"], x["dt_bias"])
    assert b is x["b"]   # the verify op takes b as given (it applies the sigmoid)
    assert g.dtype == torch.float32 and g.shape == (1, T, 6)
    torch.testing.assert_close(g.double(), _fp64_g(x), atol=2e-6, rtol=2e-6)
    assert (kernel.calls, npu.calls) == ((1, 0) if served_by == "without_sigmoid" else (0, 1))
    said = [r.getMessage() for r in caplog.records if "runs on the" in r.getMessage()]
    assert said == [f"sglang-ascend-hybrid: GDN verify gates (heads=6, bfloat16) runs on the {served_by} kernel"]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_the_first_rung_needs_the_kernel_the_hook_is_handed():
    x = _inputs(96, 6)
    call = vg.VerifyGatesCall(x["A_log"], x["a"], x["b"], x["dt_bias"])
    reason = vg.VERIFY_GATES.why_not(vg.VERIFY_GATES.rungs[0], call.signature(), call)
    assert reason == "no without-sigmoid kernel was handed to this call"


def test_without_the_sibling_kernel_torch_serves_the_same_g(caplog):
    x = _inputs(100, 6, seed=3)
    kernel = Counting(emu.fused_gdn_gating_kernel_without_sigmoid)
    with caplog.at_level(logging.INFO):
        g, b = vg.verify_gates(x["A_log"], x["a"], x["b"], x["dt_bias"], kernel=kernel)   # CPU: no device op
    assert kernel.calls == 0 and b is x["b"]
    torch.testing.assert_close(g.double(), _fp64_g(x), atol=2e-6, rtol=2e-6)
    assert "GDN verify gates (heads=6, bfloat16) runs on the torch kernel" in caplog.text


def test_softplus_beta_and_threshold_reach_every_rung():
    x = _inputs(100, 6, seed=4)
    want = _fp64_g(x, beta=2.0, threshold=1.5)
    with seam.install_emulators({OP_GATING: emu.fused_gdn_gating_npu}):
        g_npu, _ = vg.verify_gates(x["A_log"], x["a"], x["b"], x["dt_bias"], 2.0, 1.5)
    g_torch, _ = vg.verify_gates(x["A_log"], x["a"], x["b"], x["dt_bias"], 2.0, 1.5)
    y = _inputs(96, 6, seed=4)
    g_kernel, _ = vg.verify_gates(y["A_log"], y["a"], y["b"], y["dt_bias"], 2.0, 1.5,
                                  kernel=emu.fused_gdn_gating_kernel_without_sigmoid)
    for g in (g_npu, g_torch):
        torch.testing.assert_close(g.double(), want, atol=2e-6, rtol=2e-6)
    torch.testing.assert_close(g_kernel.double(), _fp64_g(y, beta=2.0, threshold=1.5), atol=2e-6, rtol=2e-6)


def test_strided_gating_inputs_reach_the_sibling_kernel_contiguous():
    """The kernels address a[t, h] at t * H + h whatever the strides (the emulator raises on a strided a)."""
    x = _inputs(100, 6, seed=5)
    wide = torch.randn(100, 12).to(torch.bfloat16)
    wide[:, ::2] = x["a"]
    x["a"] = wide[:, ::2]
    with seam.install_emulators({OP_GATING: emu.fused_gdn_gating_npu}):
        g, _ = vg.verify_gates(x["A_log"], x["a"], x["b"], x["dt_bias"])
    torch.testing.assert_close(g.double(), _fp64_g(x), atol=2e-6, rtol=2e-6)


def test_a_build_that_still_refuses_is_marked_and_the_sibling_serves(caplog):
    """A build whose tiling differs from the source read: its refusal text is recognised at call time, said
    once, and the signature's later calls go to the sibling kernel without calling it again."""
    def refusing(A_log, a, b, dt_bias, beta=1.0, threshold=20.0):
        raise ValueError(GATING_ARANGE_TEXT)

    kernel, sibling = Counting(refusing), Counting(emu.fused_gdn_gating_npu)
    x = _inputs(8, 6, seed=6)
    with seam.install_emulators({OP_GATING: sibling}), caplog.at_level(logging.INFO):
        g1, _ = vg.verify_gates(x["A_log"], x["a"], x["b"], x["dt_bias"], kernel=kernel)
        g2, _ = vg.verify_gates(x["A_log"], x["a"], x["b"], x["dt_bias"], kernel=kernel)
    assert kernel.calls == 1 and sibling.calls == 2   # the sibling serves the refused call itself, then the next
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    for g in (g1, g2):
        torch.testing.assert_close(g.double(), _fp64_g(x), atol=2e-6, rtol=2e-6)
    refused = [r.getMessage() for r in caplog.records if "without_sigmoid refused" in r.getMessage()]
    assert len(refused) == 1 and "(heads=6, bfloat16)" in refused[0] and "npu_gating" in refused[0]


def test_an_error_that_is_not_the_tiling_refusal_propagates():
    def broken(A_log, a, b, dt_bias, beta=1.0, threshold=20.0):
        raise TypeError("a real bug")

    x = _inputs(8, 6)
    with pytest.raises(TypeError, match="a real bug"):
        vg.verify_gates(x["A_log"], x["a"], x["b"], x["dt_bias"], kernel=broken)


def test_the_tiling_reason_is_said_once_per_signature(caplog):
    with caplog.at_level(logging.INFO):
        for T in (97, 100, 97):
            x = _inputs(T, 6)
            vg.verify_gates(x["A_log"], x["a"], x["b"], x["dt_bias"],
                            kernel=emu.fused_gdn_gating_kernel_without_sigmoid)
    said = [r.getMessage() for r in caplog.records if "cannot use the without_sigmoid kernel" in r.getMessage()]
    assert len(said) == 1 and "it tiles 97 tokens x 6 heads into blocks of 3 tokens" in said[0]


def test_an_empty_batch_is_served_by_torch():
    x = _inputs(0, 6)
    kernel, npu = Counting(emu.fused_gdn_gating_kernel_without_sigmoid), Counting(emu.fused_gdn_gating_npu)
    with seam.install_emulators({OP_GATING: npu}):
        g, b = vg.verify_gates(x["A_log"], x["a"], x["b"], x["dt_bias"], kernel=kernel)
    assert g.shape == (1, 0, 6) and b is x["b"] and (kernel.calls, npu.calls) == (0, 0)


@pytest.mark.parametrize("name, value, shown, expected", [
    ("a", lambda x: x["a"][None], "shape (1, 6, 6)", "[T, H] (the kernels' hosts unpack batch, num_heads = a.shape)"),
    ("b", lambda x: x["b"][:-1], "shape (5, 6)", "6 x 6 = 36 entries, as a"),
    ("A_log", lambda x: x["A_log"][:-1], "shape (5,)", "6 entries (one per head)"),
    ("dt_bias", lambda x: torch.zeros(7), "shape (7,)", "6 entries (one per head)"),
    ("a.dtype", lambda x: x["a"].to(torch.int32), "torch.int32", "a floating-point dtype"),
    ("b", lambda x: [1.0], "[1.0]", "a torch.Tensor"),
])
def test_bad_inputs_are_refused_naming_the_argument(name, value, shown, expected):
    x = _inputs(6, 6)
    x[name.split(".")[0]] = value(x)
    kernel = Counting(emu.fused_gdn_gating_kernel_without_sigmoid)
    with pytest.raises(ValueError) as err:
        vg.verify_gates(x["A_log"], x["a"], x["b"], x["dt_bias"], kernel=kernel)
    assert str(err.value) == f"GDN verify gates: {name}={shown}: expected {expected}"
    assert kernel.calls == 0


def test_under_capture_no_host_sync_and_the_same_gates():
    """Verify steps are captured in graph mode: the decision reads metadata only."""
    x = _inputs(100, 6, seed=7)
    with seam.install_emulators({OP_GATING: emu.fused_gdn_gating_npu}):
        eager, _ = vg.verify_gates(x["A_log"], x["a"], x["b"], x["dt_bias"],
                                   kernel=emu.fused_gdn_gating_kernel_without_sigmoid)
        with seam.capture_region(), SyncCounter(device_of_interest="cpu") as syncs:
            captured, _ = vg.verify_gates(x["A_log"], x["a"], x["b"], x["dt_bias"],
                                          kernel=emu.fused_gdn_gating_kernel_without_sigmoid)
    assert syncs.total == 0, syncs.counts
    assert torch.equal(eager, captured)


def test_the_ladder_walked_without_a_kept_decision_runs_the_same_kernels():
    """Each rung's ``run`` (what a walk down the ladder calls) is its prepared runner: the same kernel call."""
    x = _inputs(8, 6, seed=9)
    kernel, sibling = Counting(emu.fused_gdn_gating_kernel_without_sigmoid), Counting(emu.fused_gdn_gating_npu)
    with seam.install_emulators({OP_GATING: sibling}):
        kept = vg.verify_gates(x["A_log"], x["a"], x["b"], x["dt_bias"], kernel=kernel)
        call = vg.VerifyGatesCall(x["A_log"], x["a"], x["b"], x["dt_bias"], kernel=kernel)
        walked = vg.VERIFY_GATES(call.signature(), call)
        rows = vg.VerifyGatesCall(x["A_log"], x["a"], x["b"], x["dt_bias"])   # no kernel handed: the sibling
        sibling_walked = vg.VERIFY_GATES(rows.signature(), rows)
    assert kernel.calls == 2 and sibling.calls == 1
    assert torch.equal(kept[0], walked[0]) and walked[1] is x["b"]
    torch.testing.assert_close(sibling_walked[0].double(), _fp64_g(x), atol=2e-6, rtol=2e-6)
