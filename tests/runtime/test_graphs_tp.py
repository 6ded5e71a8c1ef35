"""SGLang's NPU graph runner (decode graphs captured and replayed on the emulated device) and tensor
parallelism (SGLang's own TP worker processes over the "hccl" process group, gloo underneath), each
serving LFM2 through the real Engine, against transformers."""

from __future__ import annotations

import re

import pytest

from tests.runtime import tier

# graphs and TP=2 run in the base release (the older releases run the Engine subset of the tier, for CI time)
pytestmark = [pytest.mark.runtime, pytest.mark.base_release_only, pytest.mark.xdist_group("runtime-graphs-tp")]


def test_lfm2_graphs_match_transformers():
    r = tier.run("lfm2", "float32", engine=tier.GRAPHS)
    tier.assert_served_whole(r)
    tier.assert_matches_transformers(r)


def test_lfm2_decode_steps_replay_npu_graphs():
    served = tier.run("lfm2", "float32", engine=tier.GRAPHS).served
    # SGLang's capture log line (0.5.23: "... NPU graph end. bs=[1, 2, 4]"; older: "... CUDA graph end.")
    assert re.search(r"Capture [^\n]*graph end\.", served.log), "no graph capture in the log"
    assert tier.graph_counts(served).get("captures") == 3  # exactly one graph per batch size of tier.GRAPHS
    tier.assert_decode_replayed_graphs(served)
    # graph decode attention is FIA's .out form with the lengths graph.update rebinds
    assert {"torch_npu.npu_fused_infer_attention_score.out",
            "torch_npu._npu_fused_infer_attention_score_get_max_workspace"} <= served.device_ops()
    assert "torch_npu._npu_paged_attention" not in served.device_ops()


TP2 = {"tp_size": 2}


def test_lfm2_tp2_matches_transformers():
    r = tier.run("lfm2", "float32", engine=TP2)
    tier.assert_served_whole(r)
    tier.assert_matches_transformers(r)


def test_lfm2_tp2_runs_two_ranks():
    served = tier.run("lfm2", "float32", engine=TP2).served
    assert "TP0]" in served.log and "TP1]" in served.log
    pids: dict[str, set] = {}
    for r in served.records:
        pids.setdefault(r["name"], set()).add(r["pid"])
    # each rank's process runs the sharded layers: the same ops, recorded by two processes
    for op in ("causal_conv1d_fn", "causal_conv1d_update", "torch_npu._npu_flash_attention_qlens",
               "torch_npu._npu_paged_attention", "torch_npu._npu_reshape_and_cache"):
        assert len(pids.get(op, ())) == 2, (op, pids.get(op))


# the GDN family at TP=2 with decode graphs on and a bf16 SSM pool (the seed deployment's shape without
# speculative decoding): Qwen3.5's (6, 2) GDN heads become (3, 1) per rank
GDN_TP2_GRAPHS = {"tp_size": 2, "mamba_ssm_dtype": "bfloat16", **tier.GRAPHS}


def test_qwen3_5_tp2_with_graphs_matches_transformers():
    r = tier.run("qwen3_5", "bfloat16", engine=GDN_TP2_GRAPHS)
    tier.assert_served_whole(r)
    tier.assert_matches_transformers(r)
    served = r.served
    assert "TP0]" in served.log and "TP1]" in served.log
    assert {("gdn_prefill", "npu_chunk"), ("gdn_serving_decode", "npu_recurrent")} <= served.rungs()
    rung_pids = {r["pid"] for r in served.records if r["kind"] == "rung" and r["name"] == "gdn_serving_decode"}
    assert len(rung_pids) == 2, rung_pids  # both ranks decode on the plugin's ladder
    tier.assert_decode_replayed_graphs(served)
