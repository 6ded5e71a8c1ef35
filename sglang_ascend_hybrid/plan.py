"""``sglang-ascend-hybrid plan``: what the plugin will run for a model, per TP size.

Uses the runtime's own code: the GDN head planner and kernel capability table
(:mod:`sglang_ascend_hybrid.ops.gdn`), the conv-kernel limits
(:mod:`sglang_ascend_hybrid.ops.causal_conv1d`) and the launch-default
decisions (:mod:`sglang_ascend_hybrid.backends.launch_defaults`).
"""

from __future__ import annotations

import json
import sys
from typing import Any, Callable, Optional, TextIO

from sglang_ascend_hybrid import model_families as mf

DEFAULT_TP = (1, 2, 4, 8, 16)

_DTYPES = {"bfloat16": "bfloat16", "float16": "float16", "fp16": "float16", "bf16": "bfloat16",
           "float32": "float32"}


def _dtype(cfg: dict):
    import torch

    t = mf.text_config(cfg)
    name = t.get("torch_dtype") or t.get("dtype") or cfg.get("torch_dtype") or "bfloat16"
    return getattr(torch, _DTYPES.get(str(name), "bfloat16"))


def kernel_predicate(kernel_heads: Optional[list[int]]) -> Optional[Callable[[int, int], bool]]:
    """``--kernel-heads``: the accepted value-head counts (a multiple of key heads)."""
    if kernel_heads is None:
        return None
    accepted = frozenset(kernel_heads)

    def predicate(hv: int, hk: int) -> bool:
        return hk > 0 and hv % hk == 0 and hv in accepted

    predicate.max_value_heads = max(accepted)  # bounds the planner's search
    return predicate


def state_dtype(cfg: dict, override: Optional[str] = None) -> tuple[str, str]:
    """The SSM state dtype SGLang will give this model, and where it comes from (the runtime's
    precedence: --mamba-ssm-dtype, SGLANG_MAMBA_SSM_DTYPE, the config, float32)."""
    import os

    from sglang_ascend_hybrid.backends.gdn_state_dtype import effective_dtype

    t = mf.text_config(cfg)
    config_dtype = t.get("mamba_ssm_dtype", cfg.get("mamba_ssm_dtype"))
    return effective_dtype(override, config_dtype, os.environ.get("SGLANG_MAMBA_SSM_DTYPE"))


def gdn_entry(cfg: dict, tp: int, predicate=None, ssm_dtype: Optional[str] = None) -> dict[str, Any]:
    from sglang_ascend_hybrid.ops.gdn import capabilities as caps
    from sglang_ascend_hybrid.ops.gdn.dispatch import plan_for_layout

    lay = mf.gdn_layout(cfg, tp)
    dtype = _dtype(cfg)
    plan = plan_for_layout(lay.value_heads, lay.key_heads, lay.head_dim, lay.value_head_dim, dtype,
                           predicate=predicate)
    fast = plan.strategy != "none"
    fallback = None
    if not fast:
        fallback = "triton" if caps.triton_supports(lay.value_heads, lay.key_heads, dtype) else "torch"
    return {
        "value_heads": lay.value_heads,
        "key_heads": lay.key_heads,
        "head_dim": lay.head_dim,
        "value_head_dim": lay.value_head_dim,
        "dtype": str(dtype).replace("torch.", ""),
        "strategy": plan.strategy if fast else f"fallback:{fallback}",
        "launches": [list(p) for p in plan.launches] if fast else [],
        # Compute overhead of what runs: the plan's padding, or none on a fallback rung.
        "overhead": float(plan.overhead) if fast else 1.0,
        "fast_kernel": fast,
        "fallback": fallback,
        "npu_chunk_op_supports": caps.npu_op_supports(lay.value_heads, lay.key_heads, lay.head_dim,
                                                      lay.value_head_dim, dtype),
        **_state_fields(cfg, ssm_dtype),
    }


def _state_fields(cfg: dict, ssm_dtype: Optional[str]) -> dict[str, Any]:
    from sglang_ascend_hybrid.backends.gdn_state_dtype import plan_state

    dtype, source = state_dtype(cfg, ssm_dtype)
    kernels = plan_state(dtype, source)  # an A2 / A3 (Ascend 950: fp32 states on the chunk op)
    return {"state_dtype": dtype, "state_dtype_source": source, "prefill_kernels": kernels.prefill,
            "verify_kernels": kernels.verify, "decode_kernels": kernels.decode}


def short_conv_entry(cfg: dict, tp: int) -> dict[str, Any]:
    from sglang_ascend_hybrid.ops.causal_conv1d import npu_conv_supports

    lay = mf.short_conv_layout(cfg, tp)
    dtype = _dtype(cfg)
    if lay.kind == "zaya_cca":
        kernel = "torch (ZAYA1 CCA conv is pure torch in the model, run on the pool in place)"
    elif npu_conv_supports(lay.width, lay.channels, dtype):
        kernel = ("npu (sgl-kernel-npu window-major conv ops where installed, else torch.ops.npu.causal_conv1d; "
                  "decode also causal_conv1d_update_v2 in fp16; torch on Ascend 950 builds)")
    else:
        kernel = "torch (outside the NPU conv ops' limits: width 2-4, x / weight / state fp16 or bf16)"
    return {"kind": lay.kind, "width": lay.width, "channels": lay.channels,
            "extra_state_channels": lay.extra_state_channels, "kernel": kernel}


def plan(cfg: dict, tp_sizes=DEFAULT_TP, kernel_heads: Optional[list[int]] = None,
         ssm_dtype: Optional[str] = None) -> list[dict[str, Any]]:
    from sglang_ascend_hybrid.backends.launch_defaults import planned_adjustments

    facts = mf.facts(cfg)
    # Malformed configs fail as a whole (missing fields show at TP=1 already).
    mf.gdn_layout(cfg, 1) if facts.family == "gdn" else mf.short_conv_layout(cfg, 1)
    predicate = kernel_predicate(kernel_heads)
    rows = []
    for tp in tp_sizes:
        row: dict[str, Any] = {"tp": tp, "model_type": facts.model_type, "family": facts.family,
                               "layers": facts.num_layers, "full_attention_layers": facts.full_attention_layers,
                               "linear_layers": facts.linear_layers, "gdn": None, "short_conv": None}
        try:
            if facts.family == "gdn":
                row["gdn"] = gdn_entry(cfg, tp, predicate, ssm_dtype)
            else:
                row["short_conv"] = short_conv_entry(cfg, tp)
            row["attention_heads_per_rank"] = mf.per_rank(facts.attention_heads, tp, "num_attention_heads")
            row["launch_adjustments"] = planned_adjustments(cfg, tp)
            row["error"] = None
        except mf.TPSplitError as exc:
            row["error"] = str(exc)
        rows.append(row)
    return rows


def render(rows: list[dict[str, Any]], out: TextIO | None = None) -> None:
    w = (out or sys.stdout).write
    if not rows:
        return
    first = rows[0]
    w(f"model_type {first['model_type']} ({first['family']}): {first['layers']} layers, "
      f"{first['full_attention_layers']} full-attention, {first['linear_layers']} "
      f"{'GDN' if first['family'] == 'gdn' else 'short-conv'}\n")
    for r in rows:
        if r["error"]:
            w(f"  TP={r['tp']:<3} cannot run: {r['error']}\n")
            continue
        if r["gdn"]:
            g = r["gdn"]
            head = f"GDN per rank (Hv={g['value_heads']}, Hk={g['key_heads']}, d={g['head_dim']})"
            if g["fast_kernel"]:
                w(f"  TP={r['tp']:<3} {head}: mega kernel {g['strategy']}, launches {g['launches']}, "
                  f"overhead {g['overhead']:.2f} (with a 16-bit SSM state)\n")
            else:
                w(f"  TP={r['tp']:<3} {head}: mega kernel cannot serve; falls back to {g['fallback']}\n")
            npu_op = "within" if g["npu_chunk_op_supports"] else "outside"
            w(f"         torch.ops.npu.chunk_gated_delta_rule (first rung): heads, dims and dtype {npu_op} its "
              f"limits; it needs a bf16 SSM state on A2/A3\n")
            w(f"         SSM state {g['state_dtype']} (from {g['state_dtype_source']}): prefill {g['prefill_kernels']}; "
              f"verify (MTP) {g['verify_kernels']}; decode {g['decode_kernels']}\n")
        if r["short_conv"]:
            s = r["short_conv"]
            w(f"  TP={r['tp']:<3} {s['kind']} width {s['width']}, {s['channels']} channels per rank: {s['kernel']}\n")
        w(f"         full attention: {r['full_attention_layers']} layers, {r['attention_heads_per_rank']} "
          f"query heads per rank (Ascend attention backend)\n")
        for adj in r["launch_adjustments"]:
            w(f"         launch adjustment: {adj}\n")


def parse_heads(text: str) -> list[int]:
    try:
        heads = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--kernel-heads {text!r}: expected comma-separated integers like 8,12,16") from None
    if not heads or any(not 0 < h <= mf.MAX_HEADS for h in heads):
        raise ValueError(f"--kernel-heads {text!r}: expected integers from 1 to {mf.MAX_HEADS}")
    return heads


def main(args) -> int:
    try:
        cfg = mf.load_config(args.config)
        mf.family(cfg)
        heads = parse_heads(args.kernel_heads) if args.kernel_heads else None
        if any(tp < 1 for tp in args.tp or ()):
            raise ValueError(f"--tp {args.tp}: expected positive integers")
        ssm = getattr(args, "mamba_ssm_dtype", None)
        rows = plan(cfg, tuple(args.tp) if args.tp else DEFAULT_TP, heads, ssm)
    except (mf.ConfigError, ValueError) as exc:
        print(f"sglang-ascend-hybrid plan: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        render(rows)
    return 0
