"""Run one ``sglang.Engine`` on the emulated Ascend device and write what it answered.

``python -m sglang_ascend_hybrid.testing.runtime.engine_worker SPEC OUT``: SPEC is a JSON file
``{"engine": {ServerArgs keywords}, "rounds": [[{"input_ids": [...], "max_new_tokens": n}, ...], ...],
"top_logprobs": k}``; each round is one ``generate`` call (a batch), rounds run in order, so a later
round can hit the radix cache an earlier one filled.  OUT receives ``{"startup_s", "rounds": [[{
"output_ids", "logprobs", "top_logprobs", "cached_tokens", "finish_reason"}, ...]], "round_s",
"server_args"}``.  Must run in an environment from
:func:`sglang_ascend_hybrid.testing.emulated_npu.runtime_env.environment`.
"""

from __future__ import annotations

import json
import sys
import time


def _request_result(out: dict) -> dict:
    meta = out["meta_info"]
    return {
        "output_ids": list(out["output_ids"]),
        "logprobs": [float(lp) for lp, _tok, _txt in meta.get("output_token_logprobs", [])],
        "top_logprobs": [[[float(lp), int(tok)] for lp, tok, _txt in row]
                         for row in meta.get("output_top_logprobs", []) or []],
        "cached_tokens": int(meta.get("cached_tokens", 0)),
        "finish_reason": meta.get("finish_reason"),
        "spec_verify_ct": meta.get("spec_verify_ct"),
        "spec_accept_length": meta.get("spec_accept_length"),
    }


def run(spec: dict) -> dict:
    import torch

    if not (hasattr(torch, "npu") and torch.npu.is_available()):
        raise RuntimeError("engine_worker: no NPU device in this process; start it with "
                           "sglang_ascend_hybrid.testing.emulated_npu.runtime_env.environment(...)")
    import sglang

    t0 = time.perf_counter()
    engine = sglang.Engine(**spec["engine"])
    result = {"startup_s": time.perf_counter() - t0, "rounds": [], "round_s": []}
    try:
        result["server_args"] = {k: _jsonable(v) for k, v in vars(engine.server_args).items()}
        for batch in spec["rounds"]:
            t0 = time.perf_counter()
            outs = engine.generate(
                input_ids=[r["input_ids"] for r in batch],
                sampling_params=[{"temperature": 0.0, "max_new_tokens": r["max_new_tokens"], "ignore_eos": True}
                                 for r in batch],
                return_logprob=True, top_logprobs_num=spec.get("top_logprobs", 2))
            result["round_s"].append(time.perf_counter() - t0)
            result["rounds"].append([_request_result(o) for o in outs])
    finally:
        engine.shutdown()
    return result


def _jsonable(value):
    try:
        json.dumps(value)
        return value
    except TypeError:
        return repr(value)


def main(argv: list[str]) -> int:
    spec_path, out_path = argv
    with open(spec_path, encoding="utf-8") as fh:
        spec = json.load(fh)
    result = run(spec)
    with open(out_path, "w", encoding="utf-8") as fh:
        json.dump(result, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
