"""``plan`` on a config file starts fast: it imports nothing of SGLang or transformers (their import
is most of a second-scale start-up), and the one SGLang fact it needs -- which architectures
support the mamba ``extra_buffer`` strategy -- is read from the installed source, checked here
against the live SGLang function so the static reading cannot drift."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from sglang_ascend_hybrid.integration.launch import decision, extra_buffer, planned, registration
from sglang_ascend_hybrid.model_families import GDN_ARCHS, PLUGIN_SNAPSHOT_ARCHS

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "examples" / "configs"
HEAVY = ("sglang", "transformers", "torch_npu", "sgl_kernel_npu")


def _imported(*argv) -> set[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_ASCEND_HYBRID_")}
    env.update(TORCH_DEVICE_BACKEND_AUTOLOAD="0", HF_HUB_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "sglang_ascend_hybrid.cli", *argv],
                          capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    names = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip())
    assert names, proc.stderr[-2000:]
    return names


@pytest.mark.parametrize("config", ["qwen3_6-27b", "lfm2-vl-1.6b"])
def test_plan_imports_no_sglang_or_transformers(config):
    names = _imported("plan", "--config", str(CONFIGS / config), "--json")
    heavy = sorted(n for n in names if n.split(".")[0] in HEAVY)
    assert heavy == [], heavy[:20]


def test_static_extra_buffer_list_is_the_installed_sglangs():
    pytest.importorskip("sglang")
    from sglang.srt.arg_groups import overrides

    assert extra_buffer.upstream_extra_buffer_archs() == frozenset(overrides._MAMBA_EXTRA_BUFFER_ARCHS)


@pytest.mark.parametrize("arch", sorted(decision.SUPPORTED_ARCHS))
def test_plan_extra_buffer_fact_agrees_with_sglangs_function(arch):
    """What planned_adjustments assumes per architecture (triton linear-attention backend, NPU) is
    what SGLang's supports_mamba_cache_extra_buffer answers on the installed release."""
    pytest.importorskip("sglang")
    view = SimpleNamespace(linear_attn_backend="triton")
    hf_config = SimpleNamespace(architectures=[arch], model_type="", text_config=None)
    live = bool(extra_buffer.arch_supports_extra_buffer(view, hf_config))
    assert live == (arch in extra_buffer.upstream_extra_buffer_archs())
    # and the decision planned from it: the radix cache is disabled unless SGLang or the plugin's
    # gate hook (the architectures whose snapshots the plugin writes) lets extra_buffer serve
    adjusted = bool(planned.planned_adjustments({"architectures": [arch]}))
    assert adjusted == (not (live or arch in PLUGIN_SNAPSHOT_ARCHS))


@pytest.mark.parametrize("arch", sorted(decision.SUPPORTED_ARCHS))
def test_gate_hook_adds_the_plugin_snapshot_archs_on_npu_only(arch, monkeypatch):
    """supports_extra_buffer_around: SGLang's answer, plus True on NPU for the architectures whose
    snapshots the plugin writes while its launch hooks are registered; either signature."""
    monkeypatch.setattr(registration, "launch_hooks_registered", lambda: True)
    sglang_says = arch in GDN_ARCHS
    original = lambda view, model: sglang_says  # noqa: E731
    plugin = arch in PLUGIN_SNAPSHOT_ARCHS
    for model in (arch, SimpleNamespace(architectures=[arch])):
        npu, cuda = SimpleNamespace(device="npu"), SimpleNamespace(device="cuda")
        assert extra_buffer.supports_extra_buffer_around(original, npu, model) is (sglang_says or plugin)
        assert extra_buffer.supports_extra_buffer_around(original, cuda, model) is sglang_says
    monkeypatch.setattr(registration, "launch_hooks_registered", lambda: False)
    assert extra_buffer.supports_extra_buffer_around(original, SimpleNamespace(device="npu"), arch) is sglang_says


def test_plan_keeps_torch_from_autoloading_the_npu_backend(monkeypatch, capsys):
    """On an Ascend host ``import torch`` would import torch_npu (a device backend entry point):
    plan, which needs none of it, turns the autoload off for its process unless the user set it."""
    from sglang_ascend_hybrid import cli

    monkeypatch.setenv("TORCH_DEVICE_BACKEND_AUTOLOAD", "unset-marker")
    monkeypatch.delenv("TORCH_DEVICE_BACKEND_AUTOLOAD")
    assert cli.main(["plan", "--config", str(CONFIGS / "lfm2-1.2b"), "--tp", "1"]) == 0
    capsys.readouterr()
    assert os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD") == "0"
    monkeypatch.setenv("TORCH_DEVICE_BACKEND_AUTOLOAD", "1")
    assert cli.main(["plan", "--config", str(CONFIGS / "lfm2-1.2b"), "--tp", "1"]) == 0
    assert os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] == "1"  # the user's choice stays
