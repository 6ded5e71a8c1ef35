"""``plan``'s GDN decode entry: the decode ladder's rules for the per-rank signature, and the runtime
ladder itself (its predicates, on the CPU emulators of the recurrent op and of the Triton decode kernel
as its readable source addresses the pool) choosing the same rung."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from sglang_ascend_hybrid import cli
from sglang_ascend_hybrid.emulators import gdn_decode as decode_emu
from sglang_ascend_hybrid.emulators import gdn_npu_recurrent
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.gdn import decode
from sglang_ascend_hybrid.ops.gdn.contract import OP_NPU_RECURRENT
from sglang_ascend_hybrid.ops.gdn.decode import contract as decode_contract
from sglang_ascend_hybrid.tools import kernel_report

CONFIGS = Path(__file__).parents[2] / "examples" / "configs"


@pytest.fixture(autouse=True)
def _no_kernel_settings(monkeypatch):
    for name in ("SGLANG_ASCEND_HYBRID_GDN_BACKEND", "SGLANG_MAMBA_SSM_DTYPE"):
        monkeypatch.delenv(name, raising=False)


def _decode(capsys, *argv) -> tuple[dict, str]:
    assert cli.main(["plan", "--config", str(CONFIGS / "qwen3_6-27b"), "--tp", "8", "--json", *argv]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert cli.main(["plan", "--config", str(CONFIGS / "qwen3_6-27b"), "--tp", "8", *argv]) == 0
    return doc["rows"][0]["gdn"]["decode"], capsys.readouterr().out


@pytest.mark.parametrize("pool, kernel", [("bfloat16", "npu_recurrent"), ("float32", "torch")])
def test_decode_rows_are_the_decode_ladders_rungs(capsys, pool, kernel):
    d, text = _decode(capsys, "--mamba-ssm-dtype", pool)
    assert [r["rung"] for r in d["rungs"]] == list(decode.DECODE.names)
    assert d["kernel"] == kernel and d["error"] is None and d["forced"] is None
    assert f"decode runs on {kernel} ({d['op']})" in text
    rungs = {r["rung"]: r for r in d["rungs"]}
    entry = decode_contract.installed_decode_entry()
    assert d["decode_entry"] == entry
    if entry is not None:  # only the probe at startup can say whether the Triton kernel runs
        assert rungs["triton_decode"]["serves"] and rungs["triton_decode"]["decided_by_probe"]
        assert "probe of its state layout" in text
    assert rungs["npu_recurrent"]["serves"] == (pool == "bfloat16")
    if pool != "bfloat16":
        assert "bf16-only" in rungs["npu_recurrent"]["reason"]


def test_a_forced_decode_rung_that_cannot_serve_is_the_plans_error(capsys, monkeypatch):
    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_GDN_BACKEND", "npu_recurrent")
    d, text = _decode(capsys, "--mamba-ssm-dtype", "float32")
    assert d["kernel"] is None and d["forced"] == "npu_recurrent"
    assert "ForcedRungUnavailable" in d["error"] and "decode fails" in text


@pytest.mark.parametrize("pool", [torch.bfloat16, torch.float32])
def test_the_runtime_decode_ladder_takes_the_plans_kernel(capsys, pool):
    """The ladder's own predicates on the emulated device (the Triton decode kernel key first, as its
    readable source is: its probe keeps the rung off) choose the rung ``plan`` names."""
    d, _ = _decode(capsys, "--mamba-ssm-dtype", str(pool).replace("torch.", ""))
    entry = decode_contract.installed_decode_entry()
    ops = {OP_NPU_RECURRENT: gdn_npu_recurrent.make_npu_recurrent_emulator()}
    if entry is not None:
        ops.update(decode_emu.emulators(entry, layout="key_first"))
    with seam.install_emulators(ops):
        chosen = kernel_report.gdn_decode_rung(6, 2, 128, torch.bfloat16, pool, device="cpu")
    assert chosen == d["kernel"]
