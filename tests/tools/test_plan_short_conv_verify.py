"""``plan``'s speculative-verify line for the short-conv families follows the verify ladder's
contract: the NPU conv op's speculative mode at width 4 (fp16 / bf16), causal_conv1d_update_v2's
in fp16 at widths 2-4, the torch path otherwise (with the reason), ZAYA1's CCA verify."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from sglang_ascend_hybrid.tools import plan


@pytest.mark.parametrize("width,dtype,expected", [
    (4, "bfloat16", "torch.ops.npu.causal_conv1d speculative mode"),
    (4, "float16", "torch.ops.npu.causal_conv1d speculative mode"),
    (3, "float16", "causal_conv1d_update_v2 speculative mode"),
    (2, "float16", "causal_conv1d_update_v2 speculative mode"),
    (3, "bfloat16", "torch (torch.ops.npu.causal_conv1d's speculative mode takes width 4 only"),
    (4, "float32", "torch ("),
    (5, "float16", "torch ("),
])
def test_lfm2_verify_kernel_follows_the_contract(width, dtype, expected):
    got = plan.short_conv_verify_kernel(NS(kind="lfm2_short_conv", width=width), dtype)
    assert got.startswith("npu (" + expected) or got.startswith(expected), got
    if expected.startswith("torch ("):
        assert f"width {width}, {dtype}" in got


def test_zaya_verify_is_the_plugin_cca_verify():
    assert "CCA verify" in plan.short_conv_verify_kernel(NS(kind="zaya_cca", width=4), "float16")
