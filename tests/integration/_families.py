"""Example model families used by the launch-resolution tests."""

from __future__ import annotations

from pathlib import Path

EXAMPLE_CONFIGS = Path(__file__).resolve().parents[2] / "examples" / "configs"

# example directory -> architectures[0]
FAMILIES = {
    "qwen3_5-27b": "Qwen3_5ForConditionalGeneration",
    "qwen3_5-35b-a3b": "Qwen3_5MoeForConditionalGeneration",
    "qwen3_6-27b": "Qwen3_5ForConditionalGeneration",
    "qwen3-next-80b-a3b": "Qwen3NextForCausalLM",
    "lfm2-1.2b": "Lfm2ForCausalLM",
    "lfm2-8b-a1b": "Lfm2MoeForCausalLM",
    "lfm2-vl-1.6b": "Lfm2VlForConditionalGeneration",
    "zaya1-base": "ZayaForCausalLM",
}
SHORT_CONV_FAMILIES = ("lfm2-1.2b", "lfm2-8b-a1b", "lfm2-vl-1.6b", "zaya1-base")
GDN_FAMILIES = tuple(f for f in FAMILIES if f not in SHORT_CONV_FAMILIES)



def config_dir(family: str) -> Path:
    return EXAMPLE_CONFIGS / family
