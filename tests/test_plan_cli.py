"""``sglang-ascend-hybrid plan``: output, JSON schema, exit codes, and agreement
with the runtime dispatcher."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from sglang_ascend_hybrid import cli
from sglang_ascend_hybrid.ops import seam

CONFIGS = Path(__file__).parent.parent / "examples" / "configs"


def run_plan(capsys, *argv):
    code = cli.main(["plan", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def plan_json(capsys, *argv):
    code, out, err = run_plan(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def test_qwen36_27b_strategies_across_tp(capsys):
    rows = plan_json(capsys, "--config", str(CONFIGS / "qwen3_6-27b"))
    by_tp = {r["tp"]: r for r in rows}
    assert sorted(by_tp) == [1, 2, 4, 8, 16]
    for r in rows:
        assert r["model_type"] == "qwen3_5" and r["short_conv"] is None
        assert set(r["gdn"]) >= {"value_heads", "key_heads", "head_dim", "strategy", "launches", "overhead"}
    expect_pairs = {1: (48, 16), 2: (24, 8), 4: (12, 4), 8: (6, 2), 16: (3, 1)}
    for tp, (hv, hk) in expect_pairs.items():
        assert (by_tp[tp]["gdn"]["value_heads"], by_tp[tp]["gdn"]["key_heads"]) == (hv, hk)
        assert by_tp[tp]["gdn"]["head_dim"] == 128
    for tp in (1, 2, 4):  # in the kernel's set: native, one launch, no overhead
        g = by_tp[tp]["gdn"]
        assert g["strategy"] == "native" and g["launches"] == [[g["value_heads"], g["key_heads"]]]
        assert g["overhead"] == 1.0
    g8 = by_tp[8]["gdn"]  # (6, 2): pad each key group 3 -> 4 value heads: (8, 2), 8/6 work
    assert g8["strategy"] == "pad" and g8["launches"] == [[8, 2]]
    assert g8["overhead"] == pytest.approx(8 / 6)
    g16 = by_tp[16]["gdn"]  # (3, 1): cheapest fit (8, 1) costs 8/3 > 1.5 -> fall back
    assert g16["strategy"].startswith("fallback:") and g16["launches"] == [] and not g16["fast_kernel"]
    assert g16["overhead"] == 1.0 and isinstance(g16["overhead"], float)  # the fallback pads nothing
    for r in rows:
        assert isinstance(r["gdn"]["overhead"], float)


def test_text_output_names_strategy_launches_and_attention(capsys):
    code, out, _ = run_plan(capsys, "--config", str(CONFIGS / "qwen3_6-27b" / "config.json"), "--tp", "8")
    assert code == 0
    assert "TP=8" in out and "pad" in out and "[[8, 2]]" in out and "overhead 1.33" in out
    assert "full attention" in out


def test_kernel_heads_option_changes_the_accepted_set(capsys):
    rows = plan_json(capsys, "--config", str(CONFIGS / "qwen3_6-27b"), "--tp", "8", "--kernel-heads", "6,12")
    assert rows[0]["gdn"]["strategy"] == "native" and rows[0]["gdn"]["launches"] == [[6, 2]]
    rows = plan_json(capsys, "--config", str(CONFIGS / "qwen3_6-27b"), "--tp", "1", "--kernel-heads", "16")
    g = rows[0]["gdn"]
    # (48, 16) with only 16-value-head launches: four launches of 4 key groups, each group padded
    # from 3 to 4 value heads (64/48 of the work) -- the mega kernel, not a fallback row.
    assert g["fast_kernel"] and g["fallback"] is None
    assert g["strategy"] == "split+pad" and g["launches"] == [[16, 4]] * 4
    assert g["overhead"] == pytest.approx(64 / 48)


@pytest.mark.parametrize("name", ["lfm2-1.2b", "lfm2-8b-a1b", "lfm2-vl-1.6b", "zaya1-base"])
def test_short_conv_models(capsys, name):
    rows = plan_json(capsys, "--config", str(CONFIGS / name), "--tp", "1", "2")
    for r in rows:
        assert r["gdn"] is None
        sc = r["short_conv"]
        assert sc["width"] >= 2 and sc["channels"] > 0 and sc["kernel"]
        assert any("disable_radix_cache" in a for a in r["launch_adjustments"])
    assert rows[0]["short_conv"]["channels"] == 2 * rows[1]["short_conv"]["channels"]


def test_lfm2_conv_kernel_is_the_npu_one_within_limits(capsys):
    rows = plan_json(capsys, "--config", str(CONFIGS / "lfm2-1.2b"), "--tp", "1")
    sc = rows[0]["short_conv"]
    assert sc["kind"] == "lfm2_short_conv" and sc["width"] == 3
    assert sc["kernel"].startswith("npu")


@pytest.mark.parametrize("content,needle", [
    (None, "no config.json"),
    ("{not json", "not valid JSON"),
    ('{"model_type": "llama", "num_attention_heads": 8}', "not a family this plugin serves"),
    ('{"model_type": "qwen3_next", "num_hidden_layers": 4, "num_attention_heads": 16}', "lacks the field"),
    ("[1, 2]", "JSON object"),
])
def test_bad_configs_exit_2_with_one_line(tmp_path, capsys, content, needle):
    if content is not None:
        (tmp_path / "config.json").write_text(content)
    code, out, err = run_plan(capsys, "--config", str(tmp_path))
    assert code == 2
    assert needle in err and len(err.strip().splitlines()) == 1
    assert out == ""


@pytest.mark.parametrize("heads", ["8,x", "0", "-8", "8,4097", "99999999999", ","])
def test_bad_kernel_heads_exit_2(capsys, heads):
    code, out, err = run_plan(capsys, "--config", str(CONFIGS / "qwen3_6-27b"), "--kernel-heads", heads)
    assert code == 2 and f"--kernel-heads {heads!r}: expected" in err
    assert len(err.strip().splitlines()) == 1 and out == ""


def test_plan_matches_what_the_runtime_launches(capsys):
    """The launches `plan` prints are the head pairs the runtime sends to the mega kernel."""
    from sglang_ascend_hybrid.emulators.gdn import make_mega_emulator
    from sglang_ascend_hybrid.ops.gdn import chunk_gated_delta_rule
    from sglang_ascend_hybrid.ops.gdn.dispatch import OP_MEGA

    rows = plan_json(capsys, "--config", str(CONFIGS / "qwen3_6-27b"), "--tp", "1", "4", "8")
    mega = make_mega_emulator()
    for row in rows:
        g = row["gdn"]
        seen = []

        def recording(q, k, v, *args, **kwargs):
            seen.append([v.shape[2], q.shape[2]])
            return mega(q, k, v, *args, **kwargs)

        hv, hk = g["value_heads"], g["key_heads"]
        torch.manual_seed(0)
        T = 24
        q = torch.randn(1, T, hk, 128, dtype=torch.float16)
        k = torch.nn.functional.normalize(torch.randn(1, T, hk, 128), dim=-1).half()
        v = torch.randn(1, T, hv, 128, dtype=torch.float16)
        gate = -torch.rand(1, T, hv) * 0.1
        beta = torch.rand(1, T, hv, dtype=torch.float16)
        cu = torch.tensor([0, 10, 24])
        with seam.install_emulators({OP_MEGA: recording}):
            chunk_gated_delta_rule(q, k, v, gate, beta, cu_seqlens=cu)
        assert seen == g["launches"], (row["tp"], seen, g["launches"])


def test_plan_shows_the_ssm_state_dtype_and_the_kernels_it_means(capsys):
    """Qwen3.6-27B: the config's fp32 state (Triton prefill, torch verify on A2/A3) unless the
    operator plans for --mamba-ssm-dtype bfloat16 (the fused NPU ops)."""
    from pathlib import Path
    from types import SimpleNamespace

    from sglang_ascend_hybrid import plan as plan_cli

    cfg = Path(__file__).resolve().parent.parent / "examples" / "configs" / "qwen3_6-27b"
    args = SimpleNamespace(config=str(cfg), tp=[8], json=False, kernel_heads=None, mamba_ssm_dtype=None)
    assert plan_cli.main(args) == 0
    out = capsys.readouterr().out
    assert "SSM state float32 (from the model config's mamba_ssm_dtype)" in out
    assert "verify (MTP) the plugin's torch verify path" in out and "prefill sgl-kernel-npu's Triton" in out
    args.mamba_ssm_dtype = "bfloat16"
    assert plan_cli.main(args) == 0
    out = capsys.readouterr().out
    assert "SSM state bfloat16 (from --mamba-ssm-dtype)" in out
    assert "verify (MTP) torch.ops.npu.recurrent_gated_delta_rule" in out
    rows = plan_cli.plan(plan_cli.mf.load_config(cfg), (8,), None, "bfloat16")
    assert rows[0]["gdn"]["state_dtype"] == "bfloat16"
    assert rows[0]["gdn"]["prefill_kernels"].startswith("torch.ops.npu.chunk_gated_delta_rule")
