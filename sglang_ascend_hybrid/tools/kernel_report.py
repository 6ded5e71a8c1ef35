"""What ``doctor`` reports about kernels: which variant of each is installed, and which rung the
supported families' shapes take on this machine (asked of the runtime ladders themselves, with
tiny probe tensors, so the report and the runtime cannot disagree)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from sglang_ascend_hybrid.ops import seam

# Qwen3.5 / Qwen3.6 / Qwen3-Next: 16 key heads of dim 128, value heads by model size.
GDN_SHAPES = {
    "Qwen3.5/3.6 (16 value heads)": 16,
    "Qwen3.5/3.6, Qwen3-Next (32)": 32,
    "Qwen3.6-27B, Qwen3.5-27B (48)": 48,
    "Qwen3.5/3.6 (64)": 64,
}
GDN_KEY_HEADS = 16
GDN_HEAD_DIM = 128
TP_SIZES = (1, 2, 4, 8)
# LFM2 / LFM2-MoE / LFM2-VL short conv: width 3, 2048 channels (LFM2-1.2B) split over TP.
CONV_WIDTH, CONV_CHANNELS = 3, 2048


def _probe_device() -> str:
    return "npu" if seam.package_available("torch_npu") else "cpu"


def installed_kernels() -> list[dict]:
    """Each device op a rung of the plugin's ladders calls (:mod:`sglang_ascend_hybrid.ops.catalog`):
    present or not, its variant, and the rungs that call it."""
    from sglang_ascend_hybrid.ops import catalog
    from sglang_ascend_hybrid.ops.gdn import contract as caps

    version = seam.kernel_package_version()
    rows = []
    for d in catalog.device_ops():
        present = seam.available(d.op)
        variant = d.note
        if d.op == caps.OP_MEGA and present:  # which head set: the wheel version decides
            variant = f"{caps.mega_variant(version).name} head set (wheel version {version or 'unknown'})"
        rows.append(dict(kernel=d.kernel, present=present, variant=variant, used_by=list(d.used_by)))
    return rows


def gdn_prefill_rung(value_heads: int, key_heads: int, head_dim: int, dtype: torch.dtype,
                     state_dtype: torch.dtype, device: Optional[str] = None) -> str:
    """The prefill rung the runtime ladder picks first for this layout (no kernel is called)."""
    from sglang_ascend_hybrid.ops.gdn import prefill

    dev = device or _probe_device()
    T = 2
    q = torch.zeros(1, T, key_heads, head_dim, dtype=dtype, device=dev)
    v = torch.zeros(1, T, value_heads, head_dim, dtype=dtype, device=dev)
    g = torch.zeros(1, T, value_heads, device=dev)
    state = torch.zeros(1, value_heads, head_dim, head_dim, dtype=state_dtype, device=dev)
    call = prefill.ChunkCall(q, q, v, g, g.to(dtype), torch.tensor([0, T], device=dev), state, 1.0)
    return prefill.PREFILL.choose(call.signature(), call).name


def gdn_verify_rung(value_heads: int, key_heads: int, head_dim: int, dtype: torch.dtype, state_dtype: torch.dtype,
                    draft_tokens: int = 4, device: Optional[str] = None) -> str:
    from sglang_ascend_hybrid.ops.gdn import verify as gv

    dev = device or _probe_device()
    B, S = 1, draft_tokens
    mix = torch.zeros(B, S, (2 * key_heads + value_heads) * head_dim, dtype=dtype, device=dev)
    pool = torch.zeros(2, value_heads, head_dim, head_dim, dtype=state_dtype, device=dev)
    scratch = torch.zeros(2 * S, value_heads, head_dim, head_dim, dtype=state_dtype, device=dev)
    idx = torch.arange(S, dtype=torch.int32, device=dev).view(1, S)
    ones = torch.ones(B, dtype=torch.int32, device=dev)
    call = gv.VerifyCall(mix, pool, torch.zeros(B, S, value_heads, device=dev), None, 1.0, ones * S, idx,
                         key_heads, value_heads, intermediate_state=scratch, cache_indices=ones,
                         num_accepted_tokens=ones)
    return gv.VERIFY.choose(call.signature(), call).name


def gdn_decode_rung(value_heads: int, key_heads: int, head_dim: int, dtype: torch.dtype, state_dtype: torch.dtype,
                    device: Optional[str] = None) -> str:
    """The rung the GDN decode ladder picks first for SGLang's plain decode step of this layout: the
    installed SGLang's Triton decode entry where installed and probed value-first, the recurrent op,
    the torch step (no kernel is called)."""
    from sglang_ascend_hybrid.ops.gdn import decode
    from sglang_ascend_hybrid.ops.gdn.decode import contract as decode_contract

    dev = device or _probe_device()
    q = torch.zeros(1, 1, key_heads, head_dim, dtype=dtype, device=dev)
    v = torch.zeros(1, 1, value_heads, head_dim, dtype=dtype, device=dev)
    gates = torch.zeros(value_heads, dtype=dtype, device=dev)
    pool = torch.zeros(2, value_heads, head_dim, head_dim, dtype=state_dtype, device=dev)
    call = decode.DecodeCall(q, q, v, gates, gates, gates.float(), gates.float(), pool,
                             torch.zeros(1, dtype=torch.int32, device=dev),
                             torch.tensor([0, 1], dtype=torch.int32, device=dev),
                             entry=decode_contract.installed_decode_entry())
    return decode.DECODE.choose(call.signature(), call).name


def conv_update_rung(width: int, channels: int, dtype: torch.dtype, device: Optional[str] = None) -> str:
    from sglang_ascend_hybrid.ops.conv import dispatch as conv_dispatch

    dev = device or _probe_device()
    x = torch.zeros(1, channels, dtype=dtype, device=dev)
    pool = torch.zeros(2, width - 1, channels, dtype=dtype, device=dev)   # window-major NPU pool
    weight = torch.zeros(channels, width, dtype=dtype, device=dev)
    call = conv_dispatch.UpdateCall(x, pool.transpose(1, 2), weight, None, None,
                                     torch.zeros(1, dtype=torch.int32, device=dev), -1)
    return conv_dispatch.UPDATE_LADDER.choose(call.signature(), call).name


def conv_verify_rung(width: int, channels: int, dtype: torch.dtype, draft: int = 4,
                     device: Optional[str] = None) -> str:
    """The rung a short-conv TARGET_VERIFY of ``draft`` tokens per request takes (its draft pool)."""
    from sglang_ascend_hybrid.ops.conv import dispatch as conv_dispatch

    dev = device or _probe_device()
    x = torch.zeros(draft, channels, dtype=dtype, device=dev)
    window = torch.zeros(2, (width - 1) + (draft - 1), channels, dtype=dtype, device=dev)
    weight = torch.zeros(channels, width, dtype=dtype, device=dev)
    call = conv_dispatch.VerifyCall(x, window, weight, None, None, torch.zeros(1, dtype=torch.int32, device=dev),
                                     -1, draft)
    return conv_dispatch.VERIFY_LADDER.choose(call.signature(), call).name


@dataclass(frozen=True)
class FamilyRow:
    family: str
    tp: int
    layout: str
    rungs: dict


def family_rungs() -> list[FamilyRow]:
    """Which rung each supported family's per-rank shapes take here, per TP size and pool dtype."""
    rows = []
    for name, hv in GDN_SHAPES.items():
        for tp in TP_SIZES:
            hv_r, hk_r = hv // tp, GDN_KEY_HEADS // tp
            rungs = {}
            for label, sd in (("bf16 pool", torch.bfloat16), ("fp32 pool", torch.float32)):
                rungs[f"prefill ({label})"] = gdn_prefill_rung(hv_r, hk_r, GDN_HEAD_DIM, torch.bfloat16, sd)
                rungs[f"decode ({label})"] = gdn_decode_rung(hv_r, hk_r, GDN_HEAD_DIM, torch.bfloat16, sd)
                rungs[f"verify ({label})"] = gdn_verify_rung(hv_r, hk_r, GDN_HEAD_DIM, torch.bfloat16, sd)
            rows.append(FamilyRow(name, tp, f"({hv_r}, {hk_r}) D={GDN_HEAD_DIM}", rungs))
    for tp in (1, 2):
        ch = CONV_CHANNELS // tp
        rows.append(FamilyRow("LFM2 / LFM2-MoE / LFM2-VL short conv", tp, f"W={CONV_WIDTH} C={ch}",
                              {"decode (bf16)": conv_update_rung(CONV_WIDTH, ch, torch.bfloat16),
                               "decode (fp16)": conv_update_rung(CONV_WIDTH, ch, torch.float16),
                               "verify (bf16)": conv_verify_rung(CONV_WIDTH, ch, torch.bfloat16),
                               "verify (fp16)": conv_verify_rung(CONV_WIDTH, ch, torch.float16)}))
    return rows


def report() -> dict:
    return {
        "chip": seam.chip_generation(),
        "sgl_kernel_npu_version": seam.kernel_package_version(),
        "kernels": installed_kernels(),
        "families": [dict(family=r.family, tp=r.tp, layout=r.layout, rungs=r.rungs) for r in family_rungs()],
    }


def render(info: dict, w) -> None:
    w(f"\nKernels (chip: {info['chip'] or 'no NPU / unknown'}, sgl-kernel-npu: "
      f"{info['sgl_kernel_npu_version'] or 'not installed'})\n")
    for k in info["kernels"]:
        w(f"  {'present' if k['present'] else 'absent ':7s}  {k['kernel']}"
          + (f"  [{k['variant']}]" if k["variant"] else "") + f"  (rungs: {', '.join(k['used_by'])})\n")
    w("\nRungs the supported families' shapes take on this machine (first choice; a call-time refusal "
      "moves to the next)\n")
    for row in info["families"]:
        rungs = ", ".join(f"{k}: {v}" for k, v in row["rungs"].items())
        w(f"  {row['family']:40s} TP={row['tp']} {row['layout']:16s} {rungs}\n")
