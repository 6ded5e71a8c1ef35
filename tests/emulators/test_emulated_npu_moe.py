"""The Ascend MoE op emulators (sglang_ascend_hybrid/testing/emulated_npu/kernels_moe.py) checked op by
op and as SGLang composes them (route -> grouped matmul -> swiglu -> grouped matmul -> finalize)
against SGLang's own torch references (fused_topk_torch_native, fused_moe_forward_native), fp32,
tiny sizes; plus the strict refusals of arguments SGLang never passes."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.base_release_only

_MODULE = Path(__file__).resolve().parents[2] / "sglang_ascend_hybrid/testing/emulated_npu/kernels_moe.py"
_spec = importlib.util.spec_from_file_location("emulated_npu_kernels_moe", _MODULE)
moe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(moe)
ops = moe.TORCH_OPS_NPU

TOKENS, HIDDEN, INTER, EXPERTS, TOP_K = 5, 16, 8, 8, 2
ATOL = 1e-5


@pytest.fixture(scope="module")
def sglang_refs():
    from sglang.srt.layers.moe.fused_moe_native import fused_moe_forward_native
    from sglang.srt.layers.moe.topk import fused_topk_torch_native

    return SimpleNamespace(topk=fused_topk_torch_native, moe=fused_moe_forward_native)


def _inputs(seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(TOKENS, HIDDEN, generator=gen)
    logits = torch.randn(TOKENS, EXPERTS, generator=gen)
    bias = torch.randn(EXPERTS, generator=gen) * 0.5
    w13 = torch.randn(EXPERTS, 2 * INTER, HIDDEN, generator=gen) * 0.3
    w2 = torch.randn(EXPERTS, HIDDEN, INTER, generator=gen) * 0.3
    return SimpleNamespace(x=x, logits=logits, bias=bias, w13=w13, w2=w2)


def _by_expert(weights, ids):
    order = ids.long().argsort(dim=-1)
    return weights.gather(1, order), ids.long().gather(1, order)


def _swiglu(h):
    n = h.shape[-1] // 2
    return F.silu(h[..., :n]) * h[..., n:]


def _reference_moe(refs, d, weights, ids):
    layer = SimpleNamespace(
        w13_weight=d.w13, w2_weight=d.w2,
        moe_runner_config=SimpleNamespace(activation="silu", apply_router_weight_on_input=False),
    )
    dispatch = SimpleNamespace(hidden_states=d.x, topk_output=(weights, ids.long(), None))
    return refs.moe(layer, dispatch).hidden_states


def _experts(d, expanded_x, group_list, group_list_type):
    """What AscendRunnerCore.run does for NPUUnquantMoEMethod: gmm(w13^T) -> swiglu -> gmm(w2^T)."""
    kw = dict(split_item=2, group_list_type=group_list_type, group_type=0, group_list=group_list,
              output_dtype=expanded_x.dtype)
    h = ops["npu_grouped_matmul"](x=[expanded_x], weight=[d.w13.transpose(1, 2)], **kw)[0]
    return ops["npu_grouped_matmul"](x=[_swiglu(h)], weight=[d.w2.transpose(1, 2)], **kw)[0]


def test_exports_cover_the_ops_sglang_calls():
    expected = {"npu_moe_gating_top_k_softmax", "npu_moe_gating_top_k", "npu_moe_init_routing",
                "npu_moe_init_routing_v2", "npu_moe_compute_expert_tokens", "npu_grouped_matmul",
                "npu_moe_finalize_routing", "npu_moe_token_unpermute"}
    assert set(ops) == expected and set(moe.TORCH_NPU) == expected
    assert "517f2e7d" in ops["npu_moe_gating_top_k"].__doc__


def test_gating_top_k_softmax_matches_sglang_native(sglang_refs):
    d = _inputs()
    y, ids, row_idx = ops["npu_moe_gating_top_k_softmax"](d.logits, k=TOP_K)
    ref_w, ref_ids = sglang_refs.topk(d.x, d.logits, TOP_K, renormalize=False)
    assert y.dtype == torch.float32 and ids.dtype == torch.int32 and row_idx.dtype == torch.int32
    assert torch.equal(ids.long(), ref_ids.long())
    assert (y - ref_w).abs().max().item() < ATOL
    assert torch.equal(row_idx, torch.arange(TOKENS * TOP_K, dtype=torch.int32).view(TOP_K, TOKENS).T)


@pytest.mark.parametrize("renorm", [True, False])
def test_gating_top_k_sigmoid_bias_matches_sglang_native(sglang_refs, renorm):
    """LFM2-MoE's branch: sigmoid + correction bias. The op renormalises sigmoid weights whatever
    renorm says (its documented reference), so it matches SGLang's renormalize=True either way."""
    d = _inputs(1)
    y, ids, _ = ops["npu_moe_gating_top_k"](
        d.logits, k=TOP_K, bias=d.bias, k_group=1, group_count=1, group_select_mode=0,
        renorm=renorm, norm_type=1, routed_scaling_factor=1, eps=float(1e-20),
    )
    ref_w, ref_ids = sglang_refs.topk(d.x, d.logits, TOP_K, renormalize=True, correction_bias=d.bias,
                                      scoring_func="sigmoid")
    (w_a, id_a), (w_b, id_b) = _by_expert(y, ids), _by_expert(ref_w, ref_ids)
    assert torch.equal(id_a, id_b)
    assert (w_a - w_b).abs().max().item() < ATOL


def test_gating_top_k_groups_keep_only_the_best_groups():
    d = _inputs(2)
    y, ids, _ = ops["npu_moe_gating_top_k"](d.logits, k=TOP_K, k_group=1, group_count=2, group_select_mode=1,
                                            norm_type=1, routed_scaling_factor=2.0)
    scores = d.logits.sigmoid().view(TOKENS, 2, -1)
    best_group = scores.topk(2, dim=-1).values.sum(-1).argmax(-1)
    assert torch.equal(ids.long() // (EXPERTS // 2), best_group[:, None].expand(-1, TOP_K))
    assert (y.sum(-1) - 2.0).abs().max().item() < ATOL


def test_compute_expert_tokens_is_the_cumulative_end():
    sorted_ids = torch.tensor([0, 0, 2, 3, 3, 3], dtype=torch.int32)
    out = ops["npu_moe_compute_expert_tokens"](sorted_ids, 5)
    assert out.dtype == torch.int32 and out.tolist() == [2, 2, 3, 6, 6]


def test_ascend_tp_chain_v2_matches_fused_moe_native(sglang_refs):
    """AscendTPDispatcher (bf16 branch) + NPUUnquantMoEMethod + NPUFinalizeRouting(drop_pad_mode=2)."""
    d = _inputs(3)
    weights, ids, _ = ops["npu_moe_gating_top_k_softmax"](d.logits, k=TOP_K)
    weights = weights / weights.sum(-1, keepdim=True)  # stands in for sgl_kernel_npu's l1_norm
    expanded_x, expanded_row_idx, expert_tokens, _ = ops["npu_moe_init_routing_v2"](
        d.x, ids, active_num=TOKENS * TOP_K, expert_num=EXPERTS, expert_tokens_num_type=1,
        expert_tokens_num_flag=True, active_expert_range=[0, EXPERTS], quant_mode=-1,
    )
    assert expert_tokens.dtype == torch.int64 and expert_tokens.sum().item() == TOKENS * TOP_K
    out = _experts(d, expanded_x, expert_tokens.to(torch.int64), group_list_type=1)
    final = ops["npu_moe_finalize_routing"](
        out, skip1=None, skip2=None, bias=None, scales=weights, expanded_src_to_dst_row=expanded_row_idx,
        export_for_source_row=ids, drop_pad_mode=2,
    )
    ref = _reference_moe(sglang_refs, d, weights, ids)
    assert (final - ref).abs().max().item() < 1e-4
    unpermuted = ops["npu_moe_token_unpermute"](permuted_tokens=out, sorted_indices=expanded_row_idx.abs(),
                                                probs=weights)
    assert (unpermuted - ref).abs().max().item() < 1e-4


def test_v1_chain_matches_fused_moe_native(sglang_refs):
    """NPUMoEInitRouting_v1 / fused_moe_npu: row_idx by column, cumsum group list, drop_pad_mode=0."""
    d = _inputs(4)
    weights, ids = sglang_refs.topk(d.x, d.logits, TOP_K, renormalize=True, correction_bias=d.bias,
                                    scoring_func="sigmoid")
    ids = ids.to(torch.int32)
    row_idx = torch.arange(TOKENS * TOP_K, dtype=torch.int32).view(TOP_K, -1).permute(1, 0).contiguous()
    expanded_x, expanded_row_idx, expanded_expert_idx = ops["npu_moe_init_routing"](
        d.x, row_idx=row_idx, expert_idx=ids, active_num=TOKENS
    )
    expert_tokens = ops["npu_moe_compute_expert_tokens"](expanded_expert_idx, EXPERTS).to(torch.int64)
    out = _experts(d, expanded_x, expert_tokens, group_list_type=0)
    final = ops["npu_moe_finalize_routing"](
        out, skip1=None, skip2=None, bias=None, scales=weights, expanded_src_to_dst_row=expanded_row_idx,
        export_for_source_row=ids,
    )
    ref = _reference_moe(sglang_refs, d, weights, ids)
    assert (final - ref).abs().max().item() < 1e-4


@pytest.mark.parametrize(
    "call",
    [
        lambda d, ids: ops["npu_grouped_matmul"](
            x=[d.x], weight=[d.w13.transpose(1, 2)], split_item=2, group_type=0, group_list_type=1,
            group_list=torch.full((EXPERTS,), 1, dtype=torch.int64), output_dtype=torch.float32),
        lambda d, ids: ops["npu_grouped_matmul"](
            x=[d.x], weight=[d.w13.transpose(1, 2)], split_item=2, group_type=0, group_list_type=1,
            group_list=torch.tensor([TOKENS] + [0] * (EXPERTS - 1)), output_dtype=torch.bfloat16),
        lambda d, ids: ops["npu_moe_init_routing_v2"](
            d.x, ids, active_num=-1, expert_num=EXPERTS, expert_tokens_num_type=1, expert_tokens_num_flag=True,
            active_expert_range=[0, EXPERTS], drop_pad_mode=1),
        lambda d, ids: ops["npu_moe_init_routing_v2"](
            d.x, ids + EXPERTS, expert_num=EXPERTS, expert_tokens_num_type=1, expert_tokens_num_flag=True,
            active_expert_range=[0, EXPERTS]),
        lambda d, ids: ops["npu_moe_gating_top_k"](d.logits, k=TOP_K, out_flag=True),
        lambda d, ids: ops["npu_moe_gating_top_k_softmax"](d.logits, torch.zeros(TOKENS, dtype=torch.bool), k=2),
        lambda d, ids: ops["npu_moe_finalize_routing"](
            torch.zeros(TOKENS * TOP_K, HIDDEN), d.x, None, None, torch.ones(TOKENS, TOP_K),
            torch.arange(TOKENS * TOP_K, dtype=torch.int32), ids, 2),
        lambda d, ids: ops["npu_moe_compute_expert_tokens"](torch.tensor([1, 0], dtype=torch.int32), 4),
    ],
    ids=["gmm-groups-miss-rows", "gmm-output-dtype", "v2-drop-pad", "v2-ids-out-of-range", "gating-out-flag",
         "softmax-finished", "finalize-skip1", "expert-tokens-unsorted"],
)
def test_strict_refusals(call):
    d = _inputs(5)
    ids = torch.zeros(TOKENS, TOP_K, dtype=torch.int32)
    with pytest.raises((ValueError, TypeError)):
        call(d, ids)
