"""The GDN kernel contract tables (``ops/gdn/contract.py``, with their sgl-kernel-npu sources): the
version tables, the strictest head set, the recurrent op's vStep rule.  The emulators' rules are
pinned in ``tests/emulators/test_gdn_*.py``; the capability predicates against the same emulators in
tests/ops/gdn/test_gdn_ladder_variants.py."""

from __future__ import annotations

import logging

import pytest
import torch

from sglang_ascend_hybrid.ops.gdn import contract as caps

# ----------------------------------------------------------------------------- chunk op


# ----------------------------------------------------------------------------- mega kernel


# The version tables (mega head sets, the Triton entry's mega mode): a known old, the newest known, an unknown
# newer (SGLang's CI pairs 0.5.23 with these) and an unparseable version; no version (no metadata) stays current.
VERSIONS = [
    ("2026.05.01", caps.MEGA_POST3, "supported", False),   # known old (tags 2026.05.01 .. .post3)
    ("2026.5.1", caps.MEGA_POST3, "supported", False),     # the same, as the metadata normalises it
    ("2026.6.0", caps.MEGA_CURRENT, "default", False),
    ("2026.6.1", caps.MEGA_CURRENT, "opt_in", False),      # the newest known (tags 2026.6.1 .. 2026.08.21)
    ("2026.9.0.post4", caps.MEGA_STRICT, "unknown", True),  # unknown newer
    ("2026.9.0.post5", caps.MEGA_STRICT, "unknown", True),
    ("2026.6.2", caps.MEGA_STRICT, "unknown", True),        # no config.ini ever said it
    ("2026.6.1+local", caps.MEGA_STRICT, "unknown", True),  # a local build
    ("not a version", caps.MEGA_STRICT, "unknown", True),   # unparseable
    ("", caps.MEGA_STRICT, "unknown", True),
    (None, caps.MEGA_CURRENT, "opt_in", False),
]


@pytest.mark.parametrize("version,variant,mode,assumed", VERSIONS, ids=[repr(v[0]) for v in VERSIONS])
def test_version_tables_take_the_strictest_contract_for_unknown_versions(version, variant, mode, assumed, caplog):
    from sglang_ascend_hybrid.ops import seam

    with seam.install_device_facts(sgl_kernel_npu_version=version), caplog.at_level(logging.INFO):
        for _ in range(3):
            assert caps.mega_variant() is variant
            assert caps.triton_mega_mode(mega_present=True) == mode
    lines = [r.getMessage() for r in caplog.records if "not a version the GDN contracts know" in r.getMessage()]
    assert len(lines) == (2 if assumed else 0)  # once per table, whatever the number of calls
    if assumed:
        assert any("strictest known set" in x for x in lines) and any("mode 'unknown'" in x for x in lines)
        assert all(r.levelno == logging.WARNING for r in caplog.records if "GDN contracts know" in r.getMessage())


def test_the_strictest_head_set_is_what_every_known_variant_accepts():
    pairs = {(hv, hk) for hv in range(1, 65) for hk in range(1, 65)
             if all(v.supports(hv, hk) for v in caps.MEGA_VARIANTS)}
    assert caps.MEGA_STRICT.pairs == pairs == caps.MEGA_POST3.pairs
    assert not caps.MEGA_STRICT.supports(8, 2) and caps.MEGA_CURRENT.supports(8, 2)  # newest-only pairs: not assumed


def test_an_unknown_version_is_taken_to_run_the_mega_kernel_whatever_the_settings():
    """Mode "unknown": every call is taken to go through the mega kernel, so the Triton rung only serves
    what both of the entry's paths compute rightly (no 64-token chunk states, 16-bit states, head dim 128)."""
    from sglang_ascend_hybrid.ops import seam
    from sglang_ascend_hybrid.ops.gdn import prefill, signature

    for env in ({}, {caps.TRITON_BACKEND_ENV: "1"}, {caps.TRITON_MEGA_ENV: "0"}):
        assert caps.triton_runs_mega("unknown", env, 32, 16, 128, 128)
    sig = signature.GdnSignature(32, 16, 128, 128, torch.bfloat16, chunk_states=True, state_dtype=torch.bfloat16)
    with seam.install_device_facts(sgl_kernel_npu_version="2026.9.0.post4"):
        assert prefill.triton_runs_mega(sig, environ={}, mega_present=True)
        assert "64-token chunk states" in prefill.triton_reason(sig, True, True)
    with seam.install_device_facts(sgl_kernel_npu_version="2026.6.1"):
        assert not prefill.triton_runs_mega(sig, environ={}, mega_present=True)


def test_recurrent_vstep_rule():
    assert caps.recurrent_vstep(16, 128, 128) >= 8  # Qwen3.5/3.6 heads fit
    assert caps.recurrent_vstep(64, 2048, 2048) < 8  # too big for 192 KiB of UB
    assert caps.recurrent_refusal_reason(16, 8, 128, 128, 9, [torch.bfloat16]) is not None  # S > 8
    assert caps.recurrent_refusal_reason(16, 8, 128, 128, 4, [torch.float32]) is not None   # not bf16
    assert caps.recurrent_refusal_reason(16, 8, 128, 128, 4, [torch.bfloat16]) is None


@pytest.mark.parametrize("shape,vstep", [((16, 128, 128), 112), ((64, 128, 128), 104), ((48, 128, 128), 112),
                                         ((64, 256, 256), 48), ((8, 64, 64), 232)])
def test_recurrent_vstep_values_from_the_host_formula(shape, vstep):
    """vStep of sgl-kernel-npu's recurrent host (f425bdf1), worked by hand for a 192 KiB UB."""
    assert caps.recurrent_vstep(*shape) == vstep


def test_a_signature_says_its_state_dtype_only_when_a_state_is_given():
    from sglang_ascend_hybrid.ops.gdn.signature import GdnSignature

    bare = GdnSignature(4, 2, 128, 128, torch.bfloat16)
    assert str(bare) == "(NumValueHeads, NumKeyHeads)=(4, 2) K=128 V=128 bfloat16"
    stated = GdnSignature(4, 2, 128, 64, torch.bfloat16, chunk_states=True, state_dtype=torch.float32)
    assert str(stated) == "(NumValueHeads, NumKeyHeads)=(4, 2) K=128 V=64 bfloat16 state=float32 +chunk_states"
