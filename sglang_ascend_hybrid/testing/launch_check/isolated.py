"""Resolutions in a fresh Python process: :func:`resolve_isolated` sends a batch of requests to
``python -m sglang_ascend_hybrid.testing.launch_check --batch`` and reads back their results, so the
caller's process keeps none of resolution's process-global side effects; :func:`run_batch` is the
child's end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from sglang_ascend_hybrid.testing.launch_check.emulation import RESOLUTION_ENV
from sglang_ascend_hybrid.testing.launch_check.resolve import resolve_launch

# The line of the child's stdout that carries the results.
RESULTS_MARKER = "@@LAUNCH_CHECK_RESULTS@@"


def resolve_isolated(requests: Sequence[dict], *, timeout: float = 900.0) -> list[dict]:
    """Run each request (keyword arguments of :func:`resolve_launch`) in one
    fresh Python process, sequentially; return their ``LaunchResult.to_json()``.

    One process for the whole batch keeps SGLang's import cost paid once while
    keeping the caller's process free of resolution side effects.
    """
    payload = json.dumps([_jsonable_request(r) for r in requests])
    env = dict(os.environ)
    env.update(RESOLUTION_ENV)
    repo_root = str(Path(__file__).resolve().parents[3])  # the directory holding sglang_ascend_hybrid
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (repo_root, env.get("PYTHONPATH", "")) if p
    )
    proc = subprocess.run(
        [sys.executable, "-m", "sglang_ascend_hybrid.testing.launch_check", "--batch"],
        input=payload,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    for line in proc.stdout.splitlines():
        if line.startswith(RESULTS_MARKER):
            return json.loads(line[len(RESULTS_MARKER):])
    raise RuntimeError(
        f"launch_check subprocess produced no results (rc={proc.returncode}).\n"
        f"stdout tail:\n{proc.stdout[-4000:]}\nstderr tail:\n{proc.stderr[-8000:]}"
    )


def _jsonable_request(req: dict) -> dict:
    out = dict(req)
    if "model_path" in out:
        out["model_path"] = str(out["model_path"])
    if "extra_args" in out:
        out["extra_args"] = [str(a) for a in out["extra_args"]]
    return out


def run_batch(stream) -> int:
    requests = json.load(stream)
    results = []
    for req in requests:
        res = resolve_launch(**req)
        results.append(res.to_json())
    sys.stdout.write(RESULTS_MARKER + json.dumps(results) + "\n")
    sys.stdout.flush()
    return 0
