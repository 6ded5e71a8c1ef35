"""LFM2 served by SGLang's real Engine on the emulated Ascend device, against transformers."""

from __future__ import annotations

import pytest

from tests.runtime import tier

# one Engine per configuration: the tests of a family share a worker (scripts/test.sh: --dist loadgroup)
pytestmark = [pytest.mark.runtime, pytest.mark.xdist_group("runtime-lfm2")]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_lfm2_matches_transformers(dtype):
    r = tier.run("lfm2", dtype)
    tier.assert_served_whole(r)
    tier.assert_matches_transformers(r)


def test_lfm2_fp32_runs_the_plugin_and_the_ascend_stack():
    served = tier.run("lfm2", "float32").served
    assert "sglang-ascend-hybrid: --attention-backend ascend_hybrid runs on SGLang's Ascend stack" in served.log
    assert "Lfm2Config on NPU uses the Ascend short-conv backend" in served.log
    # fp32 is outside every NPU conv kernel's contract: the plugin's torch path serves prefill and decode
    assert {("causal_conv1d_fn", "torch"), ("causal_conv1d_update", "torch")} <= served.rungs()
    assert {"torch_npu._npu_flash_attention_qlens", "torch_npu._npu_paged_attention",
            "torch_npu._npu_reshape_and_cache"} <= served.device_ops()


def test_lfm2_bf16_serves_on_the_npu_conv_kernel():
    served = tier.run("lfm2", "bfloat16").served
    assert ("causal_conv1d_fn", "npu_aclnn") in served.rungs(), served.rungs()
    assert "torch.ops.npu.causal_conv1d" in served.device_ops() or "causal_conv1d" in served.device_ops()
