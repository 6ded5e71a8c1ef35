"""Start SGLang's real Engine on the emulated Ascend device and transformers beside it; compare.

:func:`serve` runs :mod:`.engine_worker` in a child process whose environment switches the emulated
device on (a generated ``sgl_kernel_npu`` tree for the installed SGLang, cached per process), and
returns a :class:`Served`: what SGLang answered, its log, and the device records (which device ops
ran, which plugin rungs served, in every process SGLang started).  :func:`reference` runs
:mod:`.reference_worker` in a plain child process.  :func:`compare` puts them side by side.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Optional, Sequence

from sglang_ascend_hybrid.testing.emulated_npu import kernel_tree, runtime_env

_TREES: dict[str, str] = {}


class RuntimeRunError(RuntimeError):
    """SGLang's runtime (or the reference) failed in its child process; the message ends with its log."""


def kernel_tree_dir(sglang_root: Optional[str] = None) -> str:
    """The emulated ``sgl_kernel_npu`` tree for the installed SGLang (written once per process)."""
    from sglang_ascend_hybrid.tools import pairing

    root = sglang_root or pairing.sglang_dir() or ""
    if root not in _TREES:
        dest = tempfile.mkdtemp(prefix="emulated-sgl-kernel-npu-")
        kernel_tree.generate(dest, sglang_root)
        _TREES[root] = dest
    return _TREES[root]


@dataclass
class Request:
    input_ids: list[int]
    max_new_tokens: int = 8


@dataclass
class Served:
    rounds: list[list[dict]]  # per round, per request: engine_worker's fields
    startup_s: float
    round_s: list[float]
    server_args: dict
    log: str
    records: list[dict] = field(default_factory=list)
    adjusted: list = field(default_factory=list)  # [setting, asked, final] (runs configured by argv)

    def requests(self) -> list[dict]:
        return [r for batch in self.rounds for r in batch]

    def rungs(self) -> set[tuple[str, str]]:
        """``(ladder op, rung)`` pairs that served at least one call, in any process."""
        return {(r["name"], r["rung"]) for r in self.records if r["kind"] == "rung"}

    def device_ops(self, probe: bool = False) -> set[str]:
        """Device ops that ran (``probe=True``: those a plugin probe called)."""
        return {r["name"] for r in self.records if r["kind"] == "device-op" and bool(r.get("probe")) == probe}

    def prefill_batches(self) -> int:
        """How many prefill batches SGLang's scheduler logged."""
        return len(re.findall(r"Prefill batch", self.log))


def _run(module: str, spec: dict, env: dict, timeout: float, what: str) -> tuple[dict, str]:
    with tempfile.TemporaryDirectory(prefix="sglang-runtime-") as tmp:
        spec_path, out_path, log_path = (os.path.join(tmp, n) for n in ("spec.json", "out.json", "log.txt"))
        with open(spec_path, "w", encoding="utf-8") as fh:
            json.dump(spec, fh)
        with open(log_path, "w", encoding="utf-8") as log:
            try:
                proc = subprocess.run([sys.executable, "-m", module, spec_path, out_path], env=env,
                                      stdout=log, stderr=subprocess.STDOUT, timeout=timeout, check=False)
                code = proc.returncode
            except subprocess.TimeoutExpired:
                code = "timeout"
        with open(log_path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        if code != 0 or not os.path.exists(out_path):
            raise RuntimeRunError(f"{what} failed (exit {code}); its log ends:\n{text[-6000:]}")
        with open(out_path, encoding="utf-8") as fh:
            return json.load(fh), text


def serve(model_path: str, rounds: Sequence[Sequence[Request]], *, engine_args: Optional[dict] = None,
          argv: Optional[Sequence[str]] = None, env_extra: Optional[dict] = None, timeout: float = 600.0,
          top_logprobs: int = 2) -> Served:
    """Serve ``rounds`` of greedy requests with SGLang's Engine on the emulated device, configured by
    ``engine_args`` (Engine keywords) or ``argv`` (command-line flags through SGLang's own parser;
    ``--model-path`` is given here)."""
    spec: dict = {"top_logprobs": top_logprobs,
                  "rounds": [[{"input_ids": r.input_ids, "max_new_tokens": r.max_new_tokens} for r in batch]
                             for batch in rounds]}
    if argv is not None:
        spec["argv"] = ["--model-path", model_path, *argv]
    else:
        engine = {"model_path": model_path, "device": "npu", "attention_backend": "ascend_hybrid",
                  "skip_tokenizer_init": True, "log_level": "info", "random_seed": 0}
        engine.update(engine_args or {})
        spec["engine"] = engine
    with tempfile.TemporaryDirectory(prefix="emulated-npu-records-") as tmp:
        records_path = os.path.join(tmp, "records.jsonl")
        env = runtime_env.environment(kernel_tree_dir(), records=records_path)
        env.update(env_extra or {})
        out, log = _run("sglang_ascend_hybrid.testing.runtime.engine_worker", spec, env, timeout,
                        "SGLang's Engine on the emulated device")
        records = []
        if os.path.exists(records_path):
            with open(records_path, encoding="utf-8") as fh:
                records = [json.loads(line) for line in fh if line.strip()]
    return Served(out["rounds"], out["startup_s"], out["round_s"], out.get("server_args", {}), log, records,
                  out.get("adjusted", []))


def reference(model_path: str, served: Served, rounds: Sequence[Sequence[Request]], *, dtype: str = "float32",
              timeout: float = 300.0) -> list[dict]:
    """transformers' view of every served request (same order as :meth:`Served.requests`)."""
    requests = [r for batch in rounds for r in batch]
    spec = {"model_path": model_path, "dtype": dtype,
            "sequences": [{"input_ids": req.input_ids, "output_ids": got["output_ids"]}
                          for req, got in zip(requests, served.requests(), strict=True)]}
    env = dict(os.environ)
    for name in ("SGLANG_ASCEND_HYBRID_EMULATED_NPU", "SGLANG_ASCEND_HYBRID_EMULATED_NPU_RECORDS"):
        env.pop(name, None)
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    out, _ = _run("sglang_ascend_hybrid.testing.runtime.reference_worker", spec, env, timeout,
                  "the transformers reference")
    return out["sequences"]


@dataclass
class Comparison:
    tokens_equal: bool  # every SGLang token is transformers' greedy token
    decisive_equal: bool  # equal wherever transformers' top-2 margin exceeds ``margin``
    max_gap: float  # largest |log-probability difference| of SGLang's tokens
    margin: float
    detail: list[str]

    def __str__(self) -> str:
        return (f"tokens_equal={self.tokens_equal} decisive_equal={self.decisive_equal} "
                f"max_logprob_gap={self.max_gap:.3g}\n" + "\n".join(self.detail))


def compare(served: Served, ref: list[dict], *, margin: float = 0.5) -> Comparison:
    equal, decisive, gap, lines = True, True, 0.0, []
    for i, (got, want) in enumerate(zip(served.requests(), ref, strict=True)):
        diffs = [abs(a - b) for a, b in zip(got["logprobs"], want["logprobs"], strict=True)]
        g = max(diffs, default=0.0)
        same = [a == b for a, b in zip(got["output_ids"], want["argmax"], strict=True)]
        equal &= all(same)
        decisive &= all(s or m <= margin for s, m in zip(same, want["margin"], strict=True))
        gap = max(gap, g)
        lines.append(f"request {i}: sglang {got['output_ids']} transformers {want['argmax']} "
                     f"cached {got['cached_tokens']} gap {g:.3g}")
    return Comparison(equal, decisive, gap, margin, lines)
