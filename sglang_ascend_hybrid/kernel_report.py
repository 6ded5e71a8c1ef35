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
    """Each kernel the plugin can use: present or not, and which variant."""
    from sglang_ascend_hybrid.ops.conv import contract as conv_contract
    from sglang_ascend_hybrid.ops.gdn import contract as caps
    from sglang_ascend_hybrid.ops.gdn import dispatch

    version = seam.kernel_package_version()
    mega = seam.available(dispatch.OP_MEGA)
    rows = [
        dict(kernel="torch.ops.npu.chunk_gated_delta_rule", present=seam.available(dispatch.OP_NPU_CHUNK),
             variant="sgl-kernel-npu (PR #747); fp32 states only on Ascend 950"),
        dict(kernel="torch.ops.npu.recurrent_gated_delta_rule", present=seam.available(dispatch.OP_NPU_RECURRENT),
             variant="sgl-kernel-npu, bf16 only (not built for Ascend 950)"),
        dict(kernel="sgl_kernel_npu run_mega_chunk_gdn", present=mega,
             variant=(f"{caps.mega_variant(version).name} head set (wheel version {version or 'unknown'})"
                      if mega else "absent (sgl-kernel-npu before 2026.05.01.post3)")),
        dict(kernel="sgl_kernel_npu chunk_gated_delta_rule_npu (Triton)", present=seam.available(dispatch.OP_TRITON),
             variant=""),
        dict(kernel="torch.ops.npu.causal_conv1d", present=seam.available(conv_contract.OP_ACLNN),
             variant="sgl-kernel-npu (not built for Ascend 950)"),
        dict(kernel="sgl_kernel_npu causal_conv1d_fn_v2 / causal_conv1d_update_npu_v2",
             present=seam.available(conv_contract.OP_FN_V2) and seam.available(conv_contract.OP_UPDATE_V2),
             variant="unmerged sgl-kernel-npu branch (sglang PR #38252)"),
        dict(kernel="sgl_kernel_npu causal_conv1d_update_v2", present=seam.available(conv_contract.OP_UPDATE_V2_MAIN),
             variant="released main"),
        dict(kernel="npu_fused_infer_attention_score", present=seam.available("npu_fused_infer_attention_score"),
             variant="torch_npu"),
    ]
    return rows


def gdn_prefill_rung(value_heads: int, key_heads: int, head_dim: int, dtype: torch.dtype,
                     state_dtype: torch.dtype, device: Optional[str] = None) -> str:
    """The prefill rung the runtime ladder picks first for this layout (no kernel is called)."""
    from sglang_ascend_hybrid.ops.gdn import dispatch

    dev = device or _probe_device()
    T = 2
    q = torch.zeros(1, T, key_heads, head_dim, dtype=dtype, device=dev)
    v = torch.zeros(1, T, value_heads, head_dim, dtype=dtype, device=dev)
    g = torch.zeros(1, T, value_heads, device=dev)
    state = torch.zeros(1, value_heads, head_dim, head_dim, dtype=state_dtype, device=dev)
    call = dispatch.ChunkCall(q, q, v, g, g.to(dtype), torch.tensor([0, T], device=dev), state, 1.0)
    return dispatch.PREFILL.choose(call.signature(), call).name


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


def conv_update_rung(width: int, channels: int, dtype: torch.dtype, device: Optional[str] = None) -> str:
    from sglang_ascend_hybrid.ops.conv import dispatch as conv_dispatch

    dev = device or _probe_device()
    x = torch.zeros(1, channels, dtype=dtype, device=dev)
    pool = torch.zeros(2, width - 1, channels, dtype=dtype, device=dev)   # window-major NPU pool
    weight = torch.zeros(channels, width, dtype=dtype, device=dev)
    call = conv_dispatch._UpdateCall(x, pool.transpose(1, 2), weight, None, None,
                                     torch.zeros(1, dtype=torch.int32, device=dev), -1)
    sig = conv_dispatch._signature("update", width, x, weight, call.conv_state)
    return conv_dispatch.UPDATE_LADDER.choose(sig, call).name


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
                rungs[f"verify ({label})"] = gdn_verify_rung(hv_r, hk_r, GDN_HEAD_DIM, torch.bfloat16, sd)
            rows.append(FamilyRow(name, tp, f"({hv_r}, {hk_r}) D={GDN_HEAD_DIM}", rungs))
    for tp in (1, 2):
        ch = CONV_CHANNELS // tp
        rows.append(FamilyRow("LFM2 / LFM2-MoE / LFM2-VL short conv", tp, f"W={CONV_WIDTH} C={ch}",
                              {"decode (bf16)": conv_update_rung(CONV_WIDTH, ch, torch.bfloat16),
                               "decode (fp16)": conv_update_rung(CONV_WIDTH, ch, torch.float16)}))
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
          + (f"  [{k['variant']}]" if k["variant"] else "") + "\n")
    w("\nRungs the supported families' shapes take on this machine (first choice; a call-time refusal "
      "moves to the next)\n")
    for row in info["families"]:
        rungs = ", ".join(f"{k}: {v}" for k, v in row["rungs"].items())
        w(f"  {row['family']:40s} TP={row['tp']} {row['layout']:16s} {rungs}\n")
