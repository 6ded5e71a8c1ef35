"""The command line of ``python -m sglang_ascend_hybrid.testing.launch_check``: one resolution of a
model's launch, printed as JSON (exit 1 when it fails), or a batch of requests read from stdin
(``--batch``, what :func:`.isolated.resolve_isolated` runs)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Optional, Sequence

from sglang_ascend_hybrid.testing.launch_check.isolated import run_batch
from sglang_ascend_hybrid.testing.launch_check.resolve import resolve_launch


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sglang_ascend_hybrid.testing.launch_check",
        description="Run SGLang's --device npu startup resolution on a CPU machine.",
    )
    parser.add_argument("--batch", action="store_true", help="read a JSON list of requests on stdin")
    parser.add_argument("--model-path")
    parser.add_argument("--tp-size", type=int, default=1)
    parser.add_argument("--attention-backend", default="ascend")
    parser.add_argument("--no-hooks", action="store_true", help="hide the plugin's launch hooks")
    parser.add_argument("--load-plugins", action="store_true", help="run SGLang's load_plugins() first")
    parser.add_argument("extra", nargs=argparse.REMAINDER, help="extra SGLang flags after --")
    args = parser.parse_args(argv)
    if args.batch:
        return run_batch(sys.stdin)
    if not args.model_path:
        parser.error("--model-path is required")
    extra = [a for a in args.extra if a != "--"]
    res = resolve_launch(
        args.model_path,
        tp_size=args.tp_size,
        attention_backend=args.attention_backend or None,
        extra_args=extra,
        register_hooks=not args.no_hooks,
        load_plugins=args.load_plugins,
    )
    print(json.dumps(res.to_json(), indent=2))
    return 0 if res.ok else 1

