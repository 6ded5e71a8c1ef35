"""``sglang-ascend-hybrid plan``: what the plugin will run for a model, per TP size.

Uses the runtime's own code: the family table and config rules
(:mod:`sglang_ascend_hybrid.model_families`), the GDN head planner and the prefill ladder's
signature rules (:func:`sglang_ascend_hybrid.ops.gdn.prefill.prefill_static_reasons`), the
conv-kernel limits (:mod:`sglang_ascend_hybrid.ops.conv.contract`), the SSM state dtype rules
(:mod:`sglang_ascend_hybrid.integration.gdn_state_dtype`) and the launch-default decisions
(:mod:`sglang_ascend_hybrid.integration.launch.planned`, which reads what it needs of SGLang from
its installed source).  Nothing of SGLang or transformers is imported.  The config is parsed
once (:func:`sglang_ascend_hybrid.model_families.facts`); every row is computed from those facts.

``--json`` prints :func:`plan`'s document; its schema is ``docs/plan-json.md``
(:data:`SCHEMA_VERSION`).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Callable, Optional, TextIO

from sglang_ascend_hybrid import model_families as mf

SCHEMA_VERSION = 2
DEFAULT_TP = (1, 2, 4, 8, 16)
# The chip plan answers for: an Atlas A3, where every GDN kernel is built (an A2 answers the same for
# the chunk op; on Ascend 950 fp32 states run on the chunk op and the mega kernel is absent).
ASSUMED_CHIP = "A3"
# Settings outside the plugin's registry that change which GDN kernel runs (shown in the assumptions).
KERNEL_ENV = ("GDN_USE_MEGA_GDN", "GDN_ATTN_BACKEND_TRITON", "SGLANG_MAMBA_SSM_DTYPE")
# SGLang's GDN prefill goes through the plugin's ladder on every supported release
# (gdn-prefill-ladder on 0.5.21+, gdn-extend-ladder on 0.5.20; the registry test checks that
# their specifiers cover every release): the route the plan assumes.
PREFILL_ROUTE = "ladder"


def kernel_predicate(kernel_heads: Optional[list[int]]) -> Optional[Callable[[int, int], bool]]:
    """``--kernel-heads``: the accepted value-head counts (a multiple of key heads)."""
    if kernel_heads is None:
        return None
    accepted = frozenset(kernel_heads)

    def predicate(hv: int, hk: int) -> bool:
        return hk > 0 and hv % hk == 0 and hv in accepted

    predicate.max_value_heads = max(accepted)  # bounds the planner's search
    return predicate


def state_dtype(facts: mf.ModelFacts, override: Optional[str] = None) -> tuple[str, str]:
    """The SSM state dtype SGLang will give this model, and where it comes from (the runtime's
    precedence: --mamba-ssm-dtype, SGLANG_MAMBA_SSM_DTYPE, the config, float32)."""
    from sglang_ascend_hybrid.integration.gdn_state_dtype import effective_dtype

    return effective_dtype(override, facts.config_ssm_dtype, os.environ.get("SGLANG_MAMBA_SSM_DTYPE"))


def _ops() -> dict[str, str]:
    from sglang_ascend_hybrid.ops.gdn import contract as caps

    return {"npu_chunk": f"torch.ops.npu.{caps.OP_NPU_CHUNK}", "mega": caps.OP_MEGA,
            "triton": caps.OP_TRITON, "torch": "the plugin's torch chunk path"}


def prefill_entry(lay: mf.GDNLayout, dtype: str, state: str, chunk_states: bool,
                  predicate=None) -> dict[str, Any]:
    """Which prefill rung serves calls of this layout (per rank), the reasons of every other rung."""
    import torch

    from sglang_ascend_hybrid.envs import ENV
    from sglang_ascend_hybrid.integration.gdn_hooks import prefill_skip
    from sglang_ascend_hybrid.ops.gdn import prefill
    from sglang_ascend_hybrid.ops.gdn.signature import GdnSignature

    sig = GdnSignature(lay.value_heads, lay.key_heads, lay.head_dim, lay.value_head_dim,
                       getattr(torch, dtype), chunk_states, getattr(torch, state))
    verdicts = prefill.prefill_static_reasons(sig, chip=ASSUMED_CHIP, predicate=predicate)
    unskipped = {name: reason is None for name, reason, _ in verdicts}  # a forced rung ignores the skip
    ops = _ops()
    skip = prefill_skip()
    verdicts = [(name, "skipped: GDN_ATTN_BACKEND_TRITON=1 sends prefill to the Triton chunk path"
                 if name in skip else reason, probe) for name, reason, probe in verdicts]
    rungs = [{"rung": name, "op": ops[name], "serves": reason is None, "reason": reason,
              "decided_by_probe": probe and reason is None} for name, reason, probe in verdicts]
    forced = ENV.GDN_BACKEND.get()
    forced = forced if forced in ops else None
    kernel, error = next((r["rung"] for r in rungs if r["serves"]), None), None
    if forced is not None:
        kernel = forced if unskipped[forced] else None
        if kernel is None:
            error = (f"{ENV.GDN_BACKEND.name}={forced} forces a rung that cannot serve these calls: prefill "
                     "raises ForcedRungUnavailable")
    return {"kernel": kernel, "op": ops[kernel] if kernel else None, "forced": forced, "error": error,
            "recomputes_tracked_states": kernel == "triton" and prefill.triton_rounds_chunk_states(sig),
            "rungs": rungs}


def decode_entry(lay: mf.GDNLayout, dtype: str, state: str) -> dict[str, Any]:
    """Which decode rung serves SGLang's plain decode steps of this layout (per rank), from the decode
    ladder's rules (:func:`sglang_ascend_hybrid.ops.gdn.decode.decode_static_reasons`), the reasons of every
    other rung.  ``kernel`` is the first rung that serves whatever a startup probe finds; a rung before it
    that only its probe can confirm (the Triton decode kernel) runs instead where the probe does."""
    import torch

    from sglang_ascend_hybrid.envs import ENV
    from sglang_ascend_hybrid.ops.gdn import contract as caps
    from sglang_ascend_hybrid.ops.gdn import decode
    from sglang_ascend_hybrid.ops.gdn.decode import contract as decode_contract
    from sglang_ascend_hybrid.ops.gdn.signature import GdnSignature

    entry = decode_contract.installed_decode_entry()
    sig = GdnSignature(lay.value_heads, lay.key_heads, lay.head_dim, lay.value_head_dim, getattr(torch, dtype),
                       state_dtype=getattr(torch, state))
    ops = {"triton_decode": decode_contract.DECODE_ENTRIES[entry] if entry else None,
           "npu_recurrent": f"torch.ops.npu.{caps.OP_NPU_RECURRENT}", "torch": "the plugin's torch decode step"}
    rungs = [{"rung": name, "op": ops[name], "serves": reason is None, "reason": reason, "decided_by_probe": probe}
             for name, reason, probe in decode.decode_static_reasons(sig, entry)]
    forced = ENV.GDN_BACKEND.get()
    forced = forced if forced in ops else None
    kernel = next(r["rung"] for r in rungs if r["serves"] and not r["decided_by_probe"])
    error = None
    if forced is not None:
        kernel = forced if next(r["serves"] for r in rungs if r["rung"] == forced) else None
        if kernel is None:
            error = (f"{ENV.GDN_BACKEND.name}={forced} forces a rung that cannot serve these calls: decode "
                     "raises ForcedRungUnavailable")
    return {"kernel": kernel, "op": ops[kernel] if kernel else None, "forced": forced, "error": error,
            "decode_entry": entry, "rungs": rungs}


# What the verify-gates entry assumes: SGLang's MTP default for these models (speculative_num_steps 3, topk 1:
# 4 draft tokens per request) unless --speculative-num-draft-tokens says otherwise, and batches up to 256.
DEFAULT_DRAFT_TOKENS = 4
VERIFY_GATES_MAX_BATCH = 256


def verify_gates_entry(value_heads: int, draft_tokens: int) -> dict[str, Any]:
    """Where SGLang's target-verify gating kernel cannot tile a step of this layout (per rank), from the
    ``gdn_verify_gates`` ladder's rule (:func:`sglang_ascend_hybrid.ops.gdn.verify_gates.untiled_batches`),
    and what serves those steps instead."""
    from sglang_ascend_hybrid.ops.gdn import verify_gates

    batches = verify_gates.untiled_batches(value_heads, draft_tokens, VERIFY_GATES_MAX_BATCH)
    rungs = verify_gates.VERIFY_GATES.names
    return {"draft_tokens": draft_tokens, "max_batch": VERIFY_GATES_MAX_BATCH, "kernel": rungs[0],
            "untiled_batches": [list(r) for r in batches], "untiled_served_by": rungs[1] if batches else None}


def gdn_entry(facts: mf.ModelFacts, tp: int, predicate=None, ssm_dtype: Optional[str] = None,
              draft_tokens: int = DEFAULT_DRAFT_TOKENS) -> dict[str, Any]:
    import torch

    from sglang_ascend_hybrid.integration.gdn_state_dtype import plan_state
    from sglang_ascend_hybrid.ops.gdn.prefill import plan_for_layout

    lay = facts.gdn_layout(tp)
    dtype = facts.dtype
    state, source = state_dtype(facts, ssm_dtype)
    mega = plan_for_layout(lay.value_heads, lay.key_heads, lay.head_dim, lay.value_head_dim, getattr(torch, dtype),
                           predicate=predicate)
    kernels = plan_state(state, source)  # verify on an A2 / A3
    return {
        "value_heads": lay.value_heads,
        "key_heads": lay.key_heads,
        "head_dim": lay.head_dim,
        "value_head_dim": lay.value_head_dim,
        "dtype": dtype,
        "state_dtype": state,
        "state_dtype_source": source,
        "prefill": prefill_entry(lay, dtype, state, False, predicate),
        "prefill_with_chunk_states": prefill_entry(lay, dtype, state, True, predicate),
        "mega_plan": {"strategy": mega.strategy, "launches": [list(p) for p in mega.launches],
                      "overhead": float(mega.overhead) if mega.strategy != "none" else None},
        "verify_kernels": kernels.verify,
        "verify_gates": verify_gates_entry(lay.value_heads, draft_tokens),
        "decode": decode_entry(lay, dtype, state),
    }


def short_conv_entry(facts: mf.ModelFacts, tp: int) -> dict[str, Any]:
    import torch

    from sglang_ascend_hybrid.ops.conv.contract import npu_conv_supports

    lay = facts.short_conv_layout(tp)
    dtype = facts.dtype
    if lay.kind == "zaya_cca":
        kernel = "torch (ZAYA1 CCA conv is pure torch in the model, run on the pool in place)"
    elif npu_conv_supports(lay.width, lay.channels, getattr(torch, dtype)):
        kernel = ("npu (sgl-kernel-npu window-major conv ops where installed, else torch.ops.npu.causal_conv1d; "
                  "decode also causal_conv1d_update_v2 in fp16; torch on Ascend 950 builds)")
    else:
        kernel = "torch (outside the NPU conv ops' limits: width 2-4, x / weight / state fp16 or bf16)"
    return {"kind": lay.kind, "width": lay.width, "channels": lay.channels,
            "extra_state_channels": lay.extra_state_channels, "kernel": kernel,
            "verify_kernel": short_conv_verify_kernel(lay, dtype)}


def short_conv_verify_kernel(lay, dtype: str) -> str:
    """What serves a TARGET_VERIFY (speculative decoding, linear chains) of this layout on an NPU,
    from the verify ladder's contract facts (:mod:`sglang_ascend_hybrid.ops.conv.contract`)."""
    import torch

    from sglang_ascend_hybrid.ops.conv.contract import NPU_DTYPES, SPEC_WIDTH, WIDTHS

    if lay.kind == "zaya_cca":
        return "torch (the plugin's CCA verify: ZAYA1's grouped conv over the draft window, graph safe)"
    torch_dtype = getattr(torch, dtype)
    if lay.width == SPEC_WIDTH and torch_dtype in NPU_DTYPES:
        return "npu (torch.ops.npu.causal_conv1d speculative mode; torch on Ascend 950 builds)"
    if lay.width in WIDTHS and torch_dtype == torch.float16:
        return "npu (causal_conv1d_update_v2 speculative mode, fp16)"
    return (f"torch (torch.ops.npu.causal_conv1d's speculative mode takes width {SPEC_WIDTH} only, "
            f"causal_conv1d_update_v2 fp16 only; this layer: width {lay.width}, {dtype})")


def _overhead_limit() -> Optional[float]:
    from sglang_ascend_hybrid.envs import ENV

    limit = ENV.GDN_MAX_OVERHEAD.get()
    return None if limit == float("inf") else float(limit)


def assumptions(kernel_heads: Optional[list[int]]) -> dict[str, Any]:
    from sglang_ascend_hybrid.envs import ENV
    from sglang_ascend_hybrid.ops import seam
    from sglang_ascend_hybrid.ops.gdn import contract as caps
    from sglang_ascend_hybrid.patches.releases import installed_version

    variant = caps.mega_variant()
    env = {name: os.environ.get(name) for name in KERNEL_ENV}
    env.update({v.name: os.environ.get(v.name) for v in (ENV.GDN_BACKEND, ENV.GDN_MAX_OVERHEAD)})
    return {
        "chip": ASSUMED_CHIP,
        "sglang": installed_version("sglang"),
        "prefill_route": PREFILL_ROUTE,
        "sgl_kernel_npu": seam.kernel_package_version(),
        "mega_kernel": variant.name,
        "kernel_heads": sorted(set(kernel_heads)) if kernel_heads else None,
        "triton_entry_mega_mode": caps.triton_mega_mode(mega_present=True),
        "max_overhead": _overhead_limit(),
        "dtype_flag": "auto",
        "environment": env,
    }


def plan(cfg: dict, tp_sizes=DEFAULT_TP, kernel_heads: Optional[list[int]] = None,
         ssm_dtype: Optional[str] = None, draft_tokens: int = DEFAULT_DRAFT_TOKENS) -> dict[str, Any]:
    """The plan document (``docs/plan-json.md``) of ``cfg`` at each TP size (``draft_tokens``: speculative
    decoding's tokens per request, for the verify step's gates)."""
    if isinstance(draft_tokens, bool) or not isinstance(draft_tokens, int) or draft_tokens < 1:
        raise ValueError(f"--speculative-num-draft-tokens {draft_tokens!r}: expected a positive integer")
    from sglang_ascend_hybrid.integration.launch.planned import planned_adjustments, planned_prefix_cache

    facts = mf.facts(cfg)  # the one parse: a malformed config fails as a whole, before any TP size
    predicate = kernel_predicate(kernel_heads)
    archs = facts.architectures
    rows = []
    for tp in tp_sizes:
        row: dict[str, Any] = {"tp": tp, "error": None, "attention_heads_per_rank": None, "gdn": None,
                               "short_conv": None, "launch_adjustments": []}
        try:
            if facts.family == "gdn":
                row["gdn"] = gdn_entry(facts, tp, predicate, ssm_dtype, draft_tokens)
            else:
                row["short_conv"] = short_conv_entry(facts, tp)
            row["attention_heads_per_rank"] = mf.per_rank(facts.attention_heads, tp, "num_attention_heads")
            row["launch_adjustments"] = planned_adjustments(facts, tp)
        except mf.TPSplitError as exc:
            row["error"] = str(exc)  # what was computed before the split failed stays (docs/plan-json.md)
        rows.append(row)
    return {
        "schema_version": SCHEMA_VERSION,
        "model": {"model_type": facts.model_type, "family": facts.family,
                  "architecture": archs[0] if archs else None, "layers": facts.num_layers,
                  "full_attention_layers": facts.full_attention_layers, "linear_layers": facts.linear_layers,
                  "layer_kinds_from": facts.layer_kinds_from, "dtype": facts.dtype, "dtype_from": facts.dtype_from,
                  "attention_heads": facts.attention_heads, "kv_heads": facts.kv_heads,
                  "prefix_cache": planned_prefix_cache(facts)},
        "assumptions": assumptions(kernel_heads),
        "rows": rows,
    }


def _rung_line(r: dict, mega_plan: Optional[dict] = None, width: int = 10) -> str:
    verdict = "yes" if r["serves"] else "no "
    note = r["reason"] or ""
    if r["decided_by_probe"] and r["rung"] == "triton_decode":
        note = ("only where the probe of its state layout at startup finds it value-first (its readable source "
                "is key-first; else the next rung)")
    elif r["decided_by_probe"]:
        note = "the probe of its chunk-state stride at startup confirms it (else the next rung)"
    if r["rung"] == "mega" and mega_plan and mega_plan["strategy"] != "none":
        plan_txt = (f"head plan {mega_plan['strategy']}, launches {mega_plan['launches']}, overhead "
                    f"{mega_plan['overhead']:.2f}")
        note = f"{note}; {plan_txt}" if note else plan_txt
    return f"           {r['rung']:<{width}} {verdict} {note}".rstrip() + "\n"


def render(doc: dict[str, Any], out: TextIO | None = None) -> None:
    from sglang_ascend_hybrid.integration.launch.decision import SNAPSHOT_WRITERS

    w = (out or sys.stdout).write
    m, a = doc["model"], doc["assumptions"]
    w(f"model_type {m['model_type']} ({m['family']}): {m['layers']} layers, {m['full_attention_layers']} "
      f"full-attention, {m['linear_layers']} {'GDN' if m['family'] == 'gdn' else 'short-conv'} "
      f"(from {m['layer_kinds_from']}); dtype {m['dtype']} ({m['dtype_from']})\n")
    if m["family"] == "gdn":
        w(f"assuming an Atlas {a['chip']}, --dtype auto, SGLang's prefill through the plugin's GDN ladder; "
          f"mega kernel {a['mega_kernel']}\n")
    pc = m["prefix_cache"]
    if pc["on"]:
        by = SNAPSHOT_WRITERS.get(pc["snapshots"], pc["snapshots"])
        w(f"prefix cache at default flags on NPU: on, mamba {pc['strategy']} strategy, page size 128 "
          f"(snapshots written by {by})\n")
    else:
        w("prefix cache at default flags on NPU: off (see the launch adjustment)\n")
    for r in doc["rows"]:
        if r["error"]:
            w(f"  TP={r['tp']:<3} cannot run: {r['error']}\n")
            continue
        if r["gdn"]:
            g = r["gdn"]
            p, pc = g["prefill"], g["prefill_with_chunk_states"]
            runs = (f"prefill runs on {p['kernel']} ({p['op']})" if p["kernel"] else f"prefill fails: {p['error']}")
            w(f"  TP={r['tp']:<3} GDN per rank (Hv={g['value_heads']}, Hk={g['key_heads']}, d={g['head_dim']}), "
              f"{g['dtype']} inputs, SSM state {g['state_dtype']} (from {g['state_dtype_source']}): {runs}\n")
            for rung in p["rungs"]:
                w(_rung_line(rung, g["mega_plan"]))
            if pc["kernel"] != p["kernel"]:
                tracked = pc["kernel"] or f"fails ({pc['error']})"
                why = next((x["reason"] for x in pc["rungs"] if x["rung"] == p["kernel"]), None)
                suffix = f" ({p['kernel']}: {why})" if why else ""
                w(f"         with 64-token chunk states (radix-cache tracking): prefill runs on {tracked}{suffix}\n")
            if pc["recomputes_tracked_states"]:
                w(f"         radix-cache tracking on {pc['kernel']}: its chunk states are {g['dtype']}, so the tracked "
                  f"ones are recomputed in {g['state_dtype']} (one more launch over the tracked prefixes)\n")
            d = g["decode"]
            runs = f"decode runs on {d['kernel']} ({d['op']})" if d["kernel"] else f"decode fails: {d['error']}"
            w(f"         {runs}\n")
            for rung in d["rungs"]:
                w(_rung_line(rung, width=13))
            w(f"         verify (MTP) {g['verify_kernels']}\n")
            w(_verify_gates_line(g["verify_gates"]))
        if r["short_conv"]:
            s = r["short_conv"]
            w(f"  TP={r['tp']:<3} {s['kind']} width {s['width']}, {s['channels']} channels per rank: {s['kernel']}\n")
            w(f"         speculative verify (EAGLE-family, topk 1): {s['verify_kernel']}\n")
        heads = r["attention_heads_per_rank"]
        w(f"         full attention: {m['full_attention_layers']} layers, {heads} "
          f"query head{'' if heads == 1 else 's'} per rank (Ascend attention backend)\n")
        for adj in r["launch_adjustments"]:
            w(f"         launch adjustment: {adj}\n")


def _verify_gates_line(v: dict) -> str:
    head = f"         verify gates ({v['draft_tokens']} draft tokens): "
    if not v["untiled_batches"]:
        return head + f"sgl-kernel-npu's without-sigmoid gating kernel tiles every batch up to {v['max_batch']}\n"
    shown = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in v["untiled_batches"])
    return (head + f"sgl-kernel-npu's without-sigmoid gating kernel cannot tile batches {shown} "
            f"(of 1-{v['max_batch']}); those steps run on {v['untiled_served_by']} (fused_gdn_gating_npu, the same "
            "gates; gdn-verify-gates)\n")


def parse_heads(text: str) -> list[int]:
    try:
        heads = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--kernel-heads {text!r}: expected comma-separated integers like 8,12,16") from None
    if not heads or any(not 0 < h <= mf.MAX_HEADS for h in heads):
        raise ValueError(f"--kernel-heads {text!r}: expected integers from 1 to {mf.MAX_HEADS}")
    return heads


def main(args) -> int:
    # torch is imported for the kernels' dtype rules only: never let it autoload torch_npu (an Ascend
    # host's device backend), which plan does not use and which costs seconds and touches the device.
    os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    try:
        cfg = mf.load_config(args.config)
        mf.family(cfg)
        heads = parse_heads(args.kernel_heads) if args.kernel_heads else None
        if any(tp < 1 for tp in args.tp or ()):
            raise ValueError(f"--tp {args.tp}: expected positive integers")
        ssm = getattr(args, "mamba_ssm_dtype", None)
        draft = getattr(args, "speculative_num_draft_tokens", None)
        doc = plan(cfg, tuple(args.tp) if args.tp else DEFAULT_TP, heads, ssm,
                   DEFAULT_DRAFT_TOKENS if draft is None else draft)
    except (mf.ConfigError, ValueError) as exc:
        print(f"sglang-ascend-hybrid plan: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        render(doc)
    return 0
