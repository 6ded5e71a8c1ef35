"""Model families and the SGLang files they need (sglang_ascend_hybrid.tools.pairing.families)."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from sglang_ascend_hybrid.tools import pairing


@pytest.mark.parametrize("model_type, kind", [
    ("qwen3_next", "gdn"), ("qwen3_5", "gdn"), ("qwen3_5_moe", "gdn"), ("lfm2", "short_conv"),
    ("lfm2_vl", "short_conv"), ("zaya", "short_conv"), ("llama", None), (None, None),
])
def test_model_family(model_type, kind):
    assert pairing.model_family(NS(hf_config=NS(model_type=model_type))) == kind
    assert pairing.model_family(NS(hf_config=NS(model_type="x"), hf_text_config=NS(model_type=model_type))) == kind


def test_family_table_names_the_backends_each_family_builds():
    npu = "sglang/srt/hardware_backend/npu/attention/"
    assert pairing.FAMILY_FILES["short_conv"] == (npu + "ascend_hybrid_linear_attn_backend.py",
                                                  npu + "ascend_backend.py")
    assert set(pairing.FAMILY_FILES["short_conv"]) < set(pairing.FAMILY_FILES["gdn"])
    assert {pairing.GDN_TRITON, npu + "ascend_gdn_backend.py"} < set(pairing.FAMILY_FILES["gdn"])
    assert pairing.families_needing(pairing.GDN_TRITON) == ("gdn",)
    assert pairing.families_needing(npu + "ascend_backend.py") == ("gdn", "short_conv")
    assert pairing.families_needing("sglang/srt/models/llama.py") == ()
