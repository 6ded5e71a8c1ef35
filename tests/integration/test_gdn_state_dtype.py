"""GDN SSM state dtype at launch (MTP issue): the plugin keeps what the user or the model asked for
and says in one INFO line which kernels that means; an explicit setting is never overridden.

Resolutions run through SGLang's real ``--device npu`` resolution in one fresh process
(``launch_check.resolve_isolated``).  SGLang exports ``--mamba-ssm-dtype`` into the process
environment, so the requests that do not set it come first in the batch.
"""

from __future__ import annotations

import pytest

from sglang_ascend_hybrid.integration import gdn_state_dtype as gsd
from sglang_ascend_hybrid.testing.launch_check import resolve_isolated

from ._families import config_dir

PREFIX = "sglang-ascend-hybrid: Qwen3_5ForConditionalGeneration keeps its SSM state in "
CASES = {  # name -> extra flags (order matters: see the module docstring)
    "default": [],
    "nextn": ["--speculative-algorithm", "NEXTN"],
    "bf16": ["--mamba-ssm-dtype", "bfloat16"],
    "bf16-nextn": ["--mamba-ssm-dtype", "bfloat16", "--speculative-algorithm", "NEXTN"],
}


@pytest.fixture(scope="module")
def results() -> dict[str, dict]:
    reqs = [dict(model_path=config_dir("qwen3_6-27b"), tp_size=8, attention_backend="ascend_hybrid",
                 load_plugins=True, extra_args=extra) for extra in CASES.values()]
    return dict(zip(CASES, resolve_isolated(reqs)))


def _lines(res: dict) -> list[str]:
    return [line for line in res["log_lines"] if line.startswith(PREFIX)]


def test_default_keeps_the_model_fp32_and_says_which_kernels_run(results):
    res = results["default"]
    assert res["ok"], res["error"]
    assert res["resolved"]["mamba_ssm_dtype"] is None  # nothing declared: SGLang reads the config
    (line,) = _lines(res)
    assert line.startswith(PREFIX + "float32 (from the model config's mamba_ssm_dtype)")
    assert "Triton chunk kernel" in line and "--mamba-ssm-dtype bfloat16" in line
    assert "Speculative verify" not in line


def test_speculative_run_names_the_verify_path(results):
    res = results["nextn"]
    assert res["ok"], res["error"]
    assert res["resolved"]["speculative_algorithm"] is not None
    (line,) = _lines(res)
    assert line.startswith(PREFIX + "float32")
    assert "Speculative verify (MTP): the plugin's torch verify path, fp32 compute and storage" in line


@pytest.mark.parametrize("name", ["bf16", "bf16-nextn"])
def test_explicit_bf16_is_kept_and_runs_the_fused_kernels(results, name):
    res = results[name]
    assert res["ok"], res["error"]
    assert res["resolved"]["mamba_ssm_dtype"] == "bfloat16"  # the user's setting, untouched
    (line,) = _lines(res)
    assert line.startswith(PREFIX + "bfloat16 (from --mamba-ssm-dtype)")
    assert "torch.ops.npu.chunk_gated_delta_rule" in line
    assert ("Speculative verify (MTP): torch.ops.npu.recurrent_gated_delta_rule" in line) == (name == "bf16-nextn")


@pytest.mark.parametrize("flag,config,env,expected", [
    (None, "float32", None, ("float32", "the model config's mamba_ssm_dtype")),
    ("bfloat16", "float32", None, ("bfloat16", "--mamba-ssm-dtype")),
    (None, "float32", "float16", ("float16", "SGLANG_MAMBA_SSM_DTYPE")),
    (None, None, None, ("float32", "SGLang default")),
    (None, "int8", None, ("float32", "SGLang default")),
])
def test_effective_dtype_follows_sglang_precedence(flag, config, env, expected):
    assert gsd.effective_dtype(flag, config, env) == expected


def test_fp32_on_ascend_950_keeps_the_fused_chunk_op():
    assert "fp32 states (Ascend 950)" in gsd.plan_state("float32", "x", chip="950").prefill
    assert "Triton" in gsd.plan_state("float32", "x", chip="A3").prefill
