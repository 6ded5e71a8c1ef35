"""``plan``'s GDN verify-gates entry: the batch sizes whose verify step SGLang's without-sigmoid gating
kernel cannot tile, from the ``gdn_verify_gates`` ladder's rule, checked against the emulated kernel and the
runtime ladder's choice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from sglang_ascend_hybrid import cli
from sglang_ascend_hybrid.emulators import gdn_gating as emu
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.gdn import verify_gates
from sglang_ascend_hybrid.ops.gdn.contract import OP_GATING
from sglang_ascend_hybrid.tools import plan

CONFIGS = Path(__file__).parents[2] / "examples" / "configs"


def _gates(capsys, *argv, tp="8") -> tuple[dict, str]:
    assert cli.main(["plan", "--config", str(CONFIGS / "qwen3_6-27b"), "--tp", tp, "--json", *argv]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert cli.main(["plan", "--config", str(CONFIGS / "qwen3_6-27b"), "--tp", tp, *argv]) == 0
    return doc["rows"][0]["gdn"]["verify_gates"], capsys.readouterr().out


def _kernel_tiles(tokens: int, heads: int) -> bool:
    w = torch.zeros(heads)
    try:
        emu.fused_gdn_gating_kernel_without_sigmoid(w, torch.zeros(tokens, heads), torch.zeros(tokens, heads), w)
        return True
    except ValueError:
        return False


@pytest.mark.parametrize("draft, tp, heads", [(None, "8", 6), ("2", "8", 6), ("4", "1", 48), ("16", "4", 12)])
def test_the_untiled_batches_are_where_the_emulated_kernel_raises(capsys, draft, tp, heads):
    v, text = _gates(capsys, *(("--speculative-num-draft-tokens", draft) if draft else ()), tp=tp)
    d = int(draft or 4)
    assert v["draft_tokens"] == d and v["max_batch"] == plan.VERIFY_GATES_MAX_BATCH and v["kernel"] == "without_sigmoid"
    listed = {b for first, last in v["untiled_batches"] for b in range(first, last + 1)}
    assert listed == {b for b in range(1, v["max_batch"] + 1) if not _kernel_tiles(b * d, heads)}
    assert all(a[1] + 1 < b[0] for a, b in zip(v["untiled_batches"], v["untiled_batches"][1:]))  # merged ranges
    assert v["untiled_served_by"] == "npu_gating"
    shown = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in v["untiled_batches"])
    assert (f"verify gates ({d} draft tokens): sgl-kernel-npu's without-sigmoid gating kernel cannot tile batches "
            f"{shown} (of 1-{v['max_batch']}); those steps run on npu_gating") in text


def test_qwen36_at_tp8_with_four_draft_tokens(capsys):
    """The failure as an operator meets it: 25-36 and 49-84 requests (97-144 and 193-336 tokens)."""
    v, _ = _gates(capsys)
    assert v["untiled_batches"][:2] == [[25, 36], [49, 84]]


def test_the_runtime_ladder_takes_the_planned_rung_for_each_batch():
    heads, draft = 6, 4
    untiled = {b for first, last in verify_gates.untiled_batches(heads, draft, 64) for b in range(first, last + 1)}
    gen = torch.Generator().manual_seed(0)
    with seam.install_emulators({OP_GATING: emu.fused_gdn_gating_npu}):
        for batch in range(1, 65):
            a = torch.randn(batch * draft, heads, generator=gen)
            call = verify_gates.VerifyGatesCall(torch.zeros(heads), a, a, torch.zeros(heads),
                                                kernel=emu.fused_gdn_gating_kernel_without_sigmoid)
            first = verify_gates.VERIFY_GATES.first(call.signature(), call)
            assert verify_gates.VERIFY_GATES.names[first] == ("npu_gating" if batch in untiled else "without_sigmoid")


def test_no_untiled_batch_in_range_says_so(capsys, monkeypatch):
    monkeypatch.setattr(plan, "VERIFY_GATES_MAX_BATCH", 8)   # 6 heads x 4 drafts: up to 32 tokens tile
    v, text = _gates(capsys)
    assert v["untiled_batches"] == [] and v["untiled_served_by"] is None and v["max_batch"] == 8
    assert ("verify gates (4 draft tokens): sgl-kernel-npu's without-sigmoid gating kernel tiles every batch "
            "up to 8") in text


@pytest.mark.parametrize("value", ["0", "-3"])
def test_a_bad_draft_token_count_is_refused(capsys, value):
    assert cli.main(["plan", "--config", str(CONFIGS / "qwen3_6-27b"), "--speculative-num-draft-tokens", value]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (f"sglang-ascend-hybrid plan: error: --speculative-num-draft-tokens {int(value)}: "
                           "expected a positive integer")
