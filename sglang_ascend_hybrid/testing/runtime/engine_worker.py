"""Run one ``sglang.Engine`` on the emulated Ascend device and write what it answered.

``python -m sglang_ascend_hybrid.testing.runtime.engine_worker SPEC OUT``: SPEC is a JSON file
``{"engine": {ServerArgs keywords}`` (or ``"argv": [command-line flags]``, parsed by SGLang's own
parser), ``"rounds": [[{"input_ids": [...], "max_new_tokens": n}, ...], ...],
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
    asked = None
    if "argv" in spec:  # an operator's command-line flags, parsed by SGLang's own parser
        server_args, asked = _server_args_from_argv(spec["argv"])
        engine = sglang.Engine(server_args=server_args)
    else:
        engine = sglang.Engine(**spec["engine"])
    result = {"startup_s": time.perf_counter() - t0, "rounds": [], "round_s": []}
    try:
        result["server_args"] = {k: _jsonable(v) for k, v in vars(engine.server_args).items()}
        if asked is not None:
            result["adjusted"] = adjusted(asked, result["server_args"])
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


# Settings worth reporting when SGLang or the plugin resolved them from "unset" at startup.
RESOLVED_FIELDS = ("page_size", "attention_backend", "mamba_scheduler_strategy", "mamba_ssm_dtype",
                   "disable_radix_cache", "chunked_prefill_size", "max_running_requests", "disable_cuda_graph",
                   "speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
                   "speculative_num_draft_tokens", "max_mamba_cache_size")


def _server_args_from_argv(argv: list[str]):
    """SGLang's ServerArgs from command-line flags, and the values as the flags asked (before
    SGLang's and the plugin's startup resolution)."""
    import argparse

    from sglang.srt.plugins import load_plugins
    from sglang.srt.server_args import ServerArgs

    load_plugins()  # as `sglang serve` does before it builds its parser (the plugin's backend name)
    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    namespace = parser.parse_args(argv)
    asked = {k: _jsonable(v) for k, v in vars(namespace).items()}
    return ServerArgs.from_cli_args(namespace), asked


def adjusted(asked: dict, final: dict) -> list[list]:
    """``[field, asked, final]`` for every setting whose final value differs from what the flags asked
    (an unset one only among :data:`RESOLVED_FIELDS`)."""
    out = []
    for name, want in sorted(asked.items()):
        if name not in final or final[name] == want:
            continue
        if want is None and name not in RESOLVED_FIELDS:
            continue
        out.append([name, want, final[name]])
    return out


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
