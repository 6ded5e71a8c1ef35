"""What a Hugging Face ``config.json`` means for this plugin: model family,
GDN head layout, short-conv geometry, full-attention layers, model dtype, per TP rank.

:data:`FAMILIES` is the one table of the model types served (kind, architectures, the
config class SGLang builds and its layer rule); the model-type and architecture lists
derive from it.  The rules are those of the config classes SGLang builds (read from
their source; ``tests/tools/test_plan_layer_kinds.py`` compares them with the installed
release), as pure functions on the JSON dict (no transformers / SGLang import), shared
by ``plan`` and the launch-resolution helpers.

:func:`facts` is the one parse of a config: it reads the text config and the dtype once
and returns :class:`ModelFacts`, which holds everything downstream needs (the family, the
layer split, the heads, the model dtype, the config's SSM state dtype, the GDN or short-conv
totals); the per-rank layouts are its methods (:meth:`ModelFacts.gdn_layout`,
:meth:`ModelFacts.short_conv_layout`).

Every field read is type- and range-checked: a malformed config (a null, zero,
negative, fractional or non-numeric count, a non-list layer list, value heads
not a multiple of key heads) raises :class:`ConfigError` naming the field, its
value and what was expected, never another exception.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional


@dataclass(frozen=True)
class Family:
    """One model type this plugin serves, and how SGLang reads its config.

    ``layers`` names the rule that splits the layers into full-attention and linear (GDN /
    short-conv) ones, as the config class SGLang builds for this model type does
    (``config_class``; :func:`layer_split`).  ``text`` (composite configs): the model type of
    the ``text_config`` the class builds, where every text field is read (the outer fields are
    not); ``text_dtype_from_outer``: a text config without a dtype takes the outer one (what
    transformers does for LFM2-VL; SGLang's Qwen3.5 classes do not).
    """

    model_type: str
    kind: str                     # "gdn" | "short_conv"
    architectures: tuple          # hf_config.architectures[0] values SGLang serves it as
    layers: str                   # "interval" | "lfm2" | "lfm2_moe" | "zaya"
    config_class: str
    text: Optional[str] = None
    text_dtype_from_outer: bool = False
    # Who writes the mamba extra_buffer (prefix cache) snapshots on NPU: "sglang" (its GDN
    # backend), "plugin" (the Ascend short-conv sidecar), "" (nobody yet: no prefix caching).
    radix_snapshots: str = ""


FAMILIES = (
    Family("qwen3_next", "gdn", ("Qwen3NextForCausalLM",), "interval",
           "sglang.srt.configs.qwen3_next.Qwen3NextConfig", radix_snapshots="sglang"),
    Family("qwen3_5", "gdn", ("Qwen3_5ForConditionalGeneration",), "interval",
           "sglang.srt.configs.qwen3_5.Qwen3_5Config", text="qwen3_5_text", radix_snapshots="sglang"),
    Family("qwen3_5_moe", "gdn", ("Qwen3_5MoeForConditionalGeneration",), "interval",
           "sglang.srt.configs.qwen3_5.Qwen3_5MoeConfig", text="qwen3_5_moe_text", radix_snapshots="sglang"),
    Family("qwen3_5_text", "gdn", ("Qwen3_5ForCausalLM",), "interval",
           "sglang.srt.configs.qwen3_5.Qwen3_5TextConfig", radix_snapshots="sglang"),
    Family("qwen3_5_moe_text", "gdn", ("Qwen3_5MoeForCausalLM",), "interval",
           "sglang.srt.configs.qwen3_5.Qwen3_5MoeTextConfig", radix_snapshots="sglang"),
    Family("lfm2", "short_conv", ("Lfm2ForCausalLM",), "lfm2", "sglang.srt.configs.lfm2.Lfm2Config",
           radix_snapshots="plugin"),
    Family("lfm2_moe", "short_conv", ("Lfm2MoeForCausalLM",), "lfm2_moe",
           "sglang.srt.configs.lfm2_moe.Lfm2MoeConfig", radix_snapshots="plugin"),
    Family("lfm2_vl", "short_conv", ("Lfm2VlForConditionalGeneration",), "lfm2",
           "sglang.srt.configs.lfm2_vl.Lfm2VlConfig", text="lfm2", text_dtype_from_outer=True),
    Family("zaya", "short_conv", ("ZayaForCausalLM",), "zaya", "sglang.srt.configs.zaya.ZayaConfig",
           radix_snapshots="plugin"),
)
BY_MODEL_TYPE = {f.model_type: f for f in FAMILIES}
GDN_MODEL_TYPES = frozenset(f.model_type for f in FAMILIES if f.kind == "gdn")
SHORT_CONV_MODEL_TYPES = frozenset(f.model_type for f in FAMILIES if f.kind == "short_conv")
GDN_ARCHS = frozenset(a for f in FAMILIES if f.kind == "gdn" for a in f.architectures)
SHORT_CONV_ARCHS = frozenset(a for f in FAMILIES if f.kind == "short_conv" for a in f.architectures)
# Architectures whose prefix-cache snapshots the plugin writes (SGLang's extra_buffer gate lacks them).
RADIX_SNAPSHOTS_BY_ARCH = {a: f.radix_snapshots for f in FAMILIES for a in f.architectures}
PLUGIN_SNAPSHOT_ARCHS = frozenset(a for a, who in RADIX_SNAPSHOTS_BY_ARCH.items() if who == "plugin")


class ConfigError(ValueError):
    """A config.json this plugin cannot interpret (bad JSON, unrelated model, missing fields)."""


class TPSplitError(ConfigError):
    """The model is fine but cannot be split over this TP size."""


@dataclass(frozen=True)
class GDNLayout:
    value_heads: int   # per rank (in ModelFacts.gdn: the totals)
    key_heads: int     # per rank (in ModelFacts.gdn: the totals)
    head_dim: int
    value_head_dim: int


@dataclass(frozen=True)
class ShortConvLayout:
    kind: str          # "lfm2_short_conv" | "zaya_cca"
    width: int         # conv kernel width W (state keeps W - 1 inputs)
    channels: int      # per rank conv channels (in ModelFacts.short_conv: the total)
    extra_state_channels: int | None = None  # ZAYA1 prev-hidden state (replicated)


# What the conv channels of each short-conv kind are split over TP as (the TPSplitError's word).
_CHANNELS_NAME = {"zaya_cca": "CCA channels", "lfm2_short_conv": "hidden_size"}


@dataclass(frozen=True)
class ModelFacts:
    """Everything the plugin reads from one config.json (:func:`facts`, its one parse)."""

    model_type: str
    family: str        # "gdn" | "short_conv"
    num_layers: int
    full_attention_layers: int
    linear_layers: int
    attention_heads: int   # global
    kv_heads: int          # global
    layer_kinds_from: str  # the config fields the layer split came from (:func:`layer_split`)
    dtype: str             # the model dtype SGLang runs with under --dtype auto (:func:`model_dtype`)
    dtype_from: str
    architectures: tuple   # the config's ``architectures`` (empty when absent / null)
    config_ssm_dtype: Optional[str]  # GDN: the config's mamba_ssm_dtype (None when absent / null);
    #                                  short-conv: None (not read, as SGLang does not)
    gdn: Optional[GDNLayout]                # GDN: the totals (the layout at TP 1); short-conv: None
    short_conv: Optional[ShortConvLayout]   # short-conv: the totals (the layout at TP 1); GDN: None

    @property
    def architecture(self) -> str:
        """``architectures[0]``, "" when there is none (what the launch decisions look up)."""
        return self.architectures[0] if self.architectures else ""

    def gdn_layout(self, tp: int) -> GDNLayout:
        """The GDN heads per rank at ``tp``, or :class:`TPSplitError` naming the heads that do not split."""
        g = self.gdn
        if g is None:
            raise ConfigError(f"model_type {self.model_type!r} is not a GDN family")
        return GDNLayout(
            value_heads=per_rank(g.value_heads, tp, "linear_num_value_heads"),
            key_heads=per_rank(g.key_heads, tp, "linear_num_key_heads"),
            head_dim=g.head_dim,
            value_head_dim=g.value_head_dim,
        )

    def short_conv_layout(self, tp: int) -> ShortConvLayout:
        """The conv geometry per rank at ``tp``, or :class:`TPSplitError` when the channels do not split."""
        s = self.short_conv
        if s is None:
            raise ConfigError(f"model_type {self.model_type!r} is not a short-conv family")
        return ShortConvLayout(s.kind, s.width, per_rank(s.channels, tp, _CHANNELS_NAME[s.kind]),
                               extra_state_channels=s.extra_state_channels)


def load_config(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    if not p.is_file():
        raise ConfigError(f"no config.json at {path}")
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {p}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p} is not valid JSON: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{p} is not valid JSON: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{p} is not a config.json: nested too deeply to read") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{p} does not hold a JSON object")
    return data


def _family_of(cfg: dict[str, Any]) -> Optional[Family]:
    mt = cfg.get("model_type")
    return BY_MODEL_TYPE.get(mt) if isinstance(mt, str) else None


def text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """The dict the text fields are read from: ``text_config`` for a composite family (its
    config class builds the text model from it and reads no outer text field), the config itself
    otherwise."""
    fam = _family_of(cfg)
    if fam is None or fam.text is None:
        return cfg
    inner = cfg.get("text_config")
    if inner is None:
        raise ConfigError(f"config of model_type {fam.model_type!r} lacks the field 'text_config' (its config class "
                          f"builds the text model from it)")
    if not isinstance(inner, dict):
        raise ConfigError(f"config field 'text_config' = {_show(inner)}: expected a JSON object")
    merged = dict(inner)
    if fam.model_type == "lfm2_vl" and merged.get("model_type", fam.text) != fam.text:
        # Lfm2VlConfig builds the text config of its model_type; SGLang's LFM2-VL runs Lfm2ForCausalLM on it
        raise ConfigError(f"config field 'text_config.model_type' = {_show(merged['model_type'])}: expected "
                          f"{fam.text!r} (SGLang's LFM2-VL runs the LFM2 text model)")
    merged["model_type"] = fam.text
    merged["_outer_model_type"] = fam.model_type
    return merged


def _need(cfg: dict[str, Any], key: str) -> Any:
    if key not in cfg:
        raise ConfigError(f"config of model_type {cfg.get('_outer_model_type') or cfg.get('model_type')!r} "
                          f"lacks the field {key!r}")
    return cfg[key]


_MISSING = object()


def _show(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, (dict, list, str, int, float, bool, type(None))) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# Upper bounds far above any real model, so a typo cannot make plan loop for hours.
MAX_HEADS = 4096
MAX_SIZE = 1 << 20


def _int(t: dict[str, Any], key: str, default: Any = _MISSING, minimum: int = 1,
         maximum: int = MAX_SIZE) -> int:
    """Field ``key`` as an integer in [minimum, maximum] (``default`` when absent), else ConfigError."""
    if key not in t:
        if default is _MISSING:
            _need(t, key)
        return default
    value = t[key]
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise ConfigError(f"config field {key!r} = {_show(t[key])}: expected an integer from {minimum} "
                          f"to {maximum}")
    return value


def _list(t: dict[str, Any], key: str, of: tuple = (str,), what: str = "strings") -> list | None:
    """Field ``key`` as a list of ``of`` items, or None when absent / null."""
    value = t.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(x, of) and not isinstance(x, bool) for x in value):
        raise ConfigError(f"config field {key!r} = {_show(value)}: expected a list of {what}")
    return value


def model_type(cfg: dict[str, Any]) -> str:
    mt = cfg.get("model_type")
    if not isinstance(mt, str):
        raise ConfigError("config.json has no model_type")
    return mt


def family(cfg: dict[str, Any]) -> str:
    mt = model_type(cfg)
    fam = BY_MODEL_TYPE.get(mt)
    if fam is None:
        raise ConfigError(
            f"model_type {mt!r} is not a family this plugin serves "
            f"(GDN: {', '.join(sorted(GDN_MODEL_TYPES))}; short-conv: {', '.join(sorted(SHORT_CONV_MODEL_TYPES))})"
        )
    return fam.kind


def _is_zaya(t: dict[str, Any]) -> bool:
    return "zaya" in (t.get("model_type"), t.get("_outer_model_type"))


# LFM2 layer kinds: SGLang's Lfm2Config / Lfm2MoeConfig count "full_attention" as attention layers and
# "conv" / "short_conv" as conv layers (their conv-state pool); its model builds a conv block for every
# non-attention layer, so any other kind would be a conv block without a state slot.
LFM2_LAYER_KINDS = ("full_attention", "conv", "short_conv")


@dataclass(frozen=True)
class LayerSplit:
    num_layers: int
    full_attention: int
    linear: int
    source: str        # the fields the split came from


def _layer_types(t: dict[str, Any], n: int, kinds: Optional[tuple] = None) -> Optional[list]:
    """``layer_types`` as a list of ``n`` strings (of ``kinds`` when given), or None when absent / null."""
    types = _list(t, "layer_types")
    if types is None:
        return None
    if len(types) != n:
        raise ConfigError(f"config field 'layer_types' has {len(types)} entries and 'num_hidden_layers' = {n}: "
                          "expected one layer type per hidden layer")
    if kinds is not None:
        bad = sorted({x for x in types if x not in kinds})
        if bad:
            raise ConfigError(f"config field 'layer_types' = {_show(types)}: expected entries from "
                              f"{', '.join(repr(k) for k in kinds)} (got {', '.join(repr(x) for x in bad)})")
    return types


def layer_split(cfg: dict[str, Any]) -> LayerSplit:
    """Full-attention and linear layers as SGLang's config class of the family counts them:

    * Qwen3-Next / Qwen3.5 (``interval``): SGLang's ``Qwen3NextConfig.layers_block_type`` -- layer
      ``i`` is full attention when ``(i + 1) % full_attention_interval == 0``; the field has no
      default there (the class fails without it) and ``layer_types`` is not read beyond
      transformers' check that it has one entry per layer;
    * LFM2 and LFM2-VL's text config (``lfm2``): transformers' ``Lfm2Config`` -- ``layer_types``
      when given, else ``full_attn_idxs`` (default: every layer) marks the attention layers;
    * LFM2-MoE (``lfm2_moe``): ``Lfm2MoeConfig`` has no default for ``layer_types``;
    * ZAYA1 (``zaya``): SGLang's ``ZayaConfig`` -- a non-empty ``zaya_layers`` is the layer list
      (``"a"``: a CCA layer, an integer: an MoE layer) and its length the layer count, else every
      even layer of ``num_hidden_layers`` is a CCA layer.  CCA layers are both the attention and
      the conv-state layers.
    """
    return _layer_split(BY_MODEL_TYPE[model_type(cfg)], text_config(cfg))


def _layer_split(fam: Family, t: dict[str, Any]) -> LayerSplit:
    """:func:`layer_split` of a config of family ``fam`` whose text fields are ``t``."""
    if fam.layers == "zaya":
        zl = _list(t, "zaya_layers", (str, int), "layer codes ('a' or an integer)")
        if zl and any(isinstance(x, str) and x != "a" for x in zl):
            raise ConfigError(f"config field 'zaya_layers' = {_show(zl)}: expected a list of layer codes "
                              "('a' or an integer)")
        if zl:
            full = sum(1 for x in zl if x == "a")
            return LayerSplit(len(zl), full, full, "zaya_layers")
        n = _int(t, "num_hidden_layers")
        full = (n + 1) // 2
        return LayerSplit(n, full, full, "num_hidden_layers (ZayaConfig: every even layer is a CCA layer)")
    n = _int(t, "num_hidden_layers")
    if fam.layers == "interval":
        _layer_types(t, n)
        if "full_attention_interval" not in t:
            raise ConfigError(f"config of model_type {fam.model_type!r} lacks the field 'full_attention_interval' "
                              "(SGLang's Qwen3NextConfig derives the layer kinds from it; it does not read "
                              "layer_types)")
        interval = _int(t, "full_attention_interval")
        full = n // interval
        return LayerSplit(n, full, n - full, "full_attention_interval")
    types = _layer_types(t, n, LFM2_LAYER_KINDS)
    if types is not None:
        full = sum(1 for x in types if x == "full_attention")
        return LayerSplit(n, full, n - full, "layer_types")
    if fam.layers == "lfm2_moe":
        raise ConfigError(f"config of model_type {fam.model_type!r} lacks the field 'layer_types' "
                          "(Lfm2MoeConfig has no default for it)")
    idxs = _list(t, "full_attn_idxs", (int,), "layer indices")
    if idxs is None:
        return LayerSplit(n, n, 0, "full_attn_idxs default (Lfm2Config: every layer is an attention layer)")
    bad = sorted({i for i in idxs if not 0 <= i < n})
    if bad:
        raise ConfigError(f"config field 'full_attn_idxs' = {_show(idxs)}: expected layer indices from 0 to {n - 1} "
                          f"('num_hidden_layers' = {n}; got {', '.join(map(str, bad))})")
    full = len(set(idxs))
    return LayerSplit(n, full, n - full, "full_attn_idxs")


# SGLang's model dtype names (sglang/srt/configs/model_config.py _STR_DTYPE_TO_TORCH_DTYPE) and what
# --dtype auto runs a model of that config dtype in (_get_and_verify_dtype: float32 -> float16).
CONFIG_DTYPES = {"bfloat16": "bfloat16", "float16": "float16", "half": "float16", "float32": "float32",
                 "float": "float32"}
SSM_DTYPES = ("float32", "bfloat16", "float16")  # sglang/srt/configs/mamba_utils.py mamba2_state_dtype


def _config_dtype(t: dict[str, Any]) -> tuple[Optional[str], Optional[str]]:
    """(value, field) of the dtype a config states: ``dtype`` over ``torch_dtype`` (transformers);
    both checked when present."""
    found = (None, None)
    for key in ("torch_dtype", "dtype"):
        value = t.get(key)
        if value is None:
            continue
        if not isinstance(value, str) or value not in CONFIG_DTYPES:
            raise ConfigError(f"config field {key!r} = {_show(value)}: expected one of "
                              f"{', '.join(json.dumps(k) for k in CONFIG_DTYPES)} or null")
        found = (value, key)
    return found


def model_dtype(cfg: dict[str, Any]) -> tuple[str, str]:
    """The dtype SGLang runs the model in with ``--dtype auto``, and where it comes from: the text
    config's ``dtype`` / ``torch_dtype`` (LFM2-VL: else the outer one), a float32 or absent one
    running in float16 (SGLang's ``_get_and_verify_dtype``).  :func:`facts` reads it too
    (``dtype`` / ``dtype_from``)."""
    return _model_dtype(BY_MODEL_TYPE[model_type(cfg)], cfg, text_config(cfg))


def _model_dtype(fam: Family, cfg: dict[str, Any], t: dict[str, Any]) -> tuple[str, str]:
    value, key = _config_dtype(t)
    where = "text_config." if t is not cfg else ""
    if value is None and fam.text_dtype_from_outer and t is not cfg:
        value, key = _config_dtype(cfg)
        where = ""
    if value is None:
        return "float16", "no dtype in the config: SGLang's --dtype auto runs it in float16"
    dtype = CONFIG_DTYPES[value]
    if dtype == "float32":
        return "float16", f"{where}{key} {value}: SGLang's --dtype auto runs float32 models in float16"
    return dtype, f"{where}{key}"


def _mamba_ssm_dtype(cfg: dict[str, Any], t: dict[str, Any]) -> Optional[str]:
    """The config's ``mamba_ssm_dtype`` (SGLang's ``mamba2_state_dtype``: the text config's when it has
    the field, else the outer one), None when absent or null."""
    src = t if t is not cfg and "mamba_ssm_dtype" in t else cfg
    value = src.get("mamba_ssm_dtype")
    if value is not None and value not in SSM_DTYPES:
        raise ConfigError(f"config field 'mamba_ssm_dtype' = {_show(value)}: expected one of "
                          f"{', '.join(json.dumps(k) for k in SSM_DTYPES)} or null")
    return value


def _gdn_totals(t: dict[str, Any]) -> GDNLayout:
    hv = _int(t, "linear_num_value_heads", maximum=MAX_HEADS)
    hk = _int(t, "linear_num_key_heads", maximum=MAX_HEADS)
    if hv % hk:
        raise ConfigError(f"config fields linear_num_value_heads = {hv}, linear_num_key_heads = {hk}: "
                          "expected the value heads to be a multiple of the key heads")
    return GDNLayout(value_heads=hv, key_heads=hk, head_dim=_int(t, "linear_key_head_dim", 128),
                     value_head_dim=_int(t, "linear_value_head_dim", 128))


def _short_conv_totals(t: dict[str, Any]) -> ShortConvLayout:
    if _is_zaya(t):
        heads = _int(t, "num_attention_heads", maximum=MAX_HEADS)
        kv_heads = _int(t, "num_key_value_heads", maximum=MAX_HEADS)
        hidden = _int(t, "hidden_size")
        if t.get("head_dim") is not None:
            head_dim = _int(t, "head_dim")
        elif hidden // heads < 1:
            raise ConfigError(f"config fields hidden_size = {hidden}, num_attention_heads = {heads}: expected "
                              "hidden_size >= num_attention_heads (head_dim is hidden_size // num_attention_heads)")
        else:
            head_dim = hidden // heads
        channels = (heads + kv_heads) * head_dim
        width = (_int(t, "cca_time0", 2) - 1) + (_int(t, "cca_time1", 2) - 1) + 1
        return ShortConvLayout("zaya_cca", width, channels, extra_state_channels=hidden)
    return ShortConvLayout("lfm2_short_conv", _int(t, "conv_L_cache"), _int(t, "hidden_size"))


def facts(cfg: dict[str, Any]) -> ModelFacts:
    """The one parse of a config: every field the plugin reads, checked (:class:`ConfigError`
    naming the first bad one) in this order -- model type, text config, layer split, attention
    heads, architectures, model dtype, the GDN heads or the short-conv geometry, the SSM state dtype."""
    kind = family(cfg)
    fam = BY_MODEL_TYPE[cfg["model_type"]]
    t = text_config(cfg)
    split = _layer_split(fam, t)
    heads = _int(t, "num_attention_heads", maximum=MAX_HEADS)
    kv_heads = _int(t, "num_key_value_heads", heads, maximum=MAX_HEADS)
    if heads % kv_heads:
        raise ConfigError(f"config fields num_attention_heads = {heads}, num_key_value_heads = {kv_heads}: "
                          "expected the attention heads to be a multiple of the key/value heads")
    archs = _list(cfg, "architectures")  # read by the launch-default decisions
    dtype, dtype_from = _model_dtype(fam, cfg, t)
    gdn = _gdn_totals(t) if kind == "gdn" else None
    short_conv = _short_conv_totals(t) if kind == "short_conv" else None
    ssm = _mamba_ssm_dtype(cfg, t) if kind == "gdn" else None
    return ModelFacts(model_type=fam.model_type, family=kind, num_layers=split.num_layers,
                      full_attention_layers=split.full_attention, linear_layers=split.linear,
                      attention_heads=heads, kv_heads=kv_heads, layer_kinds_from=split.source,
                      dtype=dtype, dtype_from=dtype_from, architectures=tuple(archs or ()),
                      config_ssm_dtype=ssm, gdn=gdn, short_conv=short_conv)


def per_rank(total: int, tp: int, what: str) -> int:
    """``total / tp``, or :class:`TPSplitError` naming ``what`` when it does not divide."""
    if tp < 1:
        raise ConfigError(f"tp must be >= 1, got {tp}")
    if total % tp:
        raise TPSplitError(f"{what} ({total}) is not divisible by tp={tp}")
    return total // tp
