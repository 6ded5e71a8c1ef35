"""The config parser of the family table field by field (``model_families.facts`` and its helpers):
bounds, defaults, which config (text or outer) a field is read from, and the words of each error."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from sglang_ascend_hybrid import model_families as mf

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "configs"


def _example(name: str) -> dict:
    return json.loads((EXAMPLES / name / "config.json").read_text(encoding="utf-8"))


# ------------------------------------------------------------------ integer fields


def test_an_integer_field_takes_its_minimum_and_names_its_bounds_when_outside():
    assert mf._int({"x": 1}, "x") == 1
    assert mf._int({"x": 4.0}, "x") == 4
    with pytest.raises(mf.ConfigError, match=re.escape(f"config field 'x' = 0: expected an integer from 1 to "
                                                       f"{mf.MAX_SIZE}")):
        mf._int({"x": 0}, "x")
    with pytest.raises(mf.ConfigError, match=re.escape("config field 'x' = true: expected an integer from 1 to 8")):
        mf._int({"x": True}, "x", maximum=8)


def test_a_missing_integer_field_without_a_default_names_the_model_type_and_the_field():
    with pytest.raises(mf.ConfigError, match=r"^config of model_type 'lfm2' lacks the field 'x'$"):
        mf._int({"model_type": "lfm2"}, "x")
    assert mf._int({}, "x", 7) == 7


@pytest.mark.parametrize("value,shown", [
    ("a" * 58, json.dumps("a" * 58)),                      # 60 characters with the quotes: whole
    ("a" * 59, json.dumps("a" * 59)[:57] + "..."),         # 61: cut to 57 and an ellipsis
    ({1, 2}, "{1, 2}"),                                    # not JSON: its repr
])
def test_values_in_messages_are_shown_as_json_and_cut_at_60_characters(value, shown):
    assert mf._show(value) == shown


# ------------------------------------------------------------------ layer split


def test_zaya_layers_list_gives_the_split_and_its_source():
    split = mf._layer_split(mf.BY_MODEL_TYPE["zaya"], {"zaya_layers": ["a", 1, "a", 2, "a"]})
    assert split == mf.LayerSplit(5, 3, 3, "zaya_layers")


@pytest.mark.parametrize("n,full", [(4, 2), (5, 3)])
def test_zaya_without_a_layer_list_counts_every_even_layer_as_integers(n, full):
    split = mf._layer_split(mf.BY_MODEL_TYPE["zaya"], {"num_hidden_layers": n})
    assert split.full_attention == full and type(split.full_attention) is int


@pytest.mark.parametrize("layers", [["a", "m"], "aa"])
def test_bad_zaya_layers_name_the_layer_codes(layers):
    with pytest.raises(mf.ConfigError, match=re.escape("expected a list of layer codes ('a' or an integer)")):
        mf._layer_split(mf.BY_MODEL_TYPE["zaya"], {"zaya_layers": layers})


def test_full_attention_indices_start_at_layer_zero():
    split = mf._layer_split(mf.BY_MODEL_TYPE["lfm2"], {"num_hidden_layers": 4, "full_attn_idxs": [0, 3]})
    assert split == mf.LayerSplit(4, 2, 2, "full_attn_idxs")
    with pytest.raises(mf.ConfigError, match=r"from 0 to 3 \('num_hidden_layers' = 4; got -1, 4\)"):
        mf._layer_split(mf.BY_MODEL_TYPE["lfm2"], {"num_hidden_layers": 4, "full_attn_idxs": [-1, 4]})


# ------------------------------------------------------------------ dtypes: which config says them


def test_a_top_level_float32_config_runs_in_float16_and_says_the_field_without_a_prefix():
    cfg = _example("lfm2-1.2b")
    cfg.pop("dtype", None)
    cfg["torch_dtype"] = "float32"
    facts = mf.facts(cfg)
    assert facts.dtype == "float16"
    assert facts.dtype_from == "torch_dtype float32: SGLang's --dtype auto runs float32 models in float16"


def test_a_text_config_dtype_is_named_with_its_prefix_and_the_outer_one_without():
    cfg = _example("lfm2-vl-1.6b")
    for c in (cfg, cfg["text_config"]):
        c.pop("dtype", None)
        c.pop("torch_dtype", None)
    cfg["text_config"]["torch_dtype"] = "float32"
    assert mf.facts(cfg).dtype_from.startswith("text_config.torch_dtype float32:")
    cfg["text_config"].pop("torch_dtype")
    cfg["torch_dtype"] = "float32"  # LFM2-VL: the outer config's when the text config has none
    assert mf.facts(cfg).dtype_from.startswith("torch_dtype float32:")


def test_the_ssm_state_dtype_comes_from_the_outer_config_when_the_text_config_lacks_it():
    cfg = _example("qwen3_5-27b")
    assert "text_config" in cfg
    cfg["text_config"].pop("mamba_ssm_dtype", None)
    cfg["mamba_ssm_dtype"] = "float32"
    assert mf.facts(cfg).config_ssm_dtype == "float32"
    cfg["text_config"]["mamba_ssm_dtype"] = "bfloat16"  # the text config's wins where it has the field
    assert mf.facts(cfg).config_ssm_dtype == "bfloat16"


# ------------------------------------------------------------------ GDN heads and the short-conv geometry


def test_gdn_key_heads_are_bounded_by_the_head_limit_and_the_value_dim_defaults_to_128():
    cfg = _example("qwen3_5-27b")
    t = cfg["text_config"]
    t.pop("linear_value_head_dim", None)
    assert mf.facts(cfg).gdn.value_head_dim == 128
    t["linear_num_key_heads"] = t["linear_num_value_heads"] = mf.MAX_HEADS + 1
    with pytest.raises(mf.ConfigError, match=f"'linear_num_value_heads' = {mf.MAX_HEADS + 1}: expected an integer "
                                             f"from 1 to {mf.MAX_HEADS}"):
        mf.facts(cfg)
    t["linear_num_value_heads"] = 16
    with pytest.raises(mf.ConfigError, match=f"'linear_num_key_heads' = {mf.MAX_HEADS + 1}: expected an integer "
                                             f"from 1 to {mf.MAX_HEADS}"):
        mf.facts(cfg)


def _zaya(**fields) -> dict:
    cfg = _example("zaya1-base")
    cfg.update(fields)
    return cfg


def test_zaya_cca_width_adds_both_time_windows():
    assert mf.facts(_zaya(cca_time0=3, cca_time1=4)).short_conv.width == 2 + 3 + 1
    cfg = _zaya(cca_time0=3)
    cfg.pop("cca_time1", None)
    assert mf.facts(cfg).short_conv.width == 2 + 1 + 1  # cca_time1 defaults to 2


def test_zaya_channels_use_an_explicit_head_dim():
    cfg = _zaya()
    heads, kv, hidden = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["hidden_size"]
    cfg["head_dim"] = hidden // heads + 8
    assert mf.facts(cfg).short_conv.channels == (heads + kv) * (hidden // heads + 8)


@pytest.mark.parametrize("example,name", [("lfm2-1.2b", "hidden_size"), ("zaya1-base", "CCA channels")])
def test_a_conv_geometry_that_does_not_split_names_its_channels(example, name):
    facts = mf.facts(_example(example))
    tp = next(t for t in range(3, 64) if facts.short_conv.channels % t)
    with pytest.raises(mf.TPSplitError, match=rf"^{name} \({facts.short_conv.channels}\) is not divisible by tp={tp}$"):
        facts.short_conv_layout(tp)


def test_the_example_configs_parse_unchanged_by_a_deep_copy():
    for p in sorted(EXAMPLES.glob("*/config.json")):
        cfg = json.loads(p.read_text(encoding="utf-8"))
        assert mf.facts(copy.deepcopy(cfg)) == mf.facts(cfg)
