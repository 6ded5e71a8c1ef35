"""SGLang's real HTTP server (``sglang serve``) with the plugin on the emulated Ascend device.

One server for the module: a tiny fp32 LFM2 checkpoint (plus a WordLevel tokenizer written offline:
SGLang's ``/v1/completions`` reads the detokenized ``text`` of every answer, so it needs one), small
pools, chunked prefill.  The tests ask it over HTTP -- OpenAI completions, ``/generate`` plain and
streamed, malformed requests -- compare its tokens with transformers', and end with a SIGTERM
shutdown after which no process the server started may be left.
"""

from __future__ import annotations

import json
import tempfile

import pytest
import requests
import torch

from sglang_ascend_hybrid.testing.runtime import reference_worker, session
from sglang_ascend_hybrid.testing.runtime import server as server_mod
from sglang_ascend_hybrid.testing.runtime.engine_worker import _request_result
from tests.runtime import checkpoints, tier

# the base release runs the server once (the older releases run the Engine subset of the tier, for CI time)
pytestmark = [pytest.mark.runtime, pytest.mark.base_release_only, pytest.mark.xdist_group("runtime-server")]

PROMPT = tier.LONG[:200]  # two chunks of --chunked-prefill-size 128
SHORT = [7, 8, 9, 10, 11, 12]
NEW = 6
GREEDY = {"temperature": 0.0, "max_new_tokens": NEW, "ignore_eos": True}
TIMEOUT = 60

SERVER_ARGS = ["--dtype", "float32", "--max-total-tokens", "4096", "--max-mamba-cache-size", "48",
               "--chunked-prefill-size", "128", "--max-running-requests", "8", "--disable-cuda-graph",
               "--random-seed", "0", "--log-level", "info"]
FP32_ENV = {"SGLANG_ASCEND_HYBRID_EMULATED_NPU_WIDEN_FP32": "1", "SGLANG_MAMBA_CONV_DTYPE": "float32"}


@pytest.fixture(scope="module")
def paths():
    model, reference = checkpoints.write("lfm2", tempfile.mkdtemp(prefix="runtime-server-lfm2-"), torch.float32)
    with open(f"{model}/config.json", encoding="utf-8") as fh:
        cfg = json.load(fh)
    server_mod.write_word_level_tokenizer(model, cfg["vocab_size"], bos=cfg["bos_token_id"],
                                          eos=cfg["eos_token_id"], pad=cfg["pad_token_id"])
    return model, reference, {cfg["bos_token_id"], cfg["eos_token_id"], cfg["pad_token_id"]}


@pytest.fixture(scope="module")
def server(paths):
    try:
        srv = server_mod.start(paths[0], args=SERVER_ARGS, env_extra=FP32_ENV)
    except session.RuntimeRunError as exc:
        pytest.fail(str(exc), pytrace=False)
    yield srv
    srv.cleanup()


def _generate(srv, input_ids, **extra) -> dict:
    r = requests.post(srv.url("/generate"), json={"input_ids": input_ids, "sampling_params": GREEDY, **extra},
                      timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    return r.json()


def _stream(srv, input_ids) -> list[dict]:
    events = []
    with requests.post(srv.url("/generate"), json={"input_ids": input_ids, "sampling_params": GREEDY,
                                                   "stream": True}, stream=True, timeout=TIMEOUT) as r:
        assert r.status_code == 200, r.text
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines(decode_unicode=True):
            if not line:
                continue
            assert line.startswith("data: "), line
            payload = line[len("data: "):]
            if payload == "[DONE]":
                events.append(None)
                break
            events.append(json.loads(payload))
    assert events and events[-1] is None, "the stream did not end with data: [DONE]"
    return events[:-1]


@pytest.fixture(scope="module")
def generated(server):
    """The plain ``/generate`` answers (with log-probabilities) for both prompts."""
    return [_generate(server, ids, return_logprob=True, top_logprobs_num=2) for ids in (PROMPT, SHORT)]


def test_generate_matches_transformers(server, paths, generated):
    results = [_request_result(o) for o in generated]
    assert [len(r["output_ids"]) for r in results] == [NEW, NEW]
    assert [o["meta_info"]["finish_reason"]["type"] for o in generated] == ["length", "length"]
    rounds = [[session.Request(PROMPT, NEW), session.Request(SHORT, NEW)]]
    served = session.Served(rounds=[results], startup_s=server.startup_s or 0.0, round_s=[], server_args={},
                            log=server.log())
    # transformers in this (plain, device-less) test process: the reference worker's computation, no child
    spec = {"model_path": paths[1], "dtype": "float32",
            "sequences": [{"input_ids": q.input_ids, "output_ids": r["output_ids"]}
                          for q, r in zip(rounds[0], results, strict=True)]}
    comparison = session.compare(served, reference_worker.run(spec)["sequences"])
    assert comparison.tokens_equal and comparison.max_gap <= tier.FP32_LOGPROB_TOL, str(comparison)


def test_server_runs_the_plugin_on_the_ascend_stack(server, generated):
    log = server.log()
    assert "sglang-ascend-hybrid: --attention-backend ascend_hybrid runs on SGLang's Ascend stack" in log
    assert "Lfm2Config on NPU uses the Ascend short-conv backend" in log
    assert {("causal_conv1d_fn", "torch"), ("causal_conv1d_update", "torch")} <= server.rungs(), server.rungs()
    assert {"torch_npu._npu_flash_attention_qlens", "torch_npu._npu_paged_attention"} <= server.device_ops()
    # the 200-token prompt was prefilled in 128-token chunks by the server's scheduler
    assert "#new-token: 128" in log


def test_openai_completions_equal_generate(server, paths, generated):
    body = {"model": server.model_name(), "prompt": PROMPT, "max_tokens": NEW, "temperature": 0.0,
            "ignore_eos": True, "return_token_ids": True}
    r = requests.post(server.url("/v1/completions"), json=body, timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["object"] == "text_completion"
    (choice,) = answer["choices"]
    assert choice["token_ids"] == generated[0]["output_ids"], (choice, generated[0]["output_ids"])
    assert choice["finish_reason"] == "length"
    # the tiny tokenizer's words; the detokenizer skips special tokens
    assert choice["text"].split() == [f"<{t}>" for t in choice["token_ids"] if t not in paths[2]], choice
    assert answer["usage"]["prompt_tokens"] == len(PROMPT) and answer["usage"]["completion_tokens"] == NEW
    # the same prompt as text, through the tiny tokenizer
    body["prompt"] = " ".join(f"<{t}>" for t in SHORT)
    r = requests.post(server.url("/v1/completions"), json=body, timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["token_ids"] == generated[1]["output_ids"]


def test_streamed_generate_concatenates_to_the_plain_answer(server, generated):
    events = _stream(server, PROMPT)
    assert len(events) >= 2, events
    # SGLang streams the output so far in each event (incremental_streaming_output off): every event
    # extends the previous one; the new tokens of the events, concatenated, are the plain answer
    pieces, seen = [], []
    for ev in events:
        ids = ev["output_ids"]
        assert ids[:len(seen)] == seen, (seen, ids)
        pieces.append(ids[len(seen):])
        seen = ids
    assert sum(pieces, []) == generated[0]["output_ids"]
    assert events[-1]["meta_info"]["finish_reason"]["type"] == "length"
    assert all(ev["meta_info"]["finish_reason"] is None for ev in events[:-1])


@pytest.mark.parametrize("bad, message", [
    ({"input_ids": "not token ids", "sampling_params": GREEDY}, "must be list"),
    ({"input_ids": SHORT, "sampling_params": {**GREEDY, "temperature": -1.0}}, "temperature"),
    ({"input_ids": SHORT, "sampling_params": {**GREEDY, "max_new_tokens": -3}}, "max_new_tokens"),
])
def test_malformed_request_gets_an_error_and_the_server_goes_on(server, generated, bad, message):
    r = requests.post(server.url("/generate"), json=bad, timeout=TIMEOUT)
    assert r.status_code == 400, (r.status_code, r.text)
    assert message in r.text, r.text
    assert server.proc.poll() is None
    assert _generate(server, SHORT)["output_ids"] == generated[1]["output_ids"]


def test_sigterm_shuts_down_every_process(server):
    import psutil

    children = server.descendants()
    assert children, "the server runs its scheduler and detokenizer in child processes"
    outcome = server.stop(timeout=45)
    # SGLang handles SIGTERM: the server exits 0 within the timeout, its children before or with it
    assert outcome == {"exit_code": 0, "terminated_cleanly": True, "leftover": []}, (outcome, server.log()[-3000:])
    assert server.proc.poll() is not None
    assert not [pid for pid in children if psutil.pid_exists(pid) and
                psutil.Process(pid).status() != psutil.STATUS_ZOMBIE], children
