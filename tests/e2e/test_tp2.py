"""Whole models at tensor parallelism 2 over a real gloo process group (:mod:`tests.e2e.tp`):
SGLang's distributed init, its parallel layers and weight loaders, the plugin's backends on each
rank's shard; rank 0's logits against transformers' class at TP=1 with the same weights (in
float64: the gap is the TP=2 run's fp32 rounding alone).

Plan: a chunked prefill of request A, one EXTEND batch of A's continuation with B and C, then 4
DECODE steps of all three (:data:`tests.e2e.tp.PLAN`), fp32."""

from __future__ import annotations

from tests.e2e import tp


def _problems(results) -> list:
    """Why a TP=2 run does not serve the model transformers computes (empty: it does)."""
    r0, r1 = results
    cmp = r0.comparison
    problems = []
    if not (cmp.tokens_equal and cmp.max_gap < tp.TP_LOGIT_TOL):
        problems.append(f"rank 0 against transformers (tolerance {tp.TP_LOGIT_TOL:g}): {cmp}")
    if r1.logits != r0.logits:
        problems.append("the ranks' all-gathered logits differ")
    if [(r.facts["tp_world"], r.facts["tp_rank_in_group"]) for r in results] != [(tp.TP, 0), (tp.TP, 1)]:
        problems.append(f"not one TP group of {tp.TP}: {[r.facts for r in results]}")
    return problems


def _config(name: str) -> dict:
    return tp.FAMILIES[name].config()


def test_lfm2_tp2_matches_transformers_with_its_conv_channels_split():
    results = tp.run_tp("lfm2")
    assert not _problems(results), _problems(results)
    channels = _config("lfm2")["hidden_size"] // tp.TP
    assert channels == 32
    for r in results:
        kernel = _config("lfm2")["conv_L_cache"]
        assert r.facts["conv_weight"] == {(channels, kernel)}, r.facts   # the layers' shard
        assert {shape[-1] for shape in r.facts["conv_pool"]} == {channels}, r.facts  # window-major pool
        # the plugin's conv ops were handed this rank's channels (x's and the weight's)
        assert r.shapes == {"conv_prefill": {(channels, channels)}, "conv_decode": {(channels, channels)}}, r.shapes


def test_qwen3_5_tp2_matches_transformers_with_6_value_2_key_heads_per_rank():
    results = tp.run_tp("qwen3_5")
    assert not _problems(results), _problems(results)
    cfg = _config("qwen3_5")
    assert (cfg["linear_num_value_heads"], cfg["linear_num_key_heads"]) == (12, 4)   # global
    hv, hk, d = cfg["linear_num_value_heads"] // tp.TP, cfg["linear_num_key_heads"] // tp.TP, cfg["linear_key_head_dim"]
    assert (hv, hk) == (6, 2)
    for r in results:
        assert r.facts["gdn_layer"] == {(hk, hv, tp.TP)}, r.facts                    # the layers' heads
        assert r.facts["temporal_pool"][2:] == (hv, d, d), r.facts                   # the SSM pool's
        # the plugin's prefill hook and serving decode were handed this rank's heads
        assert r.shapes == {"gdn_prefill": {(hk, hv)}, "gdn_decode": {(hk, d, hv, d)}}, r.shapes


def test_negative_control_a_skipped_all_reduce_fails_the_tp2_comparison():
    """The short-conv mixers' row-parallel out_proj keeps each rank's partial sum (its all-reduce
    skipped): the same check must fail, on the comparison with transformers, by far."""
    results = tp.run_tp("lfm2", "skip_conv_out_reduce")
    problems = _problems(results)
    assert problems and problems[0].startswith("rank 0 against transformers"), problems
    assert results[0].comparison.max_gap > 1e4 * tp.TP_LOGIT_TOL, str(results[0].comparison)
