"""``sglang-ascend-hybrid plan``: output, JSON schema, exit codes, and agreement
with the runtime dispatcher."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from sglang_ascend_hybrid import cli
from sglang_ascend_hybrid.ops import seam
from tests.integration._families import NO_SNAPSHOT_FAMILIES, SHORT_CONV_FAMILIES

CONFIGS = Path(__file__).parents[2] / "examples" / "configs"
# What changes which kernel runs, outside the config: cleared for every test here.
KERNEL_ENV = ("GDN_USE_MEGA_GDN", "GDN_ATTN_BACKEND_TRITON", "SGLANG_MAMBA_SSM_DTYPE",
              "SGLANG_ASCEND_HYBRID_GDN_BACKEND", "SGLANG_ASCEND_HYBRID_GDN_MAX_OVERHEAD")


@pytest.fixture(autouse=True)
def _kernel_env(monkeypatch):
    for name in KERNEL_ENV:
        monkeypatch.delenv(name, raising=False)



def run_plan(capsys, *argv):
    code = cli.main(["plan", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def plan_json(capsys, *argv):
    code, out, err = run_plan(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def plan_rows(capsys, *argv):
    return plan_json(capsys, *argv)["rows"]


def test_qwen36_27b_head_plans_across_tp(capsys):
    # TP=16 is a `cannot run` row (24 attention heads); the (3, 1) layout is the next test's.
    doc = plan_json(capsys, "--config", str(CONFIGS / "qwen3_6-27b"))
    assert doc["schema_version"] == 2 and doc["model"]["model_type"] == "qwen3_5"
    assert doc["model"]["architecture"] == "Qwen3_5ForConditionalGeneration"   # the config's architectures[0]
    by_tp = {r["tp"]: r for r in doc["rows"]}
    assert sorted(by_tp) == [1, 2, 4, 8, 16]
    assert "num_attention_heads (24) is not divisible by tp=16" in by_tp[16]["error"]
    assert by_tp[16]["gdn"]["mega_plan"]["strategy"] == "none"  # (3, 1): 8/3 > 1.5, the next test's layout
    expect_pairs = {1: (48, 16), 2: (24, 8), 4: (12, 4), 8: (6, 2)}
    for tp, (hv, hk) in expect_pairs.items():
        g = by_tp[tp]["gdn"]
        assert by_tp[tp]["short_conv"] is None and by_tp[tp]["error"] is None
        assert (g["value_heads"], g["key_heads"], g["head_dim"]) == (hv, hk, 128)
    for tp in (1, 2, 4):  # in the kernel's set: native, one launch, no overhead
        m = by_tp[tp]["gdn"]["mega_plan"]
        assert m == {"strategy": "native", "launches": [list(expect_pairs[tp])], "overhead": 1.0}
    m8 = by_tp[8]["gdn"]["mega_plan"]  # (6, 2): pad each key group 3 -> 4 value heads: (8, 2), 8/6 work
    assert m8["strategy"] == "pad" and m8["launches"] == [[8, 2]]
    assert m8["overhead"] == pytest.approx(8 / 6)


def test_a_layout_without_a_head_plan_has_none(tmp_path, capsys):
    """(3, 1): the cheapest fit (8, 1) costs 8/3 > 1.5: no plan, and the mega rung says why."""
    cfg = json.loads((CONFIGS / "qwen3_6-27b" / "config.json").read_text())
    cfg["text_config"]["num_attention_heads"] = 32
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    g = plan_rows(capsys, "--config", str(tmp_path), "--tp", "16", "--mamba-ssm-dtype", "float16")[0]["gdn"]
    assert (g["value_heads"], g["key_heads"]) == (3, 1)
    assert g["mega_plan"] == {"strategy": "none", "launches": [], "overhead": None}
    mega = next(r for r in g["prefill"]["rungs"] if r["rung"] == "mega")
    assert not mega["serves"] and "overhead limit" in mega["reason"]
    assert g["prefill"]["kernel"] == "triton"


def test_text_output_names_the_head_plan_and_attention(capsys):
    code, out, _ = run_plan(capsys, "--config", str(CONFIGS / "qwen3_6-27b" / "config.json"), "--tp", "8")
    assert code == 0
    mega_line = next(line for line in out.splitlines() if line.strip().startswith("mega "))
    assert "head plan pad, launches [[8, 2]], overhead 1.33" in mega_line
    assert "full attention: 16 layers, 3 query heads per rank" in out


def test_one_query_head_per_rank_is_singular(capsys):
    code, out, _ = run_plan(capsys, "--config", str(CONFIGS / "qwen3-next-80b-a3b"), "--tp", "16")
    assert code == 0 and "12 layers, 1 query head per rank (" in out


def test_kernel_heads_option_changes_the_accepted_set(capsys):
    rows = plan_rows(capsys, "--config", str(CONFIGS / "qwen3_6-27b"), "--tp", "8", "--kernel-heads", "6,12")
    assert rows[0]["gdn"]["mega_plan"]["strategy"] == "native" and rows[0]["gdn"]["mega_plan"]["launches"] == [[6, 2]]
    doc = plan_json(capsys, "--config", str(CONFIGS / "qwen3_6-27b"), "--tp", "1", "--kernel-heads", "16",
                    "--mamba-ssm-dtype", "float16")
    assert doc["assumptions"]["kernel_heads"] == [16]
    g = doc["rows"][0]["gdn"]
    # (48, 16) with only 16-value-head launches: four launches of 4 key groups, each group padded
    # from 3 to 4 value heads (64/48 of the work); with an fp16 state the mega rung runs it.
    assert g["mega_plan"]["strategy"] == "split+pad" and g["mega_plan"]["launches"] == [[16, 4]] * 4
    assert g["mega_plan"]["overhead"] == pytest.approx(64 / 48)
    assert g["prefill"]["kernel"] == "mega"


@pytest.mark.parametrize("name", SHORT_CONV_FAMILIES)
def test_short_conv_models(capsys, name):
    rows = plan_rows(capsys, "--config", str(CONFIGS / name), "--tp", "1", "2")
    for r in rows:
        assert r["gdn"] is None
        sc = r["short_conv"]
        assert sc["width"] >= 2 and sc["channels"] > 0 and sc["kernel"]
        # prefix caching needs snapshots: the plugin writes LFM2 / LFM2-MoE / ZAYA1's, nobody LFM2-VL's yet
        # (the family table's radix_snapshots)
        assert any("disable_radix_cache" in a for a in r["launch_adjustments"]) == (name in NO_SNAPSHOTS)
    assert rows[0]["short_conv"]["channels"] == 2 * rows[1]["short_conv"]["channels"]
    pc = plan_json(capsys, "--config", str(CONFIGS / name), "--tp", "1")["model"]["prefix_cache"]
    if name in NO_SNAPSHOTS:
        assert pc == {"on": False, "strategy": None, "snapshots": None}
    else:
        assert pc == {"on": True, "strategy": "extra_buffer", "snapshots": "plugin"}


NO_SNAPSHOTS = NO_SNAPSHOT_FAMILIES


def test_example_lists_come_from_the_examples_and_the_family_table():
    # every short-conv example is planned; the LFM2-VL ones (LFM2-VL-1.6B, LFM2.5-VL-1.6B) lose prefix caching
    assert {"lfm2-1.2b", "lfm2-8b-a1b", "lfm2-vl-1.6b", "lfm2_5-vl-1.6b", "zaya1-base"} <= set(SHORT_CONV_FAMILIES)
    assert set(NO_SNAPSHOTS) == {"lfm2-vl-1.6b", "lfm2_5-vl-1.6b"}


def test_lfm2_conv_kernel_is_the_npu_one_within_limits(capsys):
    rows = plan_rows(capsys, "--config", str(CONFIGS / "lfm2-1.2b"), "--tp", "1")
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
    from sglang_ascend_hybrid.emulators.gdn_mega import make_mega_emulator
    from sglang_ascend_hybrid.ops.gdn import chunk_gated_delta_rule
    from sglang_ascend_hybrid.ops.gdn.contract import OP_MEGA

    rows = plan_rows(capsys, "--config", str(CONFIGS / "qwen3_6-27b"), "--tp", "1", "4", "8")
    mega = make_mega_emulator()
    for row in rows:
        g = dict(row["gdn"], launches=row["gdn"]["mega_plan"]["launches"])
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

    from sglang_ascend_hybrid.tools import plan as plan_cli

    cfg = Path(__file__).resolve().parents[2] / "examples" / "configs" / "qwen3_6-27b"
    args = SimpleNamespace(config=str(cfg), tp=[8], json=False, kernel_heads=None, mamba_ssm_dtype=None)
    assert plan_cli.main(args) == 0
    out = capsys.readouterr().out
    assert "SSM state float32 (from the model config's mamba_ssm_dtype): prefill runs on triton" in out
    assert "verify (MTP) the plugin's torch verify path" in out
    args.mamba_ssm_dtype = "bfloat16"
    assert plan_cli.main(args) == 0
    out = capsys.readouterr().out
    assert "SSM state bfloat16 (from --mamba-ssm-dtype): prefill runs on npu_chunk" in out
    assert "verify (MTP) torch.ops.npu.recurrent_gated_delta_rule" in out
    doc = plan_cli.plan(plan_cli.mf.load_config(cfg), (8,), None, "bfloat16")
    assert doc["rows"][0]["gdn"]["state_dtype"] == "bfloat16"
    assert doc["rows"][0]["gdn"]["prefill"]["op"] == "torch.ops.npu.chunk_gated_delta_rule"
