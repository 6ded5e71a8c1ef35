"""An SGLang release newer than the tested range, with a renamed patch target.

Simulated faithfully: a hard-linked copy of the installed sglang package in which
``attention_registry.attn_backend_wrapper`` is renamed (with its call sites), and
a dist-info saying the first release above the tested range, first on PYTHONPATH.
The plugin must still register, verify every target, apply what exists, say once
that the release is untested and which patches did not apply, continue under
``ascend`` and stop under ``ascend_hybrid``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_ascend_hybrid import patches
from sglang_ascend_hybrid.patches.releases import range_bounds

HERE = Path(__file__).parent
OLD, NEW = "attn_backend_wrapper", "wrap_attention_backend_v2"
RENAMED = patches.by_name("short-conv-backend")


def _link_or_copy(src, dst):
    try:
        os.link(src, dst)  # instant; the sources are only read
    except OSError:  # another filesystem
        shutil.copy2(src, dst)


def _rewrite(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, path
    path.unlink()  # hard link: never write through it
    path.write_text(text.replace(old, new))


# The plugin's handling of an SGLang version outside its tested range, simulated on the installed SGLang:
# the base release's run checks it (CI time); each release's own targets are verified on that release by
# the registry and compatibility-table tests.
pytestmark = pytest.mark.base_release_only


@pytest.fixture(scope="module")
def untested(tmp_path_factory):
    version = range_bounds()[1]
    root = tmp_path_factory.mktemp("sglang-untested")
    src = Path(importlib.util.find_spec("sglang").origin).parent
    shutil.copytree(src, root / "sglang", copy_function=_link_or_copy)
    assert RENAMED.target.endswith("." + OLD)
    for rel in ("srt/layers/attention/attention_registry.py",
                "srt/model_executor/model_runner_components/attention_backend_setup.py",
                "srt/speculative/draft_utils.py"):
        if (root / "sglang" / rel).exists():
            _rewrite(root / "sglang" / rel, OLD, NEW)
    info = root / f"sglang-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    model = HERE.parent.parent / "examples" / "configs" / "qwen3_6-27b"
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0", HF_HUB_OFFLINE="1",
               SGLANG_ZBAL_LOCAL_MEM_SIZE="65536",
               PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    env.pop("SGLANG_ASCEND_HYBRID_STRICT", None)
    proc = subprocess.run([sys.executable, str(HERE / "probe_untested.py"), str(model)], capture_output=True,
                          text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return version, json.loads(proc.stdout.strip().splitlines()[-1])


def test_plugin_sees_the_simulated_release(untested):
    version, out = untested
    assert out["sglang_version"] == version


def test_untested_release_is_said_once_naming_the_patches_not_applied(untested):
    version, out = untested
    said = [(level, msg) for level, msg in out["lines"] if "is untested" in msg]
    assert len(said) == 1, out["lines"]
    level, msg = said[0]
    assert level == "WARNING"
    assert f"SGLang {version} is untested" in msg
    assert f"{RENAMED.name} ({RENAMED.target}: " in msg and f"'{OLD}' not found" in msg


def test_every_other_target_is_verified_and_applied(untested):
    version, out = untested
    # The simulation is this release's sources under a newer version: a helper the
    # newer version is declared to have but these sources lack fails too (as it must).
    drifted = {p.name for p in patches.PATCHES
               if patches.release_state(p, version) is None and not p.requires and p.runtime == "srt"
               and patches.verify(p, version) is not None}
    # a release-bounded patch whose other route these sources lack (the older GDN prefill route's
    # patches under a version past their bound): verified there and failed, never assumed
    off_route = {p.name for p in patches.PATCHES if (patches.release_state(p, version) or ("",))[0] == "failed"}
    for name, (state, reason) in out["status"].items():
        patch = patches.by_name(name)
        if name == RENAMED.name:
            assert state == "failed" and OLD in reason
        elif name in off_route:
            assert state == "failed" and "should take another route" in reason, (name, state, reason)
        elif patches.release_state(patch, version) is not None:  # off its releases, that route there
            assert (state, reason) == patches.release_state(patch, version), (name, state, reason)
        elif name in drifted:
            assert state == "failed" and "not found" in reason, (name, state, reason)
        elif patch.requires:
            assert state == "skipped", (name, state, reason)
        else:
            assert state == "applied", (name, state, reason)


def test_untested_release_is_lenient_under_ascend(untested):
    res = untested[1]["ascend"]
    assert res["ok"], res["error"]
    assert res["resolved"]["attention_backend"] == "ascend"


def test_untested_release_is_strict_under_ascend_hybrid(untested):
    version, out = untested
    res = out["ascend_hybrid"]
    assert not res["ok"]
    assert res["error_type"] == "PluginPatchError"
    assert RENAMED.target in res["error"] and f"SGLang {version}" in res["error"] and "untested" in res["error"]
