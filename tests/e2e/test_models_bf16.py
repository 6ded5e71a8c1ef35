"""Whole models in bf16 on the NPU-op emulators (the plugin's CPU emulators with the
real contracts behind the seam; SGLang's direct ``torch.ops.npu`` calls bound to the
same emulators), against transformers in fp32 on the same bf16-rounded weights.

Tolerance: teacher-forced (transformers recomputes each request's full history of
SGLang's own tokens), SGLang's argmax must equal transformers' wherever transformers'
top-1 / top-2 margin exceeds 0.5, and every logit is within 0.5."""

from __future__ import annotations

import functools

import pytest
import torch

from sglang_ascend_hybrid.ops.gdn.prefill import plan_exec
from tests.e2e import device, harness
from tests.e2e.runner import run_family
from tests.support.release_subset import older_releases_run

PLAN = harness.StepPlan()
EXTENDS = 2
GDN_LAYERS = 3


# SGLang 0.5.23 with an sgl-kernel-npu release that has no torch.ops.npu.chunk_gated_delta_rule
# (every tag up to 2026.08.21) and a bf16 SSM pool: the plugin's ladder runs the mega kernel,
# which refuses the per-rank (6, 2) pair of Qwen3.6-27B at TP=8, through the head planner.
NO_CHUNK_OP = functools.partial(device.npu_emulators, npu_chunk=False)


@pytest.mark.parametrize("name,variant",
                         [("lfm2", "all"), ("lfm2_moe", "all"), ("lfm2_vl", "all"), ("lfm2", "release")])
def test_lfm2_families_bf16_on_the_npu_conv_kernels(name, variant):
    """``all``: the window-major v2 ops (sgl-kernel-npu branch of sglang PR #38252) serve the
    conv layers; ``release``: released sgl-kernel-npu, ``torch.ops.npu.causal_conv1d`` for
    prefill and decode (state rows [0, W-1) of the window-major pool)."""
    dev = functools.partial(device.npu_emulators, conv_variant=variant)
    run = run_family(name, dtype=torch.bfloat16, device=dev)
    cmp = run.compare()
    assert cmp.bf16_ok(), str(cmp)
    layers = 3
    assert run.calls == {"causal_conv1d_fn": layers * EXTENDS, "causal_conv1d_update": layers * PLAN.decodes}
    if variant == "all":
        expected = {device.OP_CONV_FN_V2: layers * EXTENDS, device.OP_CONV_UPDATE_V2: layers * PLAN.decodes}
    else:
        expected = {device.OP_CONV_ACLNN: layers * (EXTENDS + PLAN.decodes)}
    assert run.device_calls == expected, run.device_calls


def test_zaya_bf16():
    run = run_family("zaya", dtype=torch.bfloat16, device=device.npu_emulators)
    cmp = run.compare()
    assert cmp.bf16_ok(), str(cmp)


def test_qwen3_next_bf16_on_the_npu_gdn_ops():
    """bf16 SSM pool (``--mamba-ssm-dtype bfloat16``): the chunk op's contract holds on A3."""
    run = run_family("qwen3_next", dtype=torch.bfloat16, device=device.npu_emulators, ssm_dtype=torch.bfloat16)
    cmp = run.compare()
    assert cmp.bf16_ok(), str(cmp)
    # the plugin's prefill ladder ran the chunk op for every GDN layer of both extends;
    # SGLang's Ascend backend ran the NPU conv op for every GDN layer of every step
    assert "state=bfloat16 runs on the npu_chunk kernel" in run.log_text()
    assert run.device_calls.get(device.OP_GDN_CHUNK) == GDN_LAYERS * EXTENDS, run.device_calls
    assert run.device_calls.get(device.OP_CONV_ACLNN) == GDN_LAYERS * (EXTENDS + PLAN.decodes)


@pytest.mark.parametrize("name", older_releases_run(["qwen3_5", "qwen3_5_moe"], keep=(0,)))
def test_qwen3_5_fp32_pool_keeps_its_precision_on_a3(name):
    """Qwen3.5 / 3.6 configs (dense and MoE) ask for an fp32 SSM pool: on A2 / A3 the chunk op
    keeps fp32 states only on Ascend 950 and the mega kernel keeps fp16 ones, so the ladder
    serves the model on a rung that keeps fp32 (torch), never calling a device GDN op."""
    run = run_family(name, dtype=torch.bfloat16, device=device.npu_emulators)
    cmp = run.compare()
    assert cmp.bf16_ok(), str(cmp)
    text = run.log_text()
    assert "state=float32 cannot use the npu_chunk kernel" in text, text
    assert "state=float32 cannot use the mega kernel" in text, text
    assert "state=float32 runs on the torch kernel" in text, text
    assert device.OP_GDN_CHUNK not in run.device_calls and device.OP_GDN_MEGA not in run.device_calls


@pytest.mark.base_release_only  # the plugin's head planner, no release-dependent route (CI time)
def test_qwen3_5_6_2_heads_run_the_head_plan_inside_the_forward():
    run = run_family("qwen3_5", dtype=torch.bfloat16, device=NO_CHUNK_OP, ssm_dtype=torch.bfloat16)
    cmp = run.compare()
    assert cmp.bf16_ok(), str(cmp)
    text = run.log_text()
    assert "(6, 2) K=128 V=128 bfloat16 state=bfloat16 runs on the mega kernel via pad plan launches=[(8, 2)]" \
        in text, text
    # the mega kernel (one padded (8, 2) launch) ran every GDN layer's prefill
    assert run.device_calls.get(device.OP_GDN_MEGA) == GDN_LAYERS * EXTENDS, run.device_calls
    assert run.calls["chunk_with_states"] == GDN_LAYERS * EXTENDS


def _refuse_after_first_call(chunk_op):
    """The chunk op serves the first GDN layer of the first step, then refuses (with its
    own refusal text, from the emulator told to refuse the pair): the ladder takes over
    mid-model, on state the op wrote."""
    refusing = device.gdn_emulators(npu_chunk_refuse=lambda hv, hk: True)[device.OP_GDN_CHUNK]
    seen = []

    def op(*args, **kwargs):
        seen.append(1)
        return (chunk_op if len(seen) == 1 else refusing)(*args, **kwargs)

    return op


@pytest.mark.base_release_only  # the prefill ladder's call-time fallback is the plugin's own (CI time)
def test_qwen3_5_prefill_kernel_refusing_mid_model_falls_back():
    dev = functools.partial(device.npu_emulators, wrap_chunk=_refuse_after_first_call)
    run = run_family("qwen3_5", dtype=torch.bfloat16, device=dev, ssm_dtype=torch.bfloat16)
    cmp = run.compare()
    assert cmp.bf16_ok(), str(cmp)
    text = run.log_text()
    assert text.count("refused") == 1, text
    # layer 0 of step 1 on the chunk op; layer 1 refused there and, like every later call,
    # was served by the next rung (the mega kernel through the (8, 2) pad plan)
    assert run.device_calls.get(device.OP_GDN_CHUNK) == 2, run.device_calls
    assert run.device_calls.get(device.OP_GDN_MEGA) == GDN_LAYERS * EXTENDS - 1, run.device_calls


def wrong_head_mapping(mp):
    """The head plan puts each value head of a launch back in the wrong place: value
    heads paired with the neighbouring key group's heads (the mapping the plan exists to
    get right)."""
    real = plan_exec._slots

    def slots(launch, ratio, dev):
        real_ids, slot = real(launch, ratio, dev)
        return real_ids.flip(0), slot

    mp.setattr(plan_exec, "_slots", slots)


def test_negative_control_wrong_gdn_head_mapping_fails():
    run = run_family("qwen3_5", dtype=torch.bfloat16, device=NO_CHUNK_OP, ssm_dtype=torch.bfloat16,
                     breakage=wrong_head_mapping)
    cmp = run.compare()
    assert run.device_calls.get(device.OP_GDN_MEGA) == GDN_LAYERS * EXTENDS  # the broken plan did run
    assert not cmp.bf16_ok(), f"a wrong head mapping still matched transformers: {cmp}"
