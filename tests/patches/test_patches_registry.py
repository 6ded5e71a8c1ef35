"""The patch registry: every declared target exists in the installed SGLang, the
document lists them all, and static verification really detects drift."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sglang_ascend_hybrid import patches
from sglang_ascend_hybrid.patches import verification

ROOT = Path(__file__).parents[2]


IN_SGLANG = [p for p in patches.PATCHES if p.kind == "resolution" or p.target.startswith("sglang.")]


@pytest.mark.parametrize("patch", IN_SGLANG, ids=lambda p: p.name)
def test_every_target_exists_in_installed_sglang(patch):
    """On the installed release each patch's targets exist, or the patch is declared
    not needed there and the route the release takes instead exists (or, for a fix the
    release offers no mechanism for, unavailable with the reason)."""
    on_release = patches.release_state(patch)
    if on_release is None:
        assert patches.verify(patch) is None
    else:
        assert on_release[0] in (patches.NOT_NEEDED, patches.UNAVAILABLE), on_release
        assert patch.elsewhere.why in on_release[1]
        if on_release[0] == patches.NOT_NEEDED:  # the release lacks it, or has it off its route
            assert (patches.find_target(patch.target) is None) == patch.elsewhere.target_present
        else:  # unavailable: the upstream failure is there, the mechanism to fix it is not
            assert patches.find_target(patch.target) is None


def test_release_declarations_are_well_formed():
    from sglang_ascend_hybrid.patches.releases import range_bounds

    low, _ = range_bounds()
    for p in patches.PATCHES:
        for entry in (*p.extra_targets, *(p.elsewhere.route if p.elsewhere else ())):
            patches.release_targets((entry,), low)  # raises on a malformed entry
        if p.releases:
            assert p.elsewhere is not None and p.elsewhere.why, p.name
            # newer releases are verified, not assumed: open upwards, or bounded with the route a newer
            # release must take instead (a release without that route fails)
            assert "<" not in p.releases or (p.elsewhere.state == patches.NOT_NEEDED and p.elsewhere.route), \
                f"{p.name}: keep releases open upwards so newer ones are verified"


def test_release_state_decides_by_version_and_verifies_the_other_route():
    ladder = patches.by_name("gdn-prefill-ladder")
    from sglang_ascend_hybrid.patches.releases import range_bounds

    low, high = range_bounds()
    assert patches.release_state(ladder, high) is None  # newer releases: verified, never assumed
    fake = patches.Patch(name="x", target="sglang.x.y", kind="hook", hook="m:f", why="", how="", removal="",
                         releases=">=9.0", elsewhere=patches.Elsewhere(
                             state=patches.NOT_NEEDED, why="other route",
                             route=("sglang.srt.layers.attention.attention_registry.attn_backend_wrapper",)))
    assert patches.release_state(fake, "1.0") == (patches.NOT_NEEDED, "SGLang 1.0: other route")
    assert patches.release_state(fake, "9.1") is None
    gone = patches.Patch(name="x", target="sglang.x.y", kind="hook", hook="m:f", why="", how="", removal="",
                         releases=">=9.0", elsewhere=patches.Elsewhere(
                             state=patches.NOT_NEEDED, why="other route",
                             route=("sglang.srt.layers.attention.attention_registry.no_such_route",)))
    state, reason = patches.release_state(gone, "1.0")
    assert state == "failed" and "no_such_route" in reason
    undeclared = patches.Patch(name="x", target="sglang.x.y", kind="hook", hook="m:f", why="", how="",
                               removal="", releases=">=9.0")
    assert patches.release_state(undeclared, "1.0")[0] == "failed"


def test_release_conditional_extra_targets():
    entries = ("a.b", patches.Target("c.d", ">=0.5.22"), patches.Target("e.f", "<0.5.22"))
    assert patches.release_targets(entries, "0.5.22") == ("a.b", "c.d")
    assert patches.release_targets(entries, "0.5.21") == ("a.b", "e.f")
    # a development or post build of a release counts as that release; an unknown version matches all
    assert patches.release_targets(entries, "0.5.22.dev0") == ("a.b", "c.d")
    assert patches.release_targets(entries, "0.5.21.post1") == ("a.b", "e.f")
    with pytest.raises(ValueError, match="version specifier"):
        patches.Target("a.b", "torch>=2")
    with pytest.raises(ValueError, match="version specifier"):
        patches.Patch(name="x", target="a.b", kind="hook", hook="m:f", why="", how="", removal="",
                      releases="sglang>=0.5.22")
    with pytest.raises(ValueError, match="Target"):  # the old ' ; sglang<specifier>' string form
        patches.release_targets(("a.b ; sglang>=0.5.22",), "0.5.22")


@pytest.mark.parametrize("version, spec, expected", [
    ("0.5.23", ">=0.5.20,<0.5.24", True), ("0.5.24", ">=0.5.20,<0.5.24", False),
    ("0.5.23.post1", "<0.5.24", True), ("0.5.23.post1", "<=0.5.23", True), ("0.5.23.post1", "==0.5.23", True),
    ("0.5.23.post1", ">0.5.23", False), ("0.5.24.dev0", ">=0.5.24", True), ("0.5.24.dev0", "<0.5.24", False),
    ("0.5.24rc1", ">=0.5.24", True), ("0.5.23+local", "==0.5.23", True), ("0.5", "==0.5.0", True),
    ("0.5.21", "", True), (None, ">=9.0", True), ("0.5.21", ">=9.0", False),
])
def test_version_matching_reads_the_release_segment(version, spec, expected):
    """What ``matches`` keeps from the hand-written comparison packaging replaced: a version is compared
    by its release segment (pre-, post-, dev- and local parts dropped, zero-padded), so a development
    build of a release is that release; "" and an unknown version (SGLang not installed) match."""
    assert patches.matches(spec, version) is expected


def test_targets_outside_sglang_are_gated_on_their_package():
    """sgl-kernel-npu is not on PyPI (built from source on Ascend machines), so its targets
    cannot be checked here; they must declare the package so they are skipped, not failed."""
    outside = [p for p in patches.PATCHES if p not in IN_SGLANG]
    assert outside, "expected the sgl-kernel-npu entry"
    for p in outside:
        package = p.target.split(".")[0]
        assert package in p.requires
        assert patches.missing_requirements(p) == [package]


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
    drifted_helper = patches.Patch(name="x", target="handle_npu_backends", kind="resolution", hook="m:f", why="",
                                   how="", removal="",
                                   extra_targets=("sglang.srt.arg_groups.overrides.no_such_helper",))
    assert "'no_such_helper' not found" in patches.verify(drifted_helper)


def test_patch_document_is_generated_from_registry():
    assert (ROOT / "PATCHES.md").read_text() == patches.render_markdown(), (
        "PATCHES.md is stale: run `python -m sglang_ascend_hybrid.patches > PATCHES.md`")


def test_the_upstream_internals_a_patch_relies_on_are_verified_with_it(monkeypatch):
    """The private symbols the plugin core applies a patch through (HookRegistry._hooks / _patched for
    hooks of each runtime, resolution_hooks._HOOKS for resolution hooks) are checked like targets:
    one gone upstream makes verify() name it."""
    hook = next(p for p in patches.PATCHES if p.kind == "hook" and p.runtime == "srt" and not p.releases)
    mm = next(p for p in patches.PATCHES if p.kind == "hook" and p.runtime == "multimodal")
    res = next(p for p in patches.PATCHES if p.kind == "resolution")
    assert patches.internals(hook) == ("sglang.srt.plugins.hook_registry.HookRegistry._hooks",
                                       "sglang.srt.plugins.hook_registry.HookRegistry._patched")
    assert all(t.startswith("sglang.multimodal_gen.") for t in patches.internals(mm))
    assert patches.internals(res) == ("sglang.srt.arg_groups.resolution_hooks._HOOKS",)
    assert patches.internals(patches.by_name("backend-choices")) == ()
    for patch in (hook, res):
        gone = patches.internals(patch)[-1]
        real = patches.find_target
        # verification looks targets up through its own module's name
        monkeypatch.setattr(verification, "find_target",
                            lambda t, gone=gone, real=real: f"{t!r} not found" if t == gone else real(t))
        verification._internal_missing.cache_clear()  # checked once per process: this test changes the sources
        assert gone in (patches.verify(patch) or ""), patch.name
        monkeypatch.setattr(verification, "find_target", real)
        verification._internal_missing.cache_clear()
        assert patches.verify(patch) is None
    text = (ROOT / "PATCHES.md").read_text()
    assert "`sglang.srt.plugins.hook_registry.HookRegistry._patched`" in text


UPSTREAM_REF = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+#[0-9]+$")


@pytest.mark.parametrize("patch", patches.PATCHES, ids=lambda p: p.name)
def test_every_patch_names_its_upstream_fix_or_says_why_there_is_none(patch):
    """``upstream`` is the issue or pull request that would make the patch unnecessary ("owner/repo#N"),
    or "none: <why>"; PATCHES.md shows it."""
    assert patch.upstream.strip(), patch.name
    assert UPSTREAM_REF.match(patch.upstream) or (
        patch.upstream.startswith("none: ") and patch.upstream[len("none: "):].strip()), patch.upstream
    assert "- **Upstream**: " in (ROOT / "PATCHES.md").read_text()
