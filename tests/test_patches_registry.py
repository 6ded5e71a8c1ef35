"""The patch registry: every declared target exists in the installed SGLang, the
document lists them all, and static verification really detects drift."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from sglang_ascend_hybrid import patches

ROOT = Path(__file__).parent.parent


@pytest.mark.parametrize("patch", patches.PATCHES, ids=lambda p: p.name)
def test_every_target_exists_in_installed_sglang(patch):
    assert patches.verify(patch) is None


@pytest.mark.parametrize("patch", patches.PATCHES, ids=lambda p: p.name)
def test_every_hook_function_loads(patch):
    assert callable(patch.load_hook())


@pytest.mark.parametrize("patch", patches.PATCHES, ids=lambda p: p.name)
def test_patch_document_lists_every_patch(patch):
    text = (ROOT / "PATCHES.md").read_text()
    assert f"`{patch.name}`" in text
    assert patch.target in text


def test_static_verification_detects_drift():
    assert patches.find_target("sglang.srt.layers.attention.attention_registry.attn_backend_wrapper") is None
    assert patches.find_target(
        "sglang.srt.hardware_backend.npu.attention.ascend_gdn_backend.AscendGDNAttnBackend") is None
    assert "not found" in patches.find_target("sglang.srt.layers.attention.attention_registry.no_such_function")
    assert "not found" in patches.find_target(
        "sglang.srt.hardware_backend.npu.attention.ascend_gdn_backend.AscendGDNAttnBackend.no_such_method")
    assert patches.find_target("sglang.no_such_module.thing") is not None


def test_static_verification_does_not_import_target_module():
    import sys

    name = "sglang.srt.hardware_backend.npu.attention.ascend_gdn_backend"
    was_loaded = name in sys.modules
    assert patches.find_target(name + ".AscendGDNAttnBackend") is None
    assert (name in sys.modules) == was_loaded


def test_resolution_step_verification():
    p = patches.by_name("record-hybrid-request")
    assert patches.verify(p) is None
    bad = patches.Patch(name="x", target="no_such_step", kind="resolution", hook="m:f", why="", how="", removal="")
    assert "not overridable" in patches.verify(bad)


def test_patch_document_is_generated_from_registry():
    assert (ROOT / "PATCHES.md").read_text() == patches.render_markdown(), (
        "PATCHES.md is stale: run `python -m sglang_ascend_hybrid.patches > PATCHES.md`")
