"""``sglang-ascend-hybrid doctor`` in a fresh interpreter (it loads SGLang's
plugins, which patch modules for good)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sglang_ascend_hybrid import patches
from sglang_ascend_hybrid.patches.releases import installed_version


def run_cli(*argv, env_extra=None):
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0", HF_HUB_OFFLINE="1")
    env.pop("SGLANG_ASCEND_HYBRID_STRICT", None)
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "sglang_ascend_hybrid.cli", *argv], capture_output=True,
                          text=True, env=env, timeout=600)


def test_doctor_reports_versions_ops_patches_and_settings():
    proc = run_cli("doctor", env_extra={"SGLANG_ASCEND_HYBRID_GDN_MAX_OVERHEAD": "2.0"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert f"sglang                 {installed_version('sglang')}\n" in out
    assert f"Release: SGLang {installed_version('sglang')} is a tested release" in out
    assert "torch_npu              not found" in out and "sgl-kernel-npu         not found" in out
    assert "chunk_gated_delta_rule" in out and "absent" in out
    for p in patches.PATCHES:
        # the patch's own row: state, name, target in columns (another row's reason may name it)
        line = next(ln for ln in out.splitlines() if [c.strip() for c in ln.split("  ") if c.strip()][1:2] == [p.name])
        on_release = patches.release_state(p)
        # applied, or not needed / unavailable on this release (with the reason), or
        # waiting for an NPU package this CPU machine lacks.
        expected = on_release[0] if on_release else "skipped" if p.requires else "applied"
        assert line.startswith(f"  {expected} "), line
        if on_release:
            assert on_release[1] in line
    assert "failed" not in out and "problem:" not in out
    assert "SGLANG_ASCEND_HYBRID_GDN_MAX_OVERHEAD = 2.0\n" in out  # set, so no "(default)"
    assert "SGLANG_ASCEND_HYBRID_DISABLE = False (default)" in out


@pytest.mark.base_release_only  # the disabled plugin's report does not depend on the release (CI time)
def test_doctor_when_disabled():
    proc = run_cli("doctor", env_extra={"SGLANG_ASCEND_HYBRID_DISABLE": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "disabled by SGLANG_ASCEND_HYBRID_DISABLE=1" in proc.stdout
