"""The short-conv families served by SGLang's real Engine on the emulated Ascend device, against
transformers: LFM2 in fp32 and bf16 (with ``--disable-cuda-graph``; its decode graphs are in
test_graphs_tp.py); LFM2-MoE, ZAYA1 and LFM2-VL's text path in bf16, with SGLang's default decode
graphs on.  The MoE families run bf16 only: SGLang's NPU MoE path
(``hardware_backend/npu/moe/matmul.py``) asks ``npu_grouped_matmul`` for a bf16 output whatever the
activations' dtype, which the op refuses for fp32 activations (its documentation ties the output
dtype to the input's without quantisation): an fp32 MoE model does not run on SGLang's Ascend stack."""

from __future__ import annotations

import pytest

from tests.runtime import tier

# one Engine per configuration: the tests of a family share a worker (scripts/test.sh: --dist loadgroup)
pytestmark = [pytest.mark.runtime, pytest.mark.xdist_group("runtime-short-conv")]


# the older releases run LFM2 fp32 with speculative decoding only (test_speculative.py), for CI time
@pytest.mark.base_release_only
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_lfm2_matches_transformers(dtype):
    r = tier.run("lfm2", dtype)
    tier.assert_served_whole(r)
    tier.assert_matches_transformers(r)


@pytest.mark.base_release_only
def test_lfm2_fp32_runs_the_plugin_and_the_ascend_stack():
    served = tier.run("lfm2", "float32").served
    assert "sglang-ascend-hybrid: --attention-backend ascend_hybrid runs on SGLang's Ascend stack" in served.log
    assert "Lfm2Config on NPU uses the Ascend short-conv backend" in served.log
    # fp32 is outside every NPU conv kernel's contract: the plugin's torch path serves prefill and decode
    assert {("causal_conv1d_fn", "torch"), ("causal_conv1d_update", "torch")} <= served.rungs()
    assert {"torch_npu._npu_flash_attention_qlens", "torch_npu._npu_paged_attention",
            "torch_npu._npu_reshape_and_cache"} <= served.device_ops()


@pytest.mark.base_release_only
def test_lfm2_bf16_serves_on_the_npu_conv_kernel():
    served = tier.run("lfm2", "bfloat16").served
    assert {("causal_conv1d_fn", "npu_aclnn"), ("causal_conv1d_update", "npu_aclnn")} <= served.rungs()
    assert "causal_conv1d" in served.device_ops()  # the plugin's seam op, torch.ops.npu.causal_conv1d


@pytest.mark.base_release_only
def test_lfm2_moe_bf16_matches_transformers():
    r = tier.run("lfm2_moe", "bfloat16", engine=tier.GRAPHS)
    tier.assert_served_whole(r)
    tier.assert_matches_transformers(r)
    assert {"torch.ops.npu.npu_moe_gating_top_k", "torch.ops.npu.npu_moe_init_routing_v2",
            "torch.ops.npu.npu_grouped_matmul", "torch.ops.npu.npu_moe_finalize_routing"} <= r.served.device_ops()
    assert ("causal_conv1d_fn", "npu_aclnn") in r.served.rungs()


@pytest.mark.base_release_only
def test_zaya_bf16_matches_transformers():
    r = tier.run("zaya", "bfloat16", engine=tier.GRAPHS)
    tier.assert_served_whole(r)
    tier.assert_matches_transformers(r)
    assert "torch.ops.npu.npu_grouped_matmul" in r.served.device_ops()


@pytest.mark.base_release_only
def test_lfm2_vl_text_requests_bf16_match_transformers():
    """LFM2-VL's text path (its LFM2 language model inside ``Lfm2VlForConditionalGeneration``) with no
    prefix cache: SGLang lists the architecture in neither of its mamba radix-cache lists
    (``arg_groups/overrides.py``), so no request gets cached tokens."""
    r = tier.run("lfm2_vl", "bfloat16", engine=tier.GRAPHS)
    tier.assert_served_whole(r, radix=False)
    tier.assert_matches_transformers(r)
    assert ("causal_conv1d_fn", "npu_aclnn") in r.served.rungs()


@pytest.mark.base_release_only
@pytest.mark.parametrize("family", ["lfm2_moe", "zaya", "lfm2_vl"])
def test_default_flags_replay_decode_graphs(family):
    tier.assert_decode_replayed_graphs(tier.run(family, "bfloat16", engine=tier.GRAPHS).served)


@pytest.mark.base_release_only
def test_negative_control_a_broken_conv_prefix_fails_the_comparison():
    """The short-conv sidecar broken in SGLang's scheduler process (no request has a saved conv state:
    chunked-prefill continuations and radix hits restart from zeros): the tier must see it."""
    r = tier.run("lfm2", "float32", env={"SGLANG_ASCEND_HYBRID_EMULATED_NPU_BREAK": "ignore-saved-conv-state"})
    assert not r.comparison.tokens_equal or r.comparison.max_gap > 100 * tier.FP32_LOGPROB_TOL, str(r.comparison)
    assert r.comparison.max_gap > 100 * tier.FP32_LOGPROB_TOL, str(r.comparison)  # not a near miss
