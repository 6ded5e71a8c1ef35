"""``plan``'s GDN prefill kernel: the headline, the rung rows and ``--json`` name the same kernel,
the one the runtime prefill ladder takes for the SSM state dtype in force.

The last test asks the runtime ladder itself (its predicates, on the CPU emulators of every
device kernel of an A3 with the current sgl-kernel-npu) for the same layouts and dtypes and
compares, so ``plan`` cannot keep a second copy of the rules.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from sglang_ascend_hybrid import cli
from sglang_ascend_hybrid import model_families as mf
from sglang_ascend_hybrid.tools import plan as plan_cli

CONFIGS = Path(__file__).parents[2] / "examples" / "configs"
KERNEL_ENV = ("GDN_USE_MEGA_GDN", "GDN_ATTN_BACKEND_TRITON", "SGLANG_MAMBA_SSM_DTYPE",
              "SGLANG_ASCEND_HYBRID_GDN_BACKEND", "SGLANG_ASCEND_HYBRID_GDN_MAX_OVERHEAD")


@pytest.fixture(autouse=True)
def _no_kernel_settings(monkeypatch):
    for name in KERNEL_ENV:
        monkeypatch.delenv(name, raising=False)


def _run(capsys, config, *argv):
    code = cli.main(["plan", "--config", str(CONFIGS / config), *argv])
    out = capsys.readouterr()
    assert code == 0, out.err
    return out.out


def _both(capsys, config, *argv):
    """(rows of --json, text blocks per TP) of one plan."""
    doc = json.loads(_run(capsys, config, *argv, "--json"))
    text = _run(capsys, config, *argv)
    blocks = {}
    for chunk in text.split("\n  TP=")[1:]:
        tp = int(chunk.split()[0])
        blocks[tp] = chunk
    return doc["rows"], blocks


def _rung_rows(block: str) -> dict[str, str]:
    rows = {}
    for line in block.splitlines():
        parts = line.split()
        if parts and parts[0] in ("npu_chunk", "mega", "triton", "torch"):
            rows[parts[0]] = parts[1]
    return rows


@pytest.mark.parametrize("config,tps", [("qwen3_6-27b", ("1", "8")), ("qwen3-next-80b-a3b", ("8",))])
def test_fp32_state_headline_rows_and_json_say_triton(capsys, config, tps):
    """The configs' fp32 state (Qwen3.6: the config's mamba_ssm_dtype; Qwen3-Next: SGLang's default):
    neither the chunk op nor the mega kernel keeps it on an A3, so prefill runs on Triton -- and no
    part of the plan says mega or npu_chunk serves."""
    rows, blocks = _both(capsys, config, "--tp", *tps)
    for r in rows:
        g = r["gdn"]
        assert g["state_dtype"] == "float32"
        assert g["prefill"]["kernel"] == "triton" and g["prefill_with_chunk_states"]["kernel"] == "triton"
        serves = {x["rung"]: x["serves"] for x in g["prefill"]["rungs"]}
        assert serves == {"npu_chunk": False, "mega": False, "triton": True, "torch": True}
        block = blocks[r["tp"]]
        head = block.splitlines()[0]
        assert head.endswith(f"prefill runs on triton ({g['prefill']['op']})"), head
        assert "mega kernel" not in head and "16-bit" not in block
        assert _rung_rows(block) == {"npu_chunk": "no", "mega": "no", "triton": "yes", "torch": "yes"}
        assert "fast_kernel" not in g and "strategy" not in g  # the old keys that said "mega"
        # tracking on Triton: its bf16 chunk states are below the fp32 state, the tracked ones are recomputed
        assert g["prefill_with_chunk_states"]["recomputes_tracked_states"] is True
        assert g["prefill"]["recomputes_tracked_states"] is False
        assert "the tracked ones are recomputed in float32 (one more launch" in block


def test_bf16_state_tracking_on_triton_recomputes_nothing(capsys):
    rows, blocks = _both(capsys, "qwen3_6-27b", "--tp", "1", "--mamba-ssm-dtype", "bfloat16")
    pc = rows[0]["gdn"]["prefill_with_chunk_states"]
    assert pc["recomputes_tracked_states"] is False
    assert "recomputed" not in blocks[1]


def test_qwen3_next_tp8_headline_and_first_rung_agree(capsys):
    """(4, 2) per rank at TP=8: the chunk op's limits hold, and the rows say it is the state that
    keeps it out, the same in the headline and --json."""
    rows, blocks = _both(capsys, "qwen3-next-80b-a3b", "--tp", "8")
    g = rows[0]["gdn"]
    assert (g["value_heads"], g["key_heads"]) == (4, 2)
    npu = g["prefill"]["rungs"][0]
    assert npu["rung"] == "npu_chunk" and not npu["serves"] and "float32 states only on Ascend 950" in npu["reason"]
    line = next(x for x in blocks[8].splitlines() if x.split()[:1] == ["npu_chunk"])
    assert "float32 states only on Ascend 950" in line
    assert "within its limits" not in blocks[8]


def test_bf16_state_runs_on_the_chunk_op(capsys):
    rows, blocks = _both(capsys, "qwen3_6-27b", "--tp", "8", "--mamba-ssm-dtype", "bfloat16")
    g = rows[0]["gdn"]
    assert g["prefill"]["kernel"] == "npu_chunk" and g["prefill"]["op"] == "torch.ops.npu.chunk_gated_delta_rule"
    assert g["prefill_with_chunk_states"]["kernel"] == "npu_chunk"
    assert "prefill runs on npu_chunk (torch.ops.npu.chunk_gated_delta_rule)" in blocks[8].splitlines()[0]


def test_fp16_state_mega_without_chunk_states_triton_with_them(capsys):
    """The mega kernel keeps fp16 states but returns 128-token chunk states: radix-cache tracking
    (64-token chunk states) takes the Triton rung."""
    rows, blocks = _both(capsys, "qwen3_6-27b", "--tp", "8", "--mamba-ssm-dtype", "float16")
    g = rows[0]["gdn"]
    assert g["prefill"]["kernel"] == "mega" and g["prefill_with_chunk_states"]["kernel"] == "triton"
    mega = {x["rung"]: x for x in g["prefill_with_chunk_states"]["rungs"]}["mega"]
    assert not mega["serves"] and "128 tokens" in mega["reason"]
    assert "prefill runs on mega" in blocks[8].splitlines()[0]
    assert "with 64-token chunk states (radix-cache tracking): prefill runs on triton" in blocks[8]


def test_triton_entry_in_mega_mode_leaves_torch_for_fp32(capsys, monkeypatch):
    """GDN_USE_MEGA_GDN=1: sgl-kernel-npu's Triton entry runs the mega kernel (fp16 state) -> torch."""
    monkeypatch.setenv("GDN_USE_MEGA_GDN", "1")
    rows, blocks = _both(capsys, "qwen3_6-27b", "--tp", "8")
    g = rows[0]["gdn"]
    assert g["prefill"]["kernel"] == "torch"
    assert "prefill runs on torch" in blocks[8].splitlines()[0]


def test_triton_backend_request_skips_the_chunk_op_and_mega(capsys, monkeypatch):
    monkeypatch.setenv("GDN_ATTN_BACKEND_TRITON", "1")
    rows, _ = _both(capsys, "qwen3_6-27b", "--tp", "8", "--mamba-ssm-dtype", "bfloat16")
    g = rows[0]["gdn"]
    assert g["prefill"]["kernel"] == "triton"
    assert all("GDN_ATTN_BACKEND_TRITON=1" in x["reason"] for x in g["prefill"]["rungs"][:2])


@pytest.mark.parametrize("forced,kernel", [("torch", "torch"), ("mega", None)])
def test_forced_rung(capsys, monkeypatch, forced, kernel):
    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_GDN_BACKEND", forced)
    rows, blocks = _both(capsys, "qwen3_6-27b", "--tp", "8")
    p = rows[0]["gdn"]["prefill"]
    assert p["forced"] == forced and p["kernel"] == kernel
    if kernel is None:  # mega cannot keep the fp32 state: the forced run fails
        assert "ForcedRungUnavailable" in p["error"] and "prefill fails" in blocks[8].splitlines()[0]


def test_fp16_inputs_keep_the_chunk_op_out(capsys, tmp_path):
    """A config without a dtype runs in float16 (SGLang's --dtype auto): the chunk op takes bf16 only."""
    cfg = json.loads((CONFIGS / "qwen3_6-27b" / "config.json").read_text())
    del cfg["text_config"]["torch_dtype"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    doc = json.loads(_run(capsys, tmp_path, "--tp", "8", "--mamba-ssm-dtype", "bfloat16", "--json"))
    g = doc["rows"][0]["gdn"]
    assert doc["model"]["dtype"] == "float16" and g["dtype"] == "float16"
    npu = g["prefill"]["rungs"][0]
    assert not npu["serves"] and "bfloat16" in npu["reason"]
    assert g["prefill"]["kernel"] == "mega"


@pytest.mark.parametrize("version", ["0.5.19", "0.5.20", "0.5.20.post1", "0.5.21", "0.5.22", "0.5.23",
                                     "0.5.24.dev0", "0.6.0", None])
def test_every_release_sends_gdn_prefill_through_the_ladder(version):
    """The plan's one prefill route: for any SGLang version exactly one of the two ladder patches
    targets it (the release-bounded one on 0.5.20 and older, the chunk_gdn one from 0.5.21 on), so
    the route the plan assumes holds on every release it can be run against."""
    from sglang_ascend_hybrid import patches

    targeting = [name for name in ("gdn-extend-ladder", "gdn-prefill-ladder")
                 if patches.matches(patches.by_name(name).releases, version)]
    assert len(targeting) == (2 if version is None else 1), targeting
    assert plan_cli.PREFILL_ROUTE == "ladder"


# ------------------------------------------------------------------ the runtime ladder agrees

# Qwen3.6-27B at TP 1, 4, 8, 16 and Qwen3-Next at TP 8, 16 (per rank): native, pad, no head plan
LAYOUTS = [(48, 16), (12, 4), (6, 2), (3, 1), (4, 2), (2, 1)]


@pytest.mark.base_release_only  # the plan and the ladder on emulators: no SGLang code on the path
@pytest.mark.parametrize("state", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("chunk_states", [False, True], ids=["plain", "chunk_states"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_plan_names_the_rung_the_runtime_ladder_takes(state, chunk_states, dtype):
    from sglang_ascend_hybrid.emulators import gdn_mega, gdn_npu_chunk, gdn_triton_chunk
    from sglang_ascend_hybrid.ops import seam
    from sglang_ascend_hybrid.ops.gdn import contract as caps
    from sglang_ascend_hybrid.ops.gdn import prefill
    from sglang_ascend_hybrid.ops.gdn.contract import OP_MEGA, OP_NPU_CHUNK, OP_TRITON

    mega = gdn_mega.make_mega_emulator(variant=caps.MEGA_CURRENT)
    ops = {OP_NPU_CHUNK: gdn_npu_chunk.make_npu_chunk_emulator(chip=plan_cli.ASSUMED_CHIP), OP_MEGA: mega,
           OP_TRITON: gdn_triton_chunk.make_triton_chunk_emulator(mega=mega, version="2026.6.1")}
    prefill.forget_refusals()
    with seam.install_device_facts(chip=plan_cli.ASSUMED_CHIP, sgl_kernel_npu_version="2026.6.1"), \
            seam.install_emulators(ops):
        for hv, hk in LAYOUTS:
            lay = mf.GDNLayout(hv, hk, 128, 128)
            planned = plan_cli.prefill_entry(lay, dtype, state, chunk_states)["kernel"]
            T, dt = 8, getattr(torch, dtype)
            call = prefill.ChunkCall(torch.zeros(1, T, hk, 128, dtype=dt), torch.zeros(1, T, hk, 128, dtype=dt),
                                      torch.zeros(1, T, hv, 128, dtype=dt), torch.zeros(1, T, hv),
                                      torch.zeros(1, T, hv, dtype=dt), torch.tensor([0, 3, T]),
                                      torch.zeros(2, hv, 128, 128, dtype=getattr(torch, state)), 128 ** -0.5,
                                      chunk_states,
                                      ((1, 0),) if chunk_states else None)  # the serving hook names the tracked chunks
            taken = prefill.PREFILL.choose(call.signature(), call).name
            assert planned == taken, ((hv, hk), dtype, state, chunk_states, planned, taken)
