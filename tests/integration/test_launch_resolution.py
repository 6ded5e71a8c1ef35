"""Launch readiness: every supported family gets through SGLang's real startup
resolution for ``--device npu`` with default flags.

All resolutions run through ``launch_check.resolve_isolated``: one fresh Python
process per batch (resolution touches process-global state), the whole module's
requests in a single batch so SGLang's import cost is paid once.
"""

from __future__ import annotations

import json
import re

import pytest

from sglang_ascend_hybrid.integration.launch import extra_buffer, registration, resolution
from sglang_ascend_hybrid.integration.launch.decision import LaunchConfigError
from sglang_ascend_hybrid.integration.launch.planned import planned_adjustments
from sglang_ascend_hybrid.testing import launch_check
from sglang_ascend_hybrid.testing.launch_check import resolve_isolated

from ._families import EXAMPLE_CONFIGS, FAMILIES, NO_SNAPSHOT_FAMILIES, SHORT_CONV_FAMILIES, config_dir

# The lead adds "ascend_hybrid" here once the backend name is registered.
ATTENTION_BACKENDS = ("ascend", "ascend_hybrid")
TP_SIZES = (1, 2)

INFO_PREFIX = "sglang-ascend-hybrid: disabled the radix cache for "
PREFIX_ON = "sglang-ascend-hybrid: prefix caching on for "
# Families whose prefix-cache snapshots nobody writes on NPU yet: the radix cache goes off.
NO_PREFIX_CACHE = NO_SNAPSHOT_FAMILIES

# name -> (family, extra flags, substrings the error must contain)
CONTRADICTIONS = {
    "lfm2-no_buffer": (
        "lfm2-1.2b",
        ["--mamba-radix-cache-strategy", "no_buffer"],
        ["--mamba-radix-cache-strategy no_buffer", "page size 128", "extra_buffer keeps prefix caching", "Fix:"],
    ),
    "lfm2vl-no_buffer-page128": (
        "lfm2-vl-1.6b",
        ["--mamba-radix-cache-strategy", "no_buffer", "--page-size", "128"],
        ["--mamba-radix-cache-strategy no_buffer", "--page-size 128", "--disable-radix-cache", "Fix:"],
    ),
    "lfm2-page1": (
        "lfm2-1.2b",
        ["--page-size", "1"],
        ["--page-size 1", "multiple of 16", "Fix:"],
    ),
    "lfm2vl-extra_buffer": (
        "lfm2-vl-1.6b",
        ["--mamba-radix-cache-strategy", "extra_buffer"],
        ["--mamba-radix-cache-strategy extra_buffer", "Lfm2VlForConditionalGeneration", "--disable-radix-cache",
         "Fix:"],
    ),
    "lfm2vl-hicache": (
        "lfm2-vl-1.6b",
        ["--enable-hierarchical-cache"],
        ["--enable-hierarchical-cache", "Fix:"],
    ),
    "qwen35-no_buffer": (
        "qwen3_5-27b",
        ["--mamba-radix-cache-strategy", "no_buffer"],
        ["--mamba-radix-cache-strategy no_buffer", "page size 128", "Fix:"],
    ),
}

# name -> (family, extra flags, expected resolved values)
COMPATIBLE = {
    "lfm2-page128": ("lfm2-1.2b", ["--page-size", "128"],
                     {"page_size": 128, "disable_radix_cache": False, "mamba_radix_cache_strategy": "extra_buffer"}),
    "lfm2-page64": ("lfm2-8b-a1b", ["--page-size", "64"],
                    {"page_size": 64, "disable_radix_cache": False, "mamba_radix_cache_strategy": "extra_buffer"}),
    "lfm2vl-page64": ("lfm2-vl-1.6b", ["--page-size", "64"], {"page_size": 64, "disable_radix_cache": True}),
    "lfm2-noradix": ("lfm2-1.2b", ["--disable-radix-cache"], {"page_size": 128, "disable_radix_cache": True}),
    "zaya-chunked": (
        "zaya1-base",
        ["--chunked-prefill-size", "4096"],
        {"chunked_prefill_size": 4096, "disable_radix_cache": False, "mamba_radix_cache_strategy": "extra_buffer"},
    ),
    "qwen35-extra_buffer": (
        "qwen3_5-27b",
        ["--mamba-radix-cache-strategy", "extra_buffer", "--page-size", "128"],
        {"page_size": 128, "mamba_radix_cache_strategy": "extra_buffer", "disable_radix_cache": False},
    ),
    "qwen35-extra_buffer_lazy": (
        "qwen3_5-27b",
        ["--mamba-radix-cache-strategy", "extra_buffer_lazy"],
        {"page_size": 128, "mamba_radix_cache_strategy": "extra_buffer_lazy", "disable_radix_cache": False},
    ),
    "qwen-next-noradix": (
        "qwen3-next-80b-a3b",
        ["--disable-radix-cache"],
        {"page_size": 128, "disable_radix_cache": True},
    ),
}
# Explicit flags with which the plugin has nothing left to decide: no adjustment, no log line.
NO_ADJUSTMENT = {"lfm2-noradix", "qwen35-extra_buffer", "qwen35-extra_buffer_lazy", "qwen-next-noradix",
                 "lfm2-page128", "lfm2-page64", "zaya-chunked"}

# Upstream alone (hooks hidden): the assertion this plugin removes.
UPSTREAM_FAILS = ("lfm2-1.2b", "lfm2-8b-a1b", "zaya1-base")


def _requests() -> dict[tuple, dict]:
    reqs: dict[tuple, dict] = {}
    for family in FAMILIES:
        for tp in TP_SIZES:
            for backend in ATTENTION_BACKENDS:
                reqs[("default", family, tp, backend)] = dict(
                    model_path=config_dir(family), tp_size=tp, attention_backend=backend,
                    load_plugins=backend == "ascend_hybrid",
                )
    for name, (family, extra, _) in {**CONTRADICTIONS, **COMPATIBLE}.items():
        reqs[("explicit", name)] = dict(model_path=config_dir(family), tp_size=2, extra_args=extra)
    for family in (*UPSTREAM_FAILS, "lfm2-vl-1.6b"):
        reqs[("upstream", family)] = dict(model_path=config_dir(family), tp_size=1, register_hooks=False)
    reqs[("upstream-noradix", "lfm2-1.2b")] = dict(
        model_path=config_dir("lfm2-1.2b"), tp_size=1, register_hooks=False, extra_args=["--disable-radix-cache"]
    )
    return reqs


@pytest.fixture(scope="module")
def results() -> dict[tuple, dict]:
    reqs = _requests()
    out = resolve_isolated(list(reqs.values()))
    assert len(out) == len(reqs)
    return dict(zip(reqs, out))


def _info_lines(res: dict) -> list[str]:
    return [line for line in res["log_lines"] if line.startswith(INFO_PREFIX)]


# ----------------------------------------------------------------- defaults


@pytest.mark.parametrize("backend", ATTENTION_BACKENDS)
@pytest.mark.parametrize("tp", TP_SIZES)
@pytest.mark.parametrize("family", list(FAMILIES))
def test_default_flags_resolve_on_npu(results, family, tp, backend):
    res = results[("default", family, tp, backend)]
    assert res["ok"], f"{family} tp={tp}: {res['error_type']}: {res['error']}"
    r = res["resolved"]
    assert r["device"] == "npu"
    assert r["tp_size"] == tp
    assert r["attention_backend"] == "ascend"
    assert r["prefill_attention_backend"] == "ascend"
    assert r["decode_attention_backend"] == "ascend"
    assert r["page_size"] == 128  # the Ascend paged-attention block size is kept
    assert res["hybrid_requested"] is (backend == "ascend_hybrid")
    arch = FAMILIES[family]
    lines = _info_lines(res)
    if family in NO_PREFIX_CACHE:
        assert r["disable_radix_cache"] is True
        assert r["uses_mamba_radix_cache"] is False
        assert len(lines) == 1, res["log_lines"]
        assert lines[0].startswith(INFO_PREFIX + arch + " on NPU (page_size=128 kept)")
        assert len(res["adjustments"]) == 1
        assert res["adjustments"][0].startswith("disable_radix_cache=True")
    else:
        # GDN families keep prefix caching through SGLang's own extra_buffer choice, LFM2 /
        # LFM2-MoE through it too once the plugin lets them (their snapshots are the plugin's);
        # it needs the NPU platform to be detected (the emulation is real).
        assert r["disable_radix_cache"] is False
        assert r["mamba_radix_cache_strategy"] == "extra_buffer"
        assert r["uses_mamba_radix_cache"] is True
        assert lines == []
        assert res["adjustments"] == []
        on = [line for line in res["log_lines"] if line.startswith(PREFIX_ON)]
        writer = "short-conv sidecar" if family in SHORT_CONV_FAMILIES else "SGLang's GDN backend"
        assert len(on) == 1 and on[0].startswith(PREFIX_ON + arch + " on NPU: radix cache with the mamba "
                                                 "extra_buffer strategy, page_size=128") and writer in on[0], on


# ------------------------------------------------------ without the plugin


@pytest.mark.parametrize("family", UPSTREAM_FAILS)
def test_upstream_alone_hits_the_no_buffer_assertion(results, family):
    res = results[("upstream", family)]
    assert not res["ok"]
    assert res["error_type"] == "AssertionError"
    assert "no_buffer only supports page_size=1." in res["error"]
    assert res["adjustments"] == [] and _info_lines(res) == []


def test_upstream_alone_resolves_with_radix_cache_disabled(results):
    res = results[("upstream-noradix", "lfm2-1.2b")]
    assert res["ok"], res["error"]
    assert res["resolved"]["page_size"] == 128


def test_upstream_alone_leaves_lfm2_vl_with_a_paged_mamba_radix_cache(results):
    """LFM2-VL is not routed through the mamba radix-cache resolution, so upstream
    resolves it with radix cache on and page_size 128; the scheduler's
    MambaComponent then rejects that combination at startup."""
    res = results[("upstream", "lfm2-vl-1.6b")]
    assert res["ok"], res["error"]
    assert res["resolved"]["disable_radix_cache"] is False
    assert res["resolved"]["page_size"] == 128
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("sglang")
    mamba_component = Path(spec.origin).parent / "srt/mem_cache/unified_cache/components/mamba.py"
    assert "requires page_size=1 when mamba_extra_buffer is disabled" in mamba_component.read_text()


# --------------------------------------------------------- explicit flags


@pytest.mark.parametrize("name", list(CONTRADICTIONS))
def test_contradictory_explicit_flags_fail_with_one_message(results, name):
    family, extra, needles = CONTRADICTIONS[name]
    res = results[("explicit", name)]
    assert not res["ok"]
    assert res["error_type"] == "LaunchConfigError"
    msg = res["error"]
    assert msg.startswith("sglang-ascend-hybrid: ")
    assert "\n" not in msg
    assert "no_buffer only supports page_size=1" not in msg
    for needle in needles:
        assert needle in msg, (needle, msg)


@pytest.mark.parametrize("name", list(COMPATIBLE))
def test_compatible_explicit_flags_are_kept(results, name):
    family, extra, expected = COMPATIBLE[name]
    res = results[("explicit", name)]
    assert res["ok"], f"{res['error_type']}: {res['error']}"
    for key, value in expected.items():
        assert res["resolved"][key] == value, (key, res["resolved"])
    assert res["resolved"]["attention_backend"] == "ascend"
    if name in NO_ADJUSTMENT:
        assert res["adjustments"] == [] and _info_lines(res) == []
    else:
        assert len(_info_lines(res)) == 1


# -------------------------------------------------------- the pure planner


@pytest.mark.parametrize("tp", TP_SIZES)
@pytest.mark.parametrize("family", list(FAMILIES))
def test_planned_adjustments_match_resolution(results, family, tp):
    res = results[("default", family, tp, ATTENTION_BACKENDS[0])]
    assert planned_adjustments(config_dir(family), tp) == res["adjustments"]
    with open(config_dir(family) / "config.json") as fh:
        assert planned_adjustments(json.load(fh), tp) == res["adjustments"]


def test_planned_adjustments_raise_resolutions_message(results):
    res = results[("explicit", "lfm2-no_buffer")]
    with pytest.raises(LaunchConfigError) as info:
        planned_adjustments(config_dir("lfm2-1.2b"), 2, mamba_radix_cache_strategy="no_buffer")
    assert str(info.value) == res["error"]
    with pytest.raises(LaunchConfigError, match="--page-size 1"):
        planned_adjustments(config_dir("zaya1-base"), 1, page_size=1)


def test_planned_adjustments_respect_explicit_values():
    assert planned_adjustments(config_dir("lfm2-1.2b"), 1, disable_radix_cache=True) == []
    assert planned_adjustments(config_dir("lfm2-1.2b"), 1, page_size=64) == []  # extra_buffer, page 64
    assert planned_adjustments(config_dir("lfm2-vl-1.6b"), 1, page_size=64)[0].startswith(
        "disable_radix_cache=True (page_size=64 kept)"
    )
    assert planned_adjustments({"architectures": ["LlamaForCausalLM"]}, 1) == []
    assert planned_adjustments(config_dir("lfm2-1.2b"), 1, device="cuda") == []
    # A GDN model loses extra_buffer without the triton linear-attention backend.
    adj = planned_adjustments(config_dir("qwen3_5-27b"), 1, linear_attn_backend="flashinfer")
    assert len(adj) == 1 and "linear-attn-backend flashinfer" in adj[0]
    with pytest.raises(ValueError):
        planned_adjustments(config_dir("lfm2-1.2b"), 0)


# ------------------------------------------------------------ registration


def test_register_launch_hooks_is_idempotent_and_suspendable():
    from sglang.srt.arg_groups import resolution_hooks

    step = "handle_model_specific_adjustments"  # the step the launch hook wraps
    assert step in resolution_hooks._OVERRIDABLE_HOOKS
    chain = resolution_hooks._HOOKS.setdefault(step, [])
    before = list(chain)
    try:
        assert launch_check.register_launch_hooks() == [step]
        assert launch_check.register_launch_hooks() == [step]
        assert chain.count(resolution.launch_defaults_hook) == 1
        with launch_check.launch_hooks_suspended():
            assert resolution.launch_defaults_hook not in chain
        assert chain.count(resolution.launch_defaults_hook) == 1
    finally:
        chain[:] = before
    from sglang_ascend_hybrid import patches

    # the patch registry's startup check of the hook's entry finds every upstream symbol it relies on
    assert patches.verify(patches.by_name(registration.LAUNCH_PATCH)) is None


# ------------------------------------------------------------ example configs


def test_example_configs_are_documented():
    readme = (EXAMPLE_CONFIGS / "README.md").read_text()
    dirs = sorted(p.parent.name for p in EXAMPLE_CONFIGS.glob("*/config.json"))
    assert dirs == sorted(FAMILIES)
    for family, arch in FAMILIES.items():
        cfg = json.loads((config_dir(family) / "config.json").read_text())
        assert cfg["architectures"] == [arch]
        assert re.search(rf"`{re.escape(family)}/`", readme), family


# ------------------------------------------------------------ the emulation


def test_npu_emulation_is_scoped():
    """The harness's NPU emulation reaches every detection path and is undone on exit."""
    import os
    import sys

    import sglang.srt.platforms as platforms
    import sglang.srt.utils.common as common
    from sglang.srt.runtime_context import get_platform

    from sglang_ascend_hybrid.testing.launch_check import emulated_npu_platform

    had_torch_npu = "torch_npu" in sys.modules
    env_before = os.environ.get("SGLANG_ZBAL_LOCAL_MEM_SIZE")
    assert get_platform().is_npu is False
    with emulated_npu_platform(npu_memory_mb=32768):
        import sglang.srt.arg_groups.mamba_hook as mamba_hook

        assert get_platform().is_npu is True
        assert get_platform().is_cuda is False
        assert common.is_npu() is True
        assert platforms.current_platform.device_name == "npu"
        if hasattr(mamba_hook, "current_platform"):  # releases with the platform helper bind it
            assert mamba_hook.current_platform.device_name == "npu"
        # The platform half of SGLang's extra_buffer check, through the release's own code.
        assert extra_buffer.platform_supports_extra_buffer() is True
        assert os.environ["SGLANG_ZBAL_LOCAL_MEM_SIZE"] == "32768"
        import torch_npu  # noqa: F401  (a temporary empty module when none is installed)
    assert get_platform().is_npu is False
    assert common.is_npu() is False
    assert platforms.current_platform.device_name != "npu"
    assert getattr(mamba_hook, "current_platform", platforms.current_platform) is platforms.current_platform
    assert extra_buffer.platform_supports_extra_buffer() is False
    assert os.environ.get("SGLANG_ZBAL_LOCAL_MEM_SIZE") == env_before
    assert ("torch_npu" in sys.modules) == had_torch_npu


def test_emulation_passes_only_the_platform_facts_this_release_knows():
    """Releases differ in their platform-fact table and reject unknown facts."""
    from sglang.srt import runtime_context

    from sglang_ascend_hybrid.testing.launch_check.emulation import _PLATFORM_FACTS_NPU, platform_facts_npu

    known = set(runtime_context._PLATFORM_PROBES) | set(runtime_context._PLATFORM_VALUES)
    facts = platform_facts_npu()
    assert set(facts) == known & set(_PLATFORM_FACTS_NPU)
    assert facts["is_npu"] is True
    assert not any(v for k, v in facts.items() if k != "is_npu")
    with runtime_context.override_platform(**facts):  # accepted by this release
        assert runtime_context.get_platform().is_npu is True


def test_extra_buffer_checks_adapt_to_each_release_signature(monkeypatch):
    """supports_mamba_cache_extra_buffer takes (view, model_arch) before 0.5.21 and
    (view, hf_config) since; the platform check is a helper from 0.5.22 on and inline
    get_platform() facts before.  The hook calls whichever the release has."""
    import types

    from sglang.srt.arg_groups import mamba_hook, overrides
    from sglang.srt.runtime_context import override_platform

    seen = []

    def by_arch(view, model_arch):
        seen.append(model_arch)
        return model_arch == "Qwen3NextForCausalLM"

    def by_config(view, hf_config):
        seen.append(hf_config)
        return False

    cfg = types.SimpleNamespace(architectures=["Qwen3NextForCausalLM"])
    monkeypatch.setattr(overrides, "supports_mamba_cache_extra_buffer", by_arch)
    assert extra_buffer.arch_supports_extra_buffer(object(), cfg) is True
    monkeypatch.setattr(overrides, "supports_mamba_cache_extra_buffer", by_config)
    assert extra_buffer.arch_supports_extra_buffer(object(), cfg) is False
    assert seen == ["Qwen3NextForCausalLM", cfg]

    monkeypatch.delattr(mamba_hook, "_platform_supports_mamba_cache_extra_buffer", raising=False)
    with override_platform(is_npu=True, is_cuda=False, is_hip=False, is_xpu=False, is_musa=False):
        assert extra_buffer.platform_supports_extra_buffer() is True
    with override_platform(is_npu=False, is_cuda=False, is_hip=False, is_xpu=False, is_musa=False):
        assert extra_buffer.platform_supports_extra_buffer() is False


def test_launch_hooks_take_the_registration_path(monkeypatch):
    """register_launch_hooks puts the registry's patch in place through apply.install, the path
    plugin registration takes for every patch (no second list of hooks)."""
    from sglang_ascend_hybrid import patches
    from sglang_ascend_hybrid.patches import apply

    seen = []
    monkeypatch.setattr(apply, "install", lambda patch: seen.append(patch.name) or "applied")
    patch = patches.by_name(registration.LAUNCH_PATCH)
    assert launch_check.register_launch_hooks() == [patch.target]
    assert seen == [patch.name] and patch.kind == "resolution"
    assert registration.launch_hooks() == ((patch.target, resolution.launch_defaults_hook),)
