"""``sglang-ascend-hybrid rehearse``: the shrunk model keeps what decides the kernels; one rehearsal of
an example config runs SGLang's real Engine with operator flags on the emulated device."""

from __future__ import annotations

import io
import json
import os

import pytest

from sglang_ascend_hybrid import cli
from sglang_ascend_hybrid.testing.runtime import rehearse

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "configs")


def _example(name: str) -> dict:
    with open(os.path.join(EXAMPLES, name, "config.json"), encoding="utf-8") as fh:
        return json.load(fh)


@pytest.mark.base_release_only
def test_shrunk_gdn_config_keeps_heads_head_dims_and_one_period_of_layers():
    real = _example("qwen3_6-27b")
    tiny = rehearse.shrink_config(real)
    text, real_text = tiny["text_config"], real["text_config"]
    for name in ("linear_num_value_heads", "linear_num_key_heads", "linear_key_head_dim", "linear_value_head_dim",
                 "num_attention_heads", "num_key_value_heads", "head_dim", "linear_conv_kernel_dim"):
        assert text[name] == real_text[name], name
    assert tiny["architectures"] == real["architectures"]
    assert text["num_hidden_layers"] == real_text["full_attention_interval"]
    assert text["layer_types"] == real_text["layer_types"][:text["num_hidden_layers"]]
    assert {"linear_attention", "full_attention"} <= set(text["layer_types"])
    assert text["hidden_size"] < real_text["hidden_size"] and text["vocab_size"] == rehearse.TINY_VOCAB
    assert tiny["language_model_only"] is True  # token-id requests: no image processor to load
    assert tiny["vision_config"]["out_hidden_size"] == text["hidden_size"]


@pytest.mark.base_release_only
def test_shrunk_lfm2_config_keeps_heads_and_every_layer_kind():
    real = _example("lfm2-1.2b")
    tiny = rehearse.shrink_config(real)
    assert tiny["num_attention_heads"] == real["num_attention_heads"]
    assert tiny["num_key_value_heads"] == real["num_key_value_heads"]
    assert tiny["conv_L_cache"] == real["conv_L_cache"]
    assert tiny["hidden_size"] % tiny["num_attention_heads"] == 0
    assert set(tiny["layer_types"]) == set(real["layer_types"])
    assert tiny["layer_types"] == real["layer_types"][:tiny["num_hidden_layers"]]


@pytest.mark.base_release_only
def test_rehearsal_flags_keep_the_operators_and_fill_the_rest():
    flags = rehearse.rehearsal_flags(["--tp-size", "2", "--max-total-tokens=8192"])
    assert flags[:3] == ["--tp-size", "2", "--max-total-tokens=8192"]
    assert flags.count("--max-total-tokens") == 0 and "--device" in flags and "--skip-tokenizer-init" in flags


def test_unreadable_config_fails_in_one_message(tmp_path, capsys):
    assert cli.main(["rehearse", "--model-path", str(tmp_path), "--tp-size", "2"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("sglang-ascend-hybrid rehearse: --model-path") and "\n" not in err


def test_unknown_arguments_are_refused_outside_rehearse(capsys):
    with pytest.raises(SystemExit):
        cli.main(["plan", "--config", EXAMPLES, "--tp-size", "2"])
    assert "unrecognized arguments: --tp-size 2" in capsys.readouterr().err


@pytest.mark.runtime
@pytest.mark.base_release_only
@pytest.mark.xdist_group("runtime-rehearse")
def test_rehearsal_of_lfm2_serves_and_matches_transformers():
    out = io.StringIO()
    assert rehearse.rehearse(os.path.join(EXAMPLES, "lfm2-1.2b"), ["--tp-size", "1", "--disable-cuda-graph"],
                             out) == 0
    text = out.getvalue()
    assert "Lfm2Config on NPU uses the Ascend short-conv backend" in text
    assert "causal_conv1d_fn: npu_aclnn" in text  # the bf16 checkpoint's prefill on the NPU conv kernel
    assert "cached 256" in text  # the third request hit the radix cache
    assert "transformers: matched" in text
