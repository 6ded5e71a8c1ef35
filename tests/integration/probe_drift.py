"""Fresh-interpreter probe for test_plugin_sglang.py: simulate upstream drift (a
patch target missing from the installed SGLang), then resolve a --device npu
launch under 'ascend' and under 'ascend_hybrid'."""

import json
import sys
from pathlib import Path

from sglang_ascend_hybrid import patches
from sglang_ascend_hybrid.testing.launch_check import resolve_launch

DRIFTED = "sglang.srt.layers.attention.attention_registry.removed_in_a_later_release"
patches.PATCHES = patches.PATCHES + (
    patches.Patch(name="simulated-drift", target=DRIFTED, kind="hook", hook_type="around",
                  hook="sglang_ascend_hybrid.integration.ascend_hybrid:create_ascend_hybrid_backend",
                  why="test", how="test", removal="test"),
)
model = Path(sys.argv[1])
out = {}
for backend in ("ascend", "ascend_hybrid"):
    res = resolve_launch(model, tp_size=1, attention_backend=backend, load_plugins=True)
    out[backend] = res.to_json()
json.dump(out, sys.stdout)
