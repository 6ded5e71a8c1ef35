"""``plan``'s reading of a config: layer kinds, layer-list lengths and the model dtype, as the
config classes SGLang builds for each family read them.

The unit tests state the rules (transformers' ``Lfm2Config``: ``full_attn_idxs`` when there is
no ``layer_types``; SGLang's ``Qwen3NextConfig``: ``full_attention_interval``, no default;
SGLang's ``ZayaConfig``: ``zaya_layers``); the last tests build the same configs with the
installed SGLang's ``get_config`` and compare, so the plugin's reading cannot drift from the
release it runs with.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from sglang_ascend_hybrid import cli
from sglang_ascend_hybrid import model_families as mf

CONFIGS = Path(__file__).parents[2] / "examples" / "configs"


def _cfg(name: str) -> dict:
    return json.loads((CONFIGS / name / "config.json").read_text())


def _edit(name: str, *edits) -> dict:
    """A copy of example ``name`` with ``edits``: (path tuple, value), value None deletes."""
    cfg = copy.deepcopy(_cfg(name))
    for path, value in edits:
        node = cfg
        for key in path[:-1]:
            node = node[key]
        if value is None:
            node.pop(path[-1], None)
        else:
            node[path[-1]] = value
    return cfg


def _split(cfg: dict) -> tuple[int, int, int]:
    s = mf.layer_split(cfg)
    return s.num_layers, s.full_attention, s.linear


def _plan_error(tmp_path, capsys, cfg) -> str:
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    code = cli.main(["plan", "--config", str(tmp_path)])
    out = capsys.readouterr()
    assert code == 2 and out.out == "", out
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sglang-ascend-hybrid plan: error: "), out.err
    return lines[0]


LFM2_IDXS = [2, 5, 8, 10, 12, 14]  # LFM2-1.2B's attention layers

# (id, config, expected (layers, full attention, linear))
CASES = [
    # LFM2: layer_types absent -> full_attn_idxs marks the attention layers (not Qwen's interval 4)
    ("lfm2_full_attn_idxs", _edit("lfm2-1.2b", (("layer_types",), None), (("full_attn_idxs",), LFM2_IDXS)),
     (16, 6, 10)),
    # ... and without either every layer is an attention layer (Lfm2Config's default)
    ("lfm2_neither", _edit("lfm2-1.2b", (("layer_types",), None)), (16, 16, 0)),
    ("lfm2_layer_types", _cfg("lfm2-1.2b"), (16, 6, 10)),
    # LFM2-VL: the text config's LFM2 rules
    ("lfm2_vl_full_attn_idxs", _edit("lfm2-vl-1.6b", (("text_config", "layer_types"), None),
                                     (("text_config", "full_attn_idxs"), LFM2_IDXS)), (16, 6, 10)),
    ("lfm2_moe_layer_types", _cfg("lfm2-8b-a1b"), (24, 6, 18)),
    # Qwen: full_attention_interval decides (SGLang's layers_block_type), layer_types is not read
    ("qwen3_next_interval", _cfg("qwen3-next-80b-a3b"), (48, 12, 36)),
    ("qwen3_next_interval_3", _edit("qwen3-next-80b-a3b", (("full_attention_interval",), 3)), (48, 16, 32)),
    ("qwen3_5_interval_2_over_layer_types", _edit("qwen3_6-27b", (("text_config", "full_attention_interval"), 2)),
     (64, 32, 32)),
    ("qwen3_5_without_layer_types", _edit("qwen3_6-27b", (("text_config", "layer_types"), None)), (64, 16, 48)),
    # ZAYA1: the zaya_layers list is the layer list, whatever num_hidden_layers says
    ("zaya_layers", _cfg("zaya1-base"), (80, 40, 40)),
    ("zaya_layers_over_num_hidden_layers", _edit("zaya1-base", (("num_hidden_layers",), 60)), (80, 40, 40)),
    ("zaya_without_list", _edit("zaya1-base", (("zaya_layers",), None), (("num_hidden_layers",), 7)), (7, 4, 4)),
]


@pytest.mark.parametrize("name,cfg,expected", CASES, ids=[c[0] for c in CASES])
def test_layer_split_follows_the_family_config_class(name, cfg, expected):
    assert _split(cfg) == expected


def test_plan_counts_lfm2_attention_layers_from_full_attn_idxs(tmp_path, capsys):
    cfg = _edit("lfm2-1.2b", (("layer_types",), None), (("full_attn_idxs",), LFM2_IDXS))
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert cli.main(["plan", "--config", str(tmp_path), "--tp", "1", "--json"]) == 0
    model = json.loads(capsys.readouterr().out)["model"]
    assert (model["layers"], model["full_attention_layers"], model["linear_layers"]) == (16, 6, 10)
    assert model["layer_kinds_from"] == "full_attn_idxs"


# (id, config, needles of the one-line error)
REFUSED = [
    ("layer_types_short", _edit("lfm2-1.2b", (("layer_types",), _cfg("lfm2-1.2b")["layer_types"][:10])),
     ["'layer_types' has 10 entries", "'num_hidden_layers' = 16"]),
    ("layer_types_long", _edit("lfm2-1.2b", (("layer_types",), _cfg("lfm2-1.2b")["layer_types"] + ["conv"])),
     ["'layer_types' has 17 entries", "'num_hidden_layers' = 16"]),
    ("qwen_layer_types_short", _edit("qwen3_6-27b", (("text_config", "layer_types"), ["linear_attention"] * 8)),
     ["'layer_types' has 8 entries", "'num_hidden_layers' = 64"]),
    ("lfm2_vl_layer_types_short", _edit("lfm2-vl-1.6b", (("text_config", "layer_types"), ["conv"] * 4)),
     ["'layer_types' has 4 entries", "'num_hidden_layers' = 16"]),
    ("lfm2_unknown_layer_kind", _edit("lfm2-1.2b", (("layer_types",), ["sliding_attention"] * 16)),
     ["'layer_types'", "'sliding_attention'", "'full_attention', 'conv', 'short_conv'"]),
    ("lfm2_idx_out_of_range", _edit("lfm2-1.2b", (("layer_types",), None), (("full_attn_idxs",), [2, 16])),
     ["'full_attn_idxs' = [2, 16]", "from 0 to 15", "got 16"]),
    ("lfm2_idx_not_int", _edit("lfm2-1.2b", (("layer_types",), None), (("full_attn_idxs",), ["2"])),
     ["'full_attn_idxs' = [\"2\"]", "layer indices"]),
    ("lfm2_moe_without_layer_types", _edit("lfm2-8b-a1b", (("layer_types",), None)),
     ["model_type 'lfm2_moe' lacks the field 'layer_types'"]),
    ("qwen_without_interval", _edit("qwen3-next-80b-a3b", (("full_attention_interval",), None)),
     ["lacks the field 'full_attention_interval'", "Qwen3NextConfig"]),
    ("qwen3_5_without_text_config", _edit("qwen3_6-27b", (("text_config",), None)),
     ["model_type 'qwen3_5' lacks the field 'text_config'"]),
    ("lfm2_vl_other_text_model", _edit("lfm2-vl-1.6b", (("text_config", "model_type"), "llama")),
     ["'text_config.model_type' = \"llama\"", "'lfm2'"]),
    ("zaya_unknown_code", _edit("zaya1-base", (("zaya_layers",), ["a", "m"])), ["'zaya_layers'", "layer codes"]),
    ("torch_dtype_float64", _edit("lfm2-1.2b", (("torch_dtype",), "float64")),
     ["'torch_dtype' = \"float64\"", "\"bfloat16\", \"float16\", \"half\", \"float32\", \"float\""]),
    ("torch_dtype_bf16_alias", _edit("qwen3-next-80b-a3b", (("torch_dtype",), "bf16")),
     ["'torch_dtype' = \"bf16\"", "expected one of"]),
    ("text_dtype_number", _edit("qwen3_6-27b", (("text_config", "dtype"), 5)), ["'dtype' = 5", "expected one of"]),
    ("mamba_ssm_dtype_bad", _edit("qwen3_6-27b", (("text_config", "mamba_ssm_dtype"), "fp32")),
     ["'mamba_ssm_dtype' = \"fp32\"", "\"float32\", \"bfloat16\", \"float16\""]),
]


@pytest.mark.parametrize("name,cfg,needles", REFUSED, ids=[c[0] for c in REFUSED])
def test_plan_refuses_with_one_line_naming_the_field(tmp_path, capsys, name, cfg, needles):
    line = _plan_error(tmp_path, capsys, cfg)
    for needle in needles:
        assert needle in line, (needle, line)


# (id, config, expected model dtype under --dtype auto)
DTYPES = [
    ("bf16", _cfg("qwen3_6-27b"), "bfloat16"),
    ("text_config_over_outer", _edit("qwen3_6-27b", (("text_config", "torch_dtype"), "float16")), "float16"),
    ("dtype_over_torch_dtype", _edit("qwen3_6-27b", (("text_config", "dtype"), "float16")), "float16"),
    # SGLang's Qwen3_5Config does not hand the outer dtype to its text config: none -> float32 -> fp16
    ("qwen3_5_outer_not_read", _edit("qwen3_6-27b", (("text_config", "torch_dtype"), None)), "float16"),
    # transformers' Lfm2VlConfig does
    ("lfm2_vl_outer_read", _edit("lfm2-vl-1.6b", (("text_config", "torch_dtype"), None)), "bfloat16"),
    # LFM2.5-VL-1.6B's published config (transformers 5 format) states `dtype`, never `torch_dtype`
    ("lfm2_5_vl_text_dtype", _edit("lfm2_5-vl-1.6b", (("text_config", "dtype"), "float16")), "float16"),
    ("float32_runs_in_fp16", _edit("lfm2-1.2b", (("torch_dtype",), "float32")), "float16"),
    ("absent_runs_in_fp16", _edit("lfm2-1.2b", (("torch_dtype",), None)), "float16"),
    ("half", _edit("zaya1-base", (("torch_dtype",), "half")), "float16"),
]


@pytest.mark.parametrize("name,cfg,expected", DTYPES, ids=[c[0] for c in DTYPES])
def test_model_dtype_is_what_sglang_runs_with_dtype_auto(name, cfg, expected):
    assert mf.model_dtype(cfg)[0] == expected


def test_family_table_is_the_one_source_of_the_lists():
    from sglang_ascend_hybrid.integration.launch import decision

    assert mf.GDN_MODEL_TYPES | mf.SHORT_CONV_MODEL_TYPES == set(mf.BY_MODEL_TYPE)
    assert decision.GDN_ARCHS == mf.GDN_ARCHS and decision.SHORT_CONV_ARCHS == mf.SHORT_CONV_ARCHS
    for f in mf.FAMILIES:
        assert f.kind in ("gdn", "short_conv") and f.layers in ("interval", "lfm2", "lfm2_moe", "zaya")
        assert f.architectures and f.config_class.startswith("sglang.srt.configs.")


# ------------------------------------------------------------------ the installed SGLang agrees

def _sglang_config(tmp_path, cfg):
    pytest.importorskip("sglang")
    from sglang.srt.utils.hf_transformers_utils import get_config

    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return get_config(str(tmp_path), trust_remote_code=False)


def _sglang_split(hf) -> tuple[int, int, int]:
    """(layers, attention-pool layers, state-pool layers) as SGLang sizes its KV and state pools."""
    text = hf.get_text_config() if hasattr(hf, "get_text_config") else hf
    holder = hf if hasattr(hf, "full_attention_layer_ids") else text
    return text.num_hidden_layers, len(holder.full_attention_layer_ids), len(holder.linear_layer_ids)


@pytest.mark.parametrize("name,cfg,expected", CASES, ids=[c[0] for c in CASES])
def test_sglang_config_classes_give_the_same_split(tmp_path, name, cfg, expected):
    hf = _sglang_config(tmp_path, cfg)
    assert type(hf).__module__.startswith("sglang.srt.configs."), type(hf)
    assert _sglang_split(hf) == expected == _split(cfg)


@pytest.mark.parametrize("name", ["qwen_without_interval", "qwen_layer_types_short"])
def test_sglang_refuses_what_plan_refuses(tmp_path, name):
    cfg = next(c for n, c, _ in REFUSED if n == name)
    with pytest.raises(Exception):
        hf = _sglang_config(tmp_path, cfg)
        _sglang_split(hf)


@pytest.mark.parametrize("name,cfg,expected", DTYPES, ids=[c[0] for c in DTYPES])
def test_sglang_runs_the_same_dtype(tmp_path, name, cfg, expected):
    hf = _sglang_config(tmp_path, cfg)
    from sglang.srt.configs.model_config import _get_and_verify_dtype

    text = hf.get_text_config() if hasattr(hf, "get_text_config") else hf
    assert str(_get_and_verify_dtype(text, "auto")).replace("torch.", "") == expected == mf.model_dtype(cfg)[0]
