"""The plugin against the real installed SGLang release, discovered through the
package's real entry points, in a fresh interpreter (hooks patch modules for
good, so they must not leak into other tests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_ascend_hybrid import patches
from sglang_ascend_hybrid.patches.releases import installed_version

HERE = Path(__file__).parent
SGLANG = installed_version("sglang")


def run_probe(script: str, env_extra: dict | None = None) -> dict:
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0", HF_HUB_OFFLINE="1")
    env.pop("SGLANG_ASCEND_HYBRID_STRICT", None)
    env.update(env_extra or {})
    proc = subprocess.run([sys.executable, str(HERE / script)], capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def facts():
    return run_probe("probe_plugin.py")


def test_load_plugins_runs_register_through_entry_points(facts):
    srt = {p.name for p in patches.PATCHES if p.runtime == "srt"}
    assert srt <= set(facts["status"]), facts["status"]
    assert facts["import_errors"] == []
    for name, (state, reason) in facts["status"].items():
        patch = patches.by_name(name)
        on_release = patches.release_state(patch)
        if on_release is not None:  # this release takes another route
            assert on_release[0] == patches.NOT_NEEDED
            assert [state, reason] == list(on_release)
        elif patch.requires:  # NPU-only upstream modules: not importable on this CPU machine
            assert state == "skipped" and "not installed" in reason
        else:
            assert state == "applied", (name, state, reason)
    assert f"SGLang {SGLANG}:" in facts["summary"]
    # SGLang's HookRegistry rebound the from-import copy inside the LFM2 model module too.
    assert facts["lfm2_conv_rebound"]


def test_attention_backends_holds_the_entry_point_factory(facts):
    assert facts["factory_entry_point"] == (
        "sglang_ascend_hybrid.integration.ascend_hybrid:create_ascend_hybrid_backend")
    assert facts["in_choices"] and facts["in_draft_choices"]


def test_backend_name_passes_argparse_for_every_field(facts):
    assert set(facts["parsed"].values()) == {"ascend_hybrid"}, facts["parsed"]
    assert facts["unknown_rejected"]
    assert facts["engine_kwargs_attention_backend"] == "ascend_hybrid"


def test_second_register_changes_nothing(facts):
    assert facts["second_register_changes_nothing"]


def test_disable_env_leaves_sglang_untouched():
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0", SGLANG_ASCEND_HYBRID_DISABLE="1")
    code = ("from sglang.srt.plugins import load_plugins; load_plugins();"
            "from sglang.srt.arg_groups import choices;"
            "from sglang_ascend_hybrid.patches.status import STATUS;"
            "print('ascend_hybrid' in choices.ATTENTION_BACKEND_CHOICES, STATUS.summary())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "False disabled by SGLANG_ASCEND_HYBRID_DISABLE=1"


@pytest.fixture(scope="module")
def drift():
    model = Path(__file__).parent.parent.parent / "examples" / "configs" / "qwen3_6-27b"
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0", HF_HUB_OFFLINE="1",
               SGLANG_ZBAL_LOCAL_MEM_SIZE="65536")
    env.pop("SGLANG_ASCEND_HYBRID_STRICT", None)
    proc = subprocess.run([sys.executable, str(HERE / "probe_drift.py"), str(model)], capture_output=True,
                          text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_drifted_target_is_a_warning_under_ascend(drift):
    res = drift["ascend"]
    assert res["ok"], res["error"]
    assert res["resolved"]["attention_backend"] == "ascend"
    assert not res["hybrid_requested"]


def test_drifted_target_stops_startup_under_ascend_hybrid(drift):
    res = drift["ascend_hybrid"]
    assert not res["ok"]
    assert res["error_type"] == "PluginPatchError"
    assert "removed_in_a_later_release" in res["error"]
    assert f"SGLang {SGLANG}" in res["error"]
    assert res["hybrid_requested"]


def test_ascend_hybrid_resolves_to_the_ascend_stack_and_is_recorded():
    from sglang_ascend_hybrid.testing.launch_check import resolve_isolated

    model = Path(__file__).parent.parent.parent / "examples" / "configs" / "qwen3_6-27b"
    (res,) = resolve_isolated([dict(model_path=model, tp_size=8, attention_backend="ascend_hybrid",
                                    load_plugins=True,
                                    extra_args=["--speculative-draft-attention-backend", "ascend_hybrid"])])
    assert res["ok"], res["error"]
    for field in ("attention_backend", "prefill_attention_backend", "decode_attention_backend"):
        assert res["resolved"][field] == "ascend", field
    assert res["hybrid_requested"]


DIFFUSION = patches.by_name("packed-attention-one-sided")


def test_diffusion_fix_is_installed_or_plainly_unavailable():
    """Where the release has the diffusion runtime's plugin loader, the
    sglang.multimodal_gen.plugins entry installs the one-sided-empty fix through it,
    visible at every import site; where it has none, doctor says the fix is
    unavailable and why, and reports no loading problem."""
    on_release = patches.release_state(DIFFUSION)
    if on_release is not None:
        import importlib.util

        assert on_release[0] == patches.UNAVAILABLE
        sglang_dir = Path(importlib.util.find_spec("sglang").origin).parent
        assert not (sglang_dir / "multimodal_gen/runtime/platforms/plugins.py").exists()
        assert patches.find_target("sglang.multimodal_gen.runtime.platforms.plugins.load_plugins") is not None
        proc = subprocess.run([sys.executable, "-m", "sglang_ascend_hybrid.cli", "doctor"], capture_output=True,
                              text=True, env=dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0"), timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        line = next(ln for ln in proc.stdout.splitlines() if f" {DIFFUSION.name} " in ln)
        assert line.split()[0] == "unavailable" and "no plugin loader" in line
        assert "problem:" not in proc.stdout
        return
    code = (
        "from sglang.multimodal_gen.runtime.platforms import plugins as mm\n"
        "mm.load_plugins(); mm.apply_plugin_hooks()\n"
        "from sglang_ascend_hybrid.patches.status import STATUS\n"
        "STATUS.refresh_applied()\n"
        "from sglang.multimodal_gen.runtime.layers.attention.backends import ascend_fa\n"
        "from sglang_ascend_hybrid.integration import packed_attention as pa\n"
        "st = STATUS.patches['packed-attention-one-sided']\n"
        "print(st.state, pa.probe_replacement(ascend_fa.fused_infer_attention_varlen))\n"
    )
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "applied True"


def test_discovery_never_imports_npu_packages_and_deferred_patches_apply_on_npu_build():
    """With (stub) torch_npu / sgl_kernel_npu importable, SGLang's plugin loading must not
    import them; the GDN patches this release needs wait for the first NPU
    attention-backend build, then wrap their targets (strict startup succeeds)."""
    stubs = HERE.parent / "npu_stubs"
    needed = [p for p in patches.PATCHES if p.requires and patches.release_state(p) is None]
    assert needed, "expected NPU-backend patches on every release"
    code = (
        "import sys, json, importlib\n"
        "npu_mods = lambda: {m for m in sys.modules if m.split('.')[0] in ('torch_npu', 'sgl_kernel_npu')}\n"
        "from sglang.srt.plugins import load_plugins\n"
        "before = npu_mods()  # what SGLang / transformers import on their own\n"
        "load_plugins()\n"
        "from sglang_ascend_hybrid.patches.status import STATUS\n"
        "from sglang_ascend_hybrid import patches\n"
        "from sglang_ascend_hybrid.patches import mode\n"
        "out = {'imported': sorted(npu_mods() - before),\n"
        "       'discovery': {n: s.state for n, s in STATUS.patches.items()}}\n"
        "mode.record_request()  # strict: --attention-backend ascend_hybrid\n"
        "from sglang_ascend_hybrid.patches.apply import apply_deferred\n"
        "apply_deferred()\n"
        "out['build'] = {n: s.state for n, s in STATUS.patches.items()}\n"
        "def wrapped(target):\n"
        "    parts = target.split('.')\n"
        "    for i in range(len(parts) - 1, 0, -1):\n"
        "        try:\n"
        "            obj = importlib.import_module('.'.join(parts[:i]))\n"
        "        except ImportError:\n"
        "            continue\n"
        "        for name in parts[i:]:\n"
        "            obj = getattr(obj, name)\n"
        "        return hasattr(obj, '__wrapped__')\n"
        f"out['wrapped'] = {{t: wrapped(t) for t in {[p.target for p in needed]!r}}}\n"
        "print(json.dumps(out))\n"
    )
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0",
               PYTHONPATH=os.pathsep.join([str(stubs), os.environ.get("PYTHONPATH", "")]))
    env.pop("SGLANG_ASCEND_HYBRID_STRICT", None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    facts = json.loads(out.stdout.strip().splitlines()[-1])
    assert facts["imported"] == []
    for p in needed:
        assert facts["discovery"][p.name] == "deferred", p.name
        assert facts["build"][p.name] == "applied", p.name
        assert facts["wrapped"][p.target], p.target
    for name, state in facts["build"].items():
        assert state in ("applied", patches.NOT_NEEDED), (name, state)
