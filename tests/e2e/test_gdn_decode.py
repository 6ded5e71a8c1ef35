"""Whole GDN models whose plain decode goes through the plugin's decode hook, with the
sgl-kernel-npu Triton decode kernel emulated in both state layouts it may have in a build:
key first (as its readable source addresses the pool) and value first (the pool's layout).

The decode-layout probe runs at backend construction; the kernel serves only on a value-first
verdict, else decode runs on the recurrent op (bf16 pool) or torch (fp32 pool).  Either way
greedy tokens and logits equal transformers'.  The negative control lies to the ladder (a
value-first verdict recorded for a key-first kernel): decode then reads transposed states and
the comparison must fail."""

from __future__ import annotations

import functools

import pytest
import torch

from sglang_ascend_hybrid.ops import probes, seam
from sglang_ascend_hybrid.ops.gdn.decode import contract as dc
from sglang_ascend_hybrid.ops.gdn.decode import probe as decode_probe
from tests.e2e import device, harness
from tests.e2e.runner import run_family
from tests.support.release_subset import older_releases_run

PLAN = harness.StepPlan()
GDN_LAYERS = 3
RUNG_FOR = {  # (layout, pool dtype) -> the rung that must serve decode
    ("value_first", torch.bfloat16): "triton_decode", ("value_first", torch.float32): "triton_decode",
    ("key_first", torch.bfloat16): "npu_recurrent", ("key_first", torch.float32): "torch",
}


def _runs(name: str, layout: str, ssm_dtype: torch.dtype, breakage=None):
    dev = functools.partial(device.npu_emulators, decode_layout=layout)
    return run_family(name, dtype=torch.bfloat16, device=dev, ssm_dtype=ssm_dtype, breakage=breakage)


# older releases: Qwen3.5 with the bf16 pool, both kernel layouts
@pytest.mark.parametrize("name", older_releases_run(["qwen3_5", "qwen3_next"], keep=(0,)))
@pytest.mark.parametrize("layout", ["key_first", "value_first"])
@pytest.mark.parametrize("ssm_dtype", older_releases_run([torch.bfloat16, torch.float32], keep=(0,)),
                         ids=["bf16_pool", "fp32_pool"])
def test_gdn_decode_matches_transformers_for_either_kernel_layout(name, layout, ssm_dtype):
    run = _runs(name, layout, ssm_dtype)
    cmp = run.compare()
    assert cmp.bf16_ok(), str(cmp)
    text = run.log_text()
    verdict = dc.VALUE_FIRST if layout == "value_first" else dc.KEY_FIRST
    assert f"probe gdn-decode-layout {device.DECODE_ENTRY} q=bfloat16 pool={str(ssm_dtype)[6:]}" in text, text
    assert f": {verdict} (" in text, text
    rung = RUNG_FOR[(layout, ssm_dtype)]
    assert "GDN decode (NumValueHeads" in text and f"runs on the {rung} kernel" in text, text
    # every GDN layer of every decode step reached the rung's device op (torch: none)
    decode_calls = GDN_LAYERS * PLAN.decodes
    kernel_calls = run.device_calls.get(device.OP_GDN_DECODE, 0)
    recurrent_calls = run.device_calls.get("recurrent_gated_delta_rule", 0)
    assert run.device_calls.get(f"probe:{device.OP_GDN_DECODE}") == 1, run.device_calls  # at construction
    assert kernel_calls == (decode_calls if rung == "triton_decode" else 0), run.device_calls
    assert recurrent_calls == (decode_calls if rung == "npu_recurrent" else 0), run.device_calls


def _lie_value_first(mp):
    """The probe disabled: a value-first verdict recorded for the installed (key-first) kernel."""
    real = decode_probe.measure

    def measure(entry, q_dtype, pool_dtype, k, v, dev):
        found = real(entry, q_dtype, pool_dtype, k, v, dev)
        return probes.Verdict(found.probe, found.signature, dc.VALUE_FIRST, True, "forced by the negative control")

    mp.setattr(decode_probe, "measure", measure)


@pytest.mark.parametrize("ssm_dtype", older_releases_run([pytest.param(torch.bfloat16, id="bf16_pool"),
                                                        pytest.param(torch.float32, id="fp32_pool")], keep=(0,)))
def test_negative_control_key_first_kernel_without_the_probe_fails(ssm_dtype):
    run = _runs("qwen3_5", "key_first", ssm_dtype, breakage=_lie_value_first)
    assert "runs on the triton_decode kernel" in run.log_text()
    cmp = run.compare()
    assert not cmp.bf16_ok(), f"a key-first kernel on a value-first pool went unnoticed: {cmp}"


def test_emulated_device_offers_the_decode_entry_sglang_imports():
    assert device.DECODE_ENTRY in dc.DECODE_ENTRIES
    with device.npu_emulators():
        assert seam.available(device.OP_GDN_DECODE)
