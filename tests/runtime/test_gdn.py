"""The Gated DeltaNet families served whole by SGLang's real Engine on the emulated Ascend device, against
transformers: Qwen3.5 dense (the real checkpoint form, ``Qwen3_5ForConditionalGeneration`` with
``language_model_only``) with both SSM pool dtypes -- the config's fp32 pool (SGLang's
``--mamba-ssm-dtype float32``) and a bf16 pool (``mamba_ssm_dtype="bfloat16"``) --, Qwen3-Next with a
bf16 pool and Qwen3.5-MoE with its fp32 pool (one run each: every family meets the plugin's GDN ladders,
each pool dtype is served by a dense and a MoE family).

The model runs are bf16, plus one fp32 Qwen3.5 run as a numerics instrument: SGLang's Ascend GDN backend
calls ``torch.ops.npu.causal_conv1d`` itself, not through the plugin
(``hardware_backend/npu/attention/ascend_gdn_backend.py``: ``forward_extend`` and ``forward_decode``,
SGLang 0.5.23), and that op's host refuses fp32 activations (sgl-project/sgl-kernel-npu
``csrc/causal_conv1d/op_host/causal_conv1d.cpp`` at f425bdf1: ``TORCH_CHECK(dtype == at::kBFloat16 ||
dtype == at::kHalf, "Only BF16 and FP16 are supported")``): an fp32 GDN model does not run on SGLang's
Ascend stack.  The fp32 run widens that op (and the ATB attention ops) to fp32 on the emulated device
(``SGLANG_ASCEND_HYBRID_EMULATED_NPU_WIDEN_FP32``, which tier.run sets for fp32): the plugin's own ladders
still decide from the real contracts.  The MoE family is bf16-only: SGLang's NPU MoE (``hardware_backend/
npu/moe/matmul.py``) asks ``npu_grouped_matmul`` for a bf16 output, which the op refuses for fp32
activations.  bf16 runs are compared decisively (tokens equal wherever transformers' top-2 margin is
clear), the fp32 run exactly (tokens equal, log-probability gaps <= 1e-4).
"""

from __future__ import annotations

import pytest

from tests.runtime import tier

# one Engine per configuration: the tests of a family share a worker (scripts/test.sh: --dist loadgroup)
# these runs are the base release's, for CI time: every older release runs Qwen3.5 (fp32, the config's
# fp32 pool) with NEXTN in test_speculative.py
pytestmark = [pytest.mark.runtime, pytest.mark.xdist_group("runtime-gdn"), pytest.mark.base_release_only]

BF16_POOL = {"mamba_ssm_dtype": "bfloat16"}
# Qwen3.5 runs with --disable-cuda-graph (its decode graphs are in test_graphs_tp.py and test_speculative.py);
# Qwen3-Next and Qwen3.5-MoE with SGLang's default, decode graphs on
CONFIGS = {  # name: (family, Engine arguments, model dtype)
    "qwen3_5-fp32": ("qwen3_5", None, "float32"),
    "qwen3_5-fp32-pool": ("qwen3_5", None, "bfloat16"),
    "qwen3_5-bf16-pool": ("qwen3_5", BF16_POOL, "bfloat16"),
    "qwen3_next-bf16-pool": ("qwen3_next", {**BF16_POOL, **tier.GRAPHS}, "bfloat16"),
    "qwen3_5_moe": ("qwen3_5_moe", tier.GRAPHS, "bfloat16"),
}
GRAPH_CONFIGS = ("qwen3_next-bf16-pool", "qwen3_5_moe")
INVERT_LAYOUT = {"SGLANG_ASCEND_HYBRID_EMULATED_NPU_BREAK": "invert-decode-layout"}

# SGLang's Ascend GDN path: its direct device calls, whatever the pool, and its full-attention layers'
# decode op: the paged-attention op eagerly, FIA's .out form inside an NPU graph
GDN_DEVICE_OPS = {"torch.ops.npu.causal_conv1d", "sgl_kernel_npu.fla.fused_gdn_gating:fused_gdn_gating_npu",
                  "torch_npu._npu_flash_attention_qlens", "torch_npu._npu_reshape_and_cache"}
EAGER_DECODE_OPS = {"torch_npu._npu_paged_attention"}
GRAPH_DECODE_OPS = {"torch_npu.npu_fused_infer_attention_score.out"}
# SGLang's NPU MoE (routing, grouped matmul, finalize; l1_norm renormalises the top-k) and the shared
# expert's sigmoid gate
MOE_DEVICE_OPS = {"torch.ops.npu.npu_moe_gating_top_k_softmax", "sgl_kernel_npu.norm.l1_norm:l1_norm",
                  "torch.ops.npu.npu_moe_init_routing_v2", "torch.ops.npu.npu_grouped_matmul",
                  "torch.ops.npu.npu_moe_finalize_routing",
                  "sgl_kernel_npu.activation.fused_sigmoid_mul:fused_sigmoid_mul_broadcast"}
# the plugin's GDN ladders on an fp32 pool (A3): the rungs that keep fp32; on a bf16 pool: the NPU ops
# (radix tracking asks 64-token chunk states, which rules the mega kernel's 128-token chunks out)
# q / k normalised on sgl-kernel-npu's Triton l2norm_fwd before every prefill, as SGLang's chunk_gdn does
L2NORM = ("gdn_qk_l2norm", "npu_l2norm")
FP32_POOL_RUNGS = {L2NORM, ("gdn_prefill", "torch"), ("gdn_serving_decode", "torch")}


def _fp32_pool_rungs() -> set:
    """On the releases whose GDN prefill reaches sgl-kernel-npu's Triton entry through SGLang's own
    dispatcher (patch gdn-extend-ladder serves it there), the entry's hook serves prefill on its
    ``triton`` rung (its bf16 chunk states recomputed unrounded for tracking); elsewhere the ladder's
    torch rung keeps fp32."""
    from tests.e2e.npu_standins import entry_route_serves_prefill

    prefill = "triton" if entry_route_serves_prefill() else "torch"
    return {L2NORM, ("gdn_prefill", prefill), ("gdn_serving_decode", "torch")}
# the recurrent op takes the decay computed: on sgl-kernel-npu's Triton fused_gdn_gating_npu
BF16_POOL_RUNGS = {L2NORM, ("gdn_prefill", "npu_chunk"), ("gdn_serving_decode", "npu_recurrent"),
                   ("gdn_decode_gates", "npu_gating")}


def _gdn_rungs(served) -> set:
    return {(op, rung) for op, rung in served.rungs() if op.startswith("gdn")}


def _run(config: str, env=None) -> tier.Run:
    if config == "qwen3_5-fp32" and env is None:
        # the plain run of test_speculative.py's MTP checkpoint (SGLang loads no MTP layer without
        # speculative decoding): one Engine for both modules, which share this xdist group
        from tests.runtime.test_speculative import _run_mtp

        return _run_mtp("float32", {})
    family, engine, dtype = CONFIGS[config]
    return tier.run(family, dtype, engine=engine, env=env)


@pytest.mark.parametrize("config", CONFIGS)
def test_gdn_family_matches_transformers(config):
    r = _run(config)
    tier.assert_served_whole(r)
    tier.assert_matches_transformers(r)
    decode = GRAPH_DECODE_OPS if config in GRAPH_CONFIGS else EAGER_DECODE_OPS
    assert GDN_DEVICE_OPS | decode <= r.served.device_ops(), sorted(r.served.device_ops())


def test_qwen3_5_fp32_pool_keeps_fp32_on_the_torch_rungs():
    served = _run("qwen3_5-fp32-pool").served
    assert "sglang-ascend-hybrid: --attention-backend ascend_hybrid runs on SGLang's Ascend stack" in served.log
    assert "Qwen3_5ForConditionalGeneration keeps its SSM state in float32" in served.log
    # the fused chunk op keeps bf16 states on A2/A3, the mega kernel fp16, the recurrent op is bf16-only
    assert _gdn_rungs(served) == _fp32_pool_rungs(), served.rungs()
    assert "cannot use the npu_chunk kernel: it keeps float32 states only on Ascend 950" in served.log
    assert "cannot use the npu_recurrent kernel: the op is bf16-only" in served.log
    assert not {"chunk_gated_delta_rule", "recurrent_gated_delta_rule"} & served.device_ops()
    # Qwen3.5's attention layer: the fused split / norm / rope kernels and the sigmoid output gate the
    # installed release imports (prefill's mrope kernel from 0.5.23, the sigmoid gate from 0.5.21)
    assert qwen3_5_attention_ops() | {"sgl_kernel_npu.fla.layernorm_gated:layer_norm_fwd_npu"} <= served.device_ops()


def qwen3_5_attention_ops() -> set:
    """The sgl_kernel_npu norm / rope / gate entries the installed ``models/qwen3_5.py`` imports."""
    from sglang_ascend_hybrid.tools import pairing

    wanted = ("triton_split_qkv_rmsnorm_mrope", "split_qkvgate_gemma_rmsnorm_rope", "fused_sigmoid_mul")
    found = {imp.what for imp in pairing.scan_sglang(files=["sglang/srt/models/qwen3_5.py"])
             if imp.symbol in wanted}
    assert found, "the installed SGLang's qwen3_5.py imports none of the fused attention kernels"
    return found


@pytest.mark.parametrize("config", ["qwen3_5-bf16-pool", "qwen3_next-bf16-pool"])
def test_bf16_pool_serves_on_the_npu_gdn_ops(config):
    served = _run(config).served
    assert "keeps its SSM state in bfloat16" in served.log
    assert _gdn_rungs(served) == BF16_POOL_RUNGS, served.rungs()
    assert {"chunk_gated_delta_rule", "recurrent_gated_delta_rule"} <= served.device_ops()


@pytest.mark.parametrize("config", ["qwen3_next-bf16-pool", "qwen3_5_moe"])
def test_moe_families_serve_on_the_npu_moe_ops(config):
    served = _run(config).served
    assert MOE_DEVICE_OPS <= served.device_ops(), sorted(served.device_ops())


@pytest.mark.parametrize("config", GRAPH_CONFIGS)
def test_default_flags_replay_decode_graphs(config):
    tier.assert_decode_replayed_graphs(_run(config).served)


def test_qwen3_5_moe_fp32_pool_keeps_fp32_on_the_torch_rungs():
    served = _run("qwen3_5_moe").served
    assert "Qwen3_5MoeForConditionalGeneration keeps its SSM state in float32" in served.log
    assert _gdn_rungs(served) == FP32_POOL_RUNGS, served.rungs()


def test_qwen3_5_fp32_model_serves_on_the_torch_rungs():
    served = _run("qwen3_5-fp32").served
    assert _gdn_rungs(served) == FP32_POOL_RUNGS, served.rungs()


def test_negative_control_an_inverted_decode_layout_verdict_fails_the_comparison():
    """The GDN decode layout probe's verdict swapped in every SGLang process: the emulated device's
    Triton decode entry reads its pool key-first (as sgl-kernel-npu's readable source addresses it), so
    the inverted verdict lets it serve a value-first pool with every state transposed: the tier must
    see it (on an honest verdict that entry is refused and npu_recurrent serves, test above)."""
    r = _run("qwen3_5-bf16-pool", env=INVERT_LAYOUT)
    assert ("gdn_serving_decode", "triton_decode") in r.served.rungs(), r.served.rungs()
    assert "inverted by a negative control" in r.served.log
    assert not r.comparison.decisive_equal, str(r.comparison)
