"""Fresh-interpreter probe for test_untested_release.py: run with a simulated newer
SGLang release first on PYTHONPATH, load the plugin the way SGLang does and resolve a
--device npu launch under 'ascend' and under 'ascend_hybrid'.  Prints JSON."""

import json
import logging
import sys
from pathlib import Path

lines = []


class _Capture(logging.Handler):
    def emit(self, record):
        lines.append((record.levelname, record.getMessage()))


logging.getLogger("sglang_ascend_hybrid").addHandler(_Capture(level=logging.INFO))
logging.getLogger("sglang_ascend_hybrid").setLevel(logging.INFO)

from sglang_ascend_hybrid import plugin  # noqa: E402
from sglang_ascend_hybrid.patches import apply  # noqa: E402
from sglang_ascend_hybrid.patches.status import STATUS  # noqa: E402
from sglang_ascend_hybrid.testing.launch_check import resolve_launch  # noqa: E402

model = Path(sys.argv[1])
out = {}
for backend in ("ascend", "ascend_hybrid"):
    res = resolve_launch(model, tp_size=1, attention_backend=backend, load_plugins=True)
    out[backend] = res.to_json()
plugin.register()  # a second registration in the same process says nothing new
out["import_errors"] = apply.import_pending()  # as a process that runs a model: every patch in place
out["sglang_version"] = STATUS.sglang_version
out["status"] = {n: [s.state, s.reason] for n, s in STATUS.patches.items()}
out["lines"] = lines
json.dump(out, sys.stdout)
