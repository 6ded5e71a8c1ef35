"""Whole models in fp32: every family's greedy tokens and logits through the plugin equal
transformers' (same weights, full recompute), and the plugin's paths served the linear
layers.  Step plan (:class:`tests.e2e.harness.StepPlan`): a chunked prefill of request
A, one EXTEND batch of A's continuation with new requests B and C, then 8 DECODE steps
of all three, on a window-major NPU pool with scattered mamba slots.

fp32 runs take the ladders' torch rungs: the NPU conv and GDN ops are fp16 / bf16
only.  In the GDN runs the GDN emulators sit behind the seam (an emulated Atlas A3), so
the plugin's prefill hook sees the device rungs and rules them out by their contracts."""

from __future__ import annotations

import pytest

from sglang_ascend_hybrid.integration import short_conv
from sglang_ascend_hybrid.ops.gdn.contract import OP_L2NORM
from tests.e2e import device, harness
from tests.e2e.runner import GDN_FAMILIES, run_family

PLAN = harness.StepPlan()
EXTENDS = 2  # the first chunk of A, then A's continuation + B + C
STEPS = EXTENDS + PLAN.decodes

# layers served by the plugin, per family (the tiny configs' real layer patterns)
LFM2_CONV_LAYERS = {"lfm2": 3, "lfm2_moe": 3, "lfm2_vl": 3}  # conv, conv, full_attention, conv
ZAYA_CCA_LAYERS = 2  # attention (CCA), MoE, attention (CCA), MoE
GDN_LAYERS = 3  # linear_attention x3, full_attention


def _device(name):
    return device.gdn_fp32 if name in GDN_FAMILIES else None


@pytest.mark.parametrize("name", ["lfm2", "lfm2_moe", "lfm2_vl"])
def test_lfm2_families_match_transformers(name, monkeypatch):
    views = []
    real = short_conv.layer_cache_cuda_view
    monkeypatch.setattr(short_conv, "layer_cache_cuda_view", lambda *a: views.append(1) or real(*a))
    run = run_family(name)
    cmp = run.compare()
    assert cmp.fp32_ok(), str(cmp)
    assert isinstance(run.backend, short_conv.backend_classes()[1])
    layers = LFM2_CONV_LAYERS[name]
    # every conv layer of every step took its state through the sidecar's pool views and
    # ran the plugin's conv op (prefill: causal_conv1d_fn, decode: causal_conv1d_update)
    assert len(views) == layers * STEPS
    assert run.calls == {"causal_conv1d_fn": layers * EXTENDS, "causal_conv1d_update": layers * PLAN.decodes}
    assert "using the torch path" not in run.log_text()  # no device rung was possible in fp32 on a CPU


def test_zaya_matches_transformers(monkeypatch):
    views = []
    real = short_conv.layer_cache_cuda_view
    monkeypatch.setattr(short_conv, "layer_cache_cuda_view", lambda *a: views.append(1) or real(*a))
    run = run_family("zaya")
    cmp = run.compare()
    assert cmp.fp32_ok(), str(cmp)
    assert isinstance(run.backend, short_conv.backend_classes()[1])
    assert len(views) == ZAYA_CCA_LAYERS * STEPS  # CCA's conv / prev-hidden states: views of the pool


@pytest.mark.parametrize("name", GDN_FAMILIES)
def test_gdn_families_match_transformers(name):
    run = run_family(name, device=_device(name))
    cmp = run.compare()
    assert cmp.fp32_ok(), str(cmp)
    # every GDN layer's prefill went through the plugin's hook and ladder (torch rung); the
    # device ops' contracts exclude fp32 before any call (the decode-layout probe at backend
    # construction is the one call: the emulated kernel is key-first, so decode runs on torch), but
    # for sgl-kernel-npu's Triton l2norm_fwd, which normalises fp32 q and k too (one call each)
    assert run.calls == {"chunk_with_states": GDN_LAYERS * EXTENDS}
    assert "float32 state=float32 runs on the torch kernel" in run.log_text()
    assert run.device_calls == {f"probe:{device.OP_GDN_DECODE}": 1, OP_L2NORM: 2 * GDN_LAYERS * EXTENDS}
