"""What is known of the sgl_kernel_npu modules SGLang imports (sglang_ascend_hybrid.tools.pairing.facts)."""

from __future__ import annotations

from sglang_ascend_hybrid.tools import pairing
from tests.tools.pairing.helpers import DECODE_OPTIMIZED


def test_each_fact_is_keyed_by_its_module_and_cites_sgl_kernel_npu():
    assert pairing.KNOWN and all(module == fact.module for module, fact in pairing.KNOWN.items())
    for fact in pairing.KNOWN.values():
        assert fact.module.startswith(pairing.KERNEL_PACKAGE + ".")
        assert fact.provided_by and fact.source.startswith("sgl-project/sgl-kernel-npu ")
    assert "PR #740" in pairing.KNOWN[DECODE_OPTIMIZED].provided_by
