"""The plugin against the real installed SGLang 0.5.23, discovered through the
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

HERE = Path(__file__).parent


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
    for name, (state, reason) in facts["status"].items():
        patch = patches.by_name(name)
        if patch.requires:  # NPU-only upstream modules: not importable on this CPU machine
            assert state == "skipped" and "not installed" in reason
        else:
            assert state == "applied", (name, state, reason)
    assert "SGLang 0.5.23" in facts["summary"]


def test_attention_backends_holds_the_entry_point_factory(facts):
    assert facts["factory_entry_point"] == (
        "sglang_ascend_hybrid.backends.ascend_hybrid:create_ascend_hybrid_backend")
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
            "from sglang_ascend_hybrid.status import STATUS;"
            "print('ascend_hybrid' in choices.ATTENTION_BACKEND_CHOICES, STATUS.summary())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "False disabled by SGLANG_ASCEND_HYBRID_DISABLE=1"
