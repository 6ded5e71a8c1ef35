"""The pairing check at NPU startup (sglang_ascend_hybrid.tools.pairing.enforce): the stop under
ascend_hybrid and the WARNING under ascend, from the attn_backend_wrapper hook."""

from __future__ import annotations

import logging
import re
from types import SimpleNamespace as NS

import pytest

from sglang_ascend_hybrid.integration import short_conv
from sglang_ascend_hybrid.patches import mode
from sglang_ascend_hybrid.tools import pairing
from sglang_ascend_hybrid.tools.pairing import report
from tests.support.fresh_state import fresh_patch_state
from tests.tools.pairing.helpers import decode_kernel_import, expected_missing_module, family_imports, write_kernel_tree


@pytest.fixture
def not_strict(monkeypatch):
    fresh_patch_state(monkeypatch)  # ascend_hybrid not asked for (nor SGLANG_ASCEND_HYBRID_STRICT set)


@pytest.fixture
def strict(not_strict):
    mode.record_request()  # --attention-backend ascend_hybrid
    yield


def gdn_runner():
    from sglang.srt.configs.qwen3_next import Qwen3NextConfig

    cfg = Qwen3NextConfig()
    return NS(model_config=NS(hf_config=cfg, hf_text_config=cfg, is_draft_model=False))


@pytest.fixture
def on_npu(monkeypatch):
    """NPU detection on where the hook reads it; the deferred patches recorded, not applied."""
    # parallel_state caches is_npu() when first imported: import it before the patch, so that a TP test
    # later in this process does not find it set up for an NPU
    import sglang.srt.distributed.parallel_state  # noqa: F401
    import sglang.srt.utils as sglang_utils

    from sglang_ascend_hybrid.patches import apply

    monkeypatch.setattr(sglang_utils, "is_npu", lambda: True)
    applied = []
    monkeypatch.setattr(apply, "apply_deferred", lambda: applied.append(True))
    return applied


@pytest.fixture
def gdn_build_without_decode_kernel(tmp_path, kernel_path):
    imp = decode_kernel_import()
    kernel_path(write_kernel_tree(tmp_path, family_imports("gdn"), drop_modules={imp.module}))
    return expected_missing_module(imp, imp.symbol)


def test_ascend_hybrid_stops_a_gdn_model_before_sglang_imports(on_npu, strict, gdn_build_without_decode_kernel):
    def original(*a, **k):
        raise AssertionError("SGLang's wrapper must not run")

    with pytest.raises(pairing.KernelPairingError) as err:
        short_conv.attn_backend_wrapper_around(original, gdn_runner(), object())
    lines = str(err.value).splitlines()
    assert "--attention-backend ascend_hybrid stops startup" in lines[0] and "gdn models" in lines[0]
    assert lines[1:] == [gdn_build_without_decode_kernel]
    assert on_npu == []  # stopped before the deferred patches


def test_plain_ascend_warns_once_per_missing_import(on_npu, not_strict, gdn_build_without_decode_kernel, caplog):
    seen = []

    def original(runner, full, *a, **k):
        seen.append(full)
        return "upstream"

    with caplog.at_level(logging.WARNING, logger=pairing.logger.name):
        for _ in range(2):
            assert short_conv.attn_backend_wrapper_around(original, gdn_runner(), "full") == "upstream"
    warnings = [r.getMessage() for r in caplog.records if r.name == pairing.logger.name]
    assert warnings == [gdn_build_without_decode_kernel]
    assert all(r.levelno == logging.WARNING for r in caplog.records if r.name == pairing.logger.name)
    assert seen == ["full", "full"] and on_npu == [True, True]


def test_short_conv_needs_only_its_files(not_strict, strict, tmp_path, kernel_path):
    imports = family_imports("short_conv")
    hybrid_linear = next(i for i in imports if i.file == pairing.ASCEND_HYBRID_LINEAR_BACKEND)
    lfm2 = NS(hf_config=NS(model_type="lfm2"))
    kernel_path(write_kernel_tree(tmp_path / "a", family_imports("short_conv")))  # no GDN kernels at all
    pairing.enforce_for_model(lfm2)
    kernel_path(write_kernel_tree(tmp_path / "b", imports, drop_modules={hybrid_linear.module}))
    with pytest.raises(pairing.KernelPairingError, match=re.escape(f"{hybrid_linear.file}:{hybrid_linear.line} ")):
        pairing.enforce_for_model(lfm2)
    pairing.enforce_for_model(NS(hf_config=NS(model_type="llama")))  # not a family served here


def test_not_installed_stops_strict_startup_with_one_line(on_npu, strict, tmp_path, kernel_path):
    kernel_path(tmp_path)
    with pytest.raises(pairing.KernelPairingError) as err:
        short_conv.attn_backend_wrapper_around(None, gdn_runner(), object())
    assert str(err.value).splitlines()[1:] == [pairing.not_installed_message(family_imports("gdn"))]


def test_a_check_that_cannot_run_is_one_warning_not_a_failed_launch(strict, monkeypatch, caplog):
    monkeypatch.setattr(report, "check", lambda *a, **k: (_ for _ in ()).throw(PermissionError("denied")))
    with caplog.at_level(logging.WARNING, logger=pairing.logger.name):
        pairing.enforce_for_model(NS(hf_config=NS(model_type="qwen3_next")))
        pairing.enforce_for_model(NS(hf_config=NS(model_type="lfm2")))
    assert [r.getMessage() for r in caplog.records if r.name == pairing.logger.name] == [
        "sglang-ascend-hybrid: the sgl-kernel-npu pairing check could not run (PermissionError: denied); "
        "continuing without it"]


def test_off_npu_nothing_is_checked(monkeypatch, strict):
    import sglang.srt.utils as sglang_utils

    monkeypatch.setattr(sglang_utils, "is_npu", lambda: False)
    monkeypatch.setattr(report, "check", lambda *a, **k: pytest.fail("checked off NPU"))
    assert short_conv.attn_backend_wrapper_around(lambda r, f: "cuda path", gdn_runner(), object()) == "cuda path"
