"""The runtime tier's shared machinery: one SGLang Engine run per configuration, shared by the tests
that ask what it did, compared with transformers.

A configuration is (family, dtype, extra Engine arguments, extra environment).  Its run serves two
rounds of greedy requests (:data:`ROUNDS`): first three prompts of 303, 6 and 3 tokens (the long one
is prefilled in three 128-token chunks), then two prompts that share the long prompt's first 300
tokens (radix-cache hits of whole 128-token pages).  Runs are cached for the session, keyed by the
configuration, so every test of one configuration reads one Engine's answers.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass

import pytest
import torch

from sglang_ascend_hybrid.testing.runtime import session
from tests.runtime import checkpoints

LONG = [3 + (7 * i) % 150 for i in range(303)]
ROUNDS = [
    [session.Request(LONG, 8), session.Request([7, 8, 9, 10, 11, 12], 8), session.Request([3, 4, 5], 8)],
    [session.Request(LONG[:300] + [20, 21], 8), session.Request(LONG[:300] + [33], 6)],
]
PROMPTS = sum(len(batch) for batch in ROUNDS)

# Engine arguments of every run: the scheduler's real chunked prefill and radix cache, a small pool.
BASE_ENGINE = {"chunked_prefill_size": 128, "max_total_tokens": 4096, "max_mamba_cache_size": 48,
               "max_running_requests": 8, "disable_cuda_graph": True}

# decode graphs on (SGLang's default on NPU), three small batch sizes to keep the capture short
GRAPHS = {"disable_cuda_graph": False, "cuda_graph_bs_decode": (1, 2, 4)}  # a tuple: runs are keyed by it

FP32_LOGPROB_TOL = 1e-4
BF16_MARGIN = 0.25  # a bf16 token may differ only where transformers' top-2 log-prob margin is below this

_CHECKPOINTS: dict = {}
_RUNS: dict = {}


@dataclass
class Run:
    served: session.Served
    comparison: session.Comparison
    dtype: str


def checkpoint(family: str, dtype: str) -> tuple[str, str]:
    key = (family, dtype)
    if key not in _CHECKPOINTS:
        dest = tempfile.mkdtemp(prefix=f"runtime-{family}-{dtype}-")
        _CHECKPOINTS[key] = checkpoints.write(family, dest, getattr(torch, dtype))
    return _CHECKPOINTS[key]


def draft_checkpoint() -> str:
    """A tiny full-attention draft model (LlamaForCausalLM, 2 layers) with the families' vocabulary,
    for STANDALONE speculative decoding (SGLang runs a STANDALONE draft without any conv or GDN
    state backend, so the draft must have only full-attention layers)."""
    if "draft" not in _CHECKPOINTS:
        import transformers

        from tests.e2e import harness

        cfg = transformers.LlamaConfig(vocab_size=160, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                                       tie_word_embeddings=False)
        torch.manual_seed(1)
        model = transformers.LlamaForCausalLM(cfg).eval()
        harness.randomize_(model, 1)
        dest = tempfile.mkdtemp(prefix="runtime-draft-")
        model.save_pretrained(dest, safe_serialization=True)
        _CHECKPOINTS["draft"] = dest
    return _CHECKPOINTS["draft"]


def run(family: str, dtype: str = "float32", engine: dict | None = None, env: dict | None = None,
        rounds=ROUNDS) -> Run:
    """The (cached) run of one configuration; a failed start or request fails the calling test."""
    key = (family, dtype, tuple(sorted((engine or {}).items())), tuple(sorted((env or {}).items())), id(rounds))
    if key not in _RUNS:
        model, reference = checkpoint(family, dtype)
        args = {**BASE_ENGINE, "dtype": dtype, **(engine or {})}
        extra = {"SGLANG_MAMBA_CONV_DTYPE": dtype}
        if dtype == "float32":
            extra["SGLANG_ASCEND_HYBRID_EMULATED_NPU_WIDEN_FP32"] = "1"
        extra.update(env or {})
        try:
            served = session.serve(model, rounds, engine_args=args, env_extra=extra)
        except session.RuntimeRunError as exc:
            _RUNS[key] = exc
        else:
            ref = session.reference(reference, served, rounds, dtype=dtype)
            _RUNS[key] = Run(served, session.compare(served, ref, margin=BF16_MARGIN), dtype)
    result = _RUNS[key]
    if isinstance(result, Exception):
        pytest.fail(str(result), pytrace=False)
    return result


def assert_matches_transformers(r: Run) -> None:
    c = r.comparison
    if r.dtype == "float32":
        assert c.tokens_equal and c.max_gap <= FP32_LOGPROB_TOL, str(c)
    else:
        assert c.decisive_equal, str(c)


def assert_served_whole(r: Run, radix: bool = True) -> None:
    """Every request answered with all its tokens; chunked prefill happened, and radix hits (or, with
    ``radix=False``, none: a family SGLang serves without its prefix cache)."""
    got = r.served.requests()
    want = [req for batch in ROUNDS for req in batch]
    assert [len(g["output_ids"]) for g in got] == [req.max_new_tokens for req in want]
    assert r.served.prefill_batches() > PROMPTS, r.served.prefill_batches()
    cached = [g["cached_tokens"] for g in r.served.rounds[1]]
    if radix:
        assert cached and all(c >= 128 for c in cached), cached
    else:
        assert cached == [0] * len(ROUNDS[1]), cached


def graph_counts(served) -> dict[str, int]:
    """Largest count of each NPU-graph event (captures / replays / updates) any process recorded."""
    counts: dict[str, int] = {}
    for r in served.records:
        if r["kind"] == "npu-graph":
            counts[r["name"]] = max(counts.get(r["name"], 0), r["count"])
    return counts


def assert_decode_replayed_graphs(served) -> None:
    """A run with :data:`GRAPHS`: one graph captured per batch size, and the two rounds' decode steps
    (8 / 6 new tokens) replayed at least 8 graphs, each after a ``graph.update``."""
    counts = graph_counts(served)
    assert counts.get("captures", 0) >= len(GRAPHS["cuda_graph_bs_decode"]), counts
    assert counts.get("replays", 0) >= 8 and counts.get("updates", 0) >= 8, counts
