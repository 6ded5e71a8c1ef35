"""What a Hugging Face ``config.json`` means for this plugin: model family,
GDN head layout, short-conv geometry, full-attention layers, per TP rank.

Pure functions on the JSON dict (no transformers / SGLang import), shared by
``plan`` and the launch-resolution helpers.

Every field read is type- and range-checked: a malformed config (a null, zero,
negative, fractional or non-numeric count, a non-list layer list, value heads
not a multiple of key heads) raises :class:`ConfigError` naming the field, its
value and what was expected, never another exception.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GDN_MODEL_TYPES = {"qwen3_next", "qwen3_5", "qwen3_5_moe", "qwen3_5_text", "qwen3_5_moe_text",
                   "qwen3_6", "qwen3_6_moe"}
SHORT_CONV_MODEL_TYPES = {"lfm2", "lfm2_moe", "lfm2_vl", "zaya"}


class ConfigError(ValueError):
    """A config.json this plugin cannot interpret (bad JSON, unrelated model, missing fields)."""


class TPSplitError(ConfigError):
    """The model is fine but cannot be split over this TP size."""


@dataclass(frozen=True)
class GDNLayout:
    value_heads: int   # per rank
    key_heads: int     # per rank
    head_dim: int
    value_head_dim: int


@dataclass(frozen=True)
class ShortConvLayout:
    kind: str          # "lfm2_short_conv" | "zaya_cca"
    width: int         # conv kernel width W (state keeps W - 1 inputs)
    channels: int      # per rank conv channels
    extra_state_channels: int | None = None  # ZAYA1 prev-hidden state (replicated)


@dataclass(frozen=True)
class ModelFacts:
    model_type: str
    family: str        # "gdn" | "short_conv"
    num_layers: int
    full_attention_layers: int
    linear_layers: int
    attention_heads: int   # global
    kv_heads: int          # global


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


def text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    inner = cfg.get("text_config")
    if inner is not None and not isinstance(inner, dict):
        raise ConfigError(f"config field 'text_config' = {_show(inner)}: expected a JSON object")
    if isinstance(inner, dict):
        merged = dict(inner)
        merged.setdefault("model_type", cfg.get("model_type"))
        merged["_outer_model_type"] = cfg.get("model_type")
        return merged
    return cfg


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
    if mt in GDN_MODEL_TYPES:
        return "gdn"
    if mt in SHORT_CONV_MODEL_TYPES:
        return "short_conv"
    raise ConfigError(
        f"model_type {mt!r} is not a family this plugin serves "
        f"(GDN: {', '.join(sorted(GDN_MODEL_TYPES))}; short-conv: {', '.join(sorted(SHORT_CONV_MODEL_TYPES))})"
    )


def _is_zaya(t: dict[str, Any]) -> bool:
    return "zaya" in (t.get("model_type"), t.get("_outer_model_type"))


def _layer_split(t: dict[str, Any]) -> tuple[int, int, int]:
    n = _int(t, "num_hidden_layers")
    if _is_zaya(t):
        zl = _list(t, "zaya_layers", (str, int), "layer codes ('a' or an integer)")
        full = sum(1 for x in zl if x == "a") if zl else (n + 1) // 2
        return n, full, full  # CCA layers are the attention layers (conv + attention in one)
    types = _list(t, "layer_types")
    if types:
        full = sum(1 for x in types if x in ("full_attention", "attention"))
        return len(types), full, len(types) - full
    interval = _int(t, "full_attention_interval", 4)
    full = sum(1 for i in range(n) if (i + 1) % interval == 0)
    return n, full, n - full


def facts(cfg: dict[str, Any]) -> ModelFacts:
    fam = family(cfg)
    t = text_config(cfg)
    n, full, linear = _layer_split(t)
    heads = _int(t, "num_attention_heads", maximum=MAX_HEADS)
    kv_heads = _int(t, "num_key_value_heads", heads, maximum=MAX_HEADS)
    if heads % kv_heads:
        raise ConfigError(f"config fields num_attention_heads = {heads}, num_key_value_heads = {kv_heads}: "
                          "expected the attention heads to be a multiple of the key/value heads")
    _list(cfg, "architectures")  # read by the launch-default decisions
    return ModelFacts(model_type=model_type(cfg), family=fam, num_layers=n, full_attention_layers=full,
                      linear_layers=linear, attention_heads=heads, kv_heads=kv_heads)


def per_rank(total: int, tp: int, what: str) -> int:
    """``total / tp``, or :class:`TPSplitError` naming ``what`` when it does not divide."""
    if tp < 1:
        raise ConfigError(f"tp must be >= 1, got {tp}")
    if total % tp:
        raise TPSplitError(f"{what} ({total}) is not divisible by tp={tp}")
    return total // tp


def gdn_layout(cfg: dict[str, Any], tp: int) -> GDNLayout:
    t = text_config(cfg)
    hv = _int(t, "linear_num_value_heads", maximum=MAX_HEADS)
    hk = _int(t, "linear_num_key_heads", maximum=MAX_HEADS)
    if hv % hk:
        raise ConfigError(f"config fields linear_num_value_heads = {hv}, linear_num_key_heads = {hk}: "
                          "expected the value heads to be a multiple of the key heads")
    return GDNLayout(
        value_heads=per_rank(hv, tp, "linear_num_value_heads"),
        key_heads=per_rank(hk, tp, "linear_num_key_heads"),
        head_dim=_int(t, "linear_key_head_dim", 128),
        value_head_dim=_int(t, "linear_value_head_dim", 128),
    )


def short_conv_layout(cfg: dict[str, Any], tp: int) -> ShortConvLayout:
    t = text_config(cfg)
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
        return ShortConvLayout("zaya_cca", width, per_rank(channels, tp, "CCA channels"),
                               extra_state_channels=hidden)
    return ShortConvLayout("lfm2_short_conv", _int(t, "conv_L_cache"),
                           per_rank(_int(t, "hidden_size"), tp, "hidden_size"))
