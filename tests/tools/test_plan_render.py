"""``plan``'s text rendered in-process (the CLI tests run it as a subprocess): the layer line names the
linear layers' kind, the probe-decided rungs say which probe decides them, and the short-conv verify
line names the kernel's build caveat."""

from __future__ import annotations

import io
import json
from pathlib import Path

from sglang_ascend_hybrid import model_families as mf
from sglang_ascend_hybrid.tools import plan

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "configs"


def _rendered(name: str) -> str:
    cfg = json.loads((EXAMPLES / name / "config.json").read_text(encoding="utf-8"))
    out = io.StringIO()
    plan.render(plan.plan(cfg, (1,)), out)
    return out.getvalue()


def test_the_layer_line_names_the_linear_layers_kind():
    for name, kind in (("qwen3_6-27b", "GDN"), ("lfm2-1.2b", "short-conv")):
        facts = mf.facts(json.loads((EXAMPLES / name / "config.json").read_text(encoding="utf-8")))
        assert f"full-attention, {facts.linear_layers} {kind} (from {facts.layer_kinds_from})" in _rendered(name)


def test_probe_decided_rungs_name_their_probe():
    chunk = {"rung": "npu_chunk", "serves": True, "reason": "", "decided_by_probe": True}
    assert plan._rung_line(chunk).rstrip().endswith(
        "yes the probe of its chunk-state stride at startup confirms it (else the next rung)")
    decode = dict(chunk, rung="triton_decode")
    assert "only where the probe of its state layout at startup finds it value-first" in plan._rung_line(decode)


def test_the_short_conv_verify_line_names_the_ascend_950_caveat():
    facts = mf.facts(json.loads((EXAMPLES / "lfm2-1.2b" / "config.json").read_text(encoding="utf-8")))
    lay = mf.ShortConvLayout(facts.short_conv.kind, 4, facts.short_conv.channels)
    assert plan.short_conv_verify_kernel(lay, "bfloat16") == \
        "npu (torch.ops.npu.causal_conv1d speculative mode; torch on Ascend 950 builds)"
