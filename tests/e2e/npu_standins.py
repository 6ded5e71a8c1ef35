"""CPU stand-ins for the NPU helpers SGLang's Ascend GDN backend calls directly (not
through the plugin): what ``sgl_kernel_npu`` / ``torch.ops.npu`` provide on a device.

They are plain torch, written from SGLang's own CUDA/Triton counterparts' semantics
(``sglang/kernels/ops/attention/linear/fused_gdn_gating.py``, ``l2norm_fwd``) and from
sgl-project/sgl-kernel-npu ``csrc/causal_conv1d/op_host/causal_conv1d.cpp`` at f425bdf1 for
``torch.ops.npu.causal_conv1d``.  The
ops the plugin itself calls (the GDN chunk op, the mega kernel, the conv ops of the
short-conv ladder) are never replaced here: they are the plugin's emulators behind
the seam, or the plugin's torch rung.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn.functional as F


def fused_gdn_gating(A_log, a, b, dt_bias, beta=1.0, threshold=20.0):
    """g = -exp(A_log) * softplus(a + dt_bias) (fp32), beta = sigmoid(b); both [1, T, H]."""
    g = -A_log.float().exp() * F.softplus(a.float() + dt_bias.float(), beta=beta, threshold=threshold)
    return g.unsqueeze(0), b.float().sigmoid().to(b.dtype).unsqueeze(0)


def l2norm_fwd(x, eps: float = 1e-6):
    xf = x.float()
    return (xf * torch.rsqrt((xf * xf).sum(-1, keepdim=True) + eps)).to(x.dtype)


def prepare_chunk_indices(cu_seqlens, chunk_size):
    rows = []
    b = cu_seqlens.tolist()
    for s in range(len(b) - 1):
        rows += [[s, c] for c in range((b[s + 1] - b[s] + chunk_size - 1) // chunk_size)]
    return torch.tensor(rows, dtype=cu_seqlens.dtype).reshape(-1, 2)


def causal_conv1d(x, weight, conv_states, bias=None, query_start_loc=None, cache_indices=None,
                  has_initial_state=None, num_accepted_tokens=None, activation_mode=0, pad_slot_id=-1,
                  run_mode=0):
    """``torch.ops.npu.causal_conv1d`` semantics in plain torch, any float dtype: x [T, dim]
    varlen, weight [W, dim], conv_states [slots, state_len, dim] window-major, state rows
    [0, W-1); run_mode 0 prefill (has_initial_state), 1 update (state always used)."""
    assert num_accepted_tokens is None, "speculative verify is not part of the whole-model plan"
    width = weight.shape[0]
    s = width - 1
    out = torch.empty_like(x)
    bounds = query_start_loc.tolist()
    for i in range(len(bounds) - 1):
        slot = int(cache_indices[i])
        lo, hi = bounds[i], bounds[i + 1]
        if slot == pad_slot_id or hi == lo:
            continue
        use_state = run_mode == 1 or (has_initial_state is not None and bool(has_initial_state[i]))
        init = conv_states[slot, :s].float() if use_state else x.new_zeros(s, x.shape[1], dtype=torch.float32)
        full = torch.cat([init, x[lo:hi].float()])
        y = sum(weight[k].float() * full[k:k + hi - lo] for k in range(width))
        if bias is not None:
            y = y + bias.float()
        out[lo:hi] = (F.silu(y) if activation_mode else y).to(x.dtype)
        conv_states[slot, :s] = full[-s:].to(conv_states.dtype)
    return out


def sigmoid_gating_delta_rule_decode(**kwargs):
    """What SGLang's ``gdn_triton`` binds on NPU as ``fused_sigmoid_gating_delta_rule_update``: the
    sgl-kernel-npu decode entry the installed SGLang imports, here the decode emulator behind the
    seam (``sglang_ascend_hybrid.emulators.gdn_decode``, key first by default, as the kernel's
    readable source addresses the pool).  The plugin's decode hook replaces the call that reaches
    it; without the hook, SGLang's own route would run it on the pool."""
    from sglang_ascend_hybrid.ops import seam
    from sglang_ascend_hybrid.ops.gdn.decode import contract as decode_contract

    return seam.call(decode_contract.DECODE_ENTRIES[decode_contract.installed_decode_entry()], **kwargs)


def entry_route_serves_prefill() -> bool:
    """Whether the installed SGLang sends GDN prefill on NPU to sgl-kernel-npu's Triton entry through
    ``GDNKernelDispatcher.extend`` (the releases of patch gdn-extend-ladder; read from the registry,
    which verifies the route of every release, without importing the NPU backend)."""
    from sglang_ascend_hybrid import patches

    return patches.release_state(patches.by_name("gdn-extend-ladder")) is None


def triton_chunk_entry(*args, **kwargs):
    """sgl-kernel-npu's Triton prefill entry ``fla.chunk.chunk_gated_delta_rule_npu``: its emulator
    behind the seam (:func:`sglang_ascend_hybrid.emulators.gdn_triton_chunk.make_triton_chunk_emulator`)."""
    from sglang_ascend_hybrid.ops import seam
    from sglang_ascend_hybrid.ops.gdn import contract

    if not seam.is_emulated(contract.OP_TRITON):
        raise NotImplementedError("chunk_gated_delta_rule_npu: no emulator of the Triton entry behind the seam")
    return seam.call(contract.OP_TRITON, *args, **kwargs)


def layer_norm_fwd(x, weight, bias, eps, z=None, out=None, group_size=None, norm_before_gate=True,
                   is_rms_norm=False, activation="swish", **_):
    """sgl-kernel-npu's ``layer_norm_fwd_npu`` (what SGLang's gated RMSNorm calls on NPU):
    x, z ``[M, N]``; per group of ``group_size``; ``norm(x) * silu(z)`` when
    ``norm_before_gate``, else ``norm(x * silu(z))``.  Returns (y, mean, rstd)."""
    M, N = x.shape
    gs = group_size or N
    xf = x.float().view(M, N // gs, gs)
    zf = None if z is None else F.silu(z.float().reshape(M, N // gs, gs))
    if zf is not None and not norm_before_gate:
        xf = xf * zf
    mean = None if is_rms_norm else xf.mean(-1, keepdim=True)
    centred = xf if is_rms_norm else xf - mean
    rstd = torch.rsqrt((centred * centred).mean(-1, keepdim=True) + eps)
    y = centred * rstd * weight.float().view(N // gs, gs)
    if bias is not None:
        y = y + bias.float().view(N // gs, gs)
    if zf is not None and norm_before_gate:
        y = y * zf
    y = y.reshape(M, N).to(x.dtype)
    if out is not None:
        out.copy_(y)
        y = out
    return y, None if mean is None else mean.reshape(-1), rstd.reshape(-1)


@contextlib.contextmanager
def ascend_gdn_helpers(conv_op=causal_conv1d):
    """Route the Ascend GDN backend's direct NPU calls to the stand-ins above
    (``conv_op``: the stand-in, or the plugin's conv emulator in bf16 runs)."""
    from sglang.kernels.ops.attention.fla import layernorm_gated
    from sglang.srt.hardware_backend.npu.attention import ascend_gdn_backend as mod
    from sglang.srt.layers.attention.linear.kernels import gdn_triton

    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(mod, "fused_gdn_gating", fused_gdn_gating)
        mp.setattr(mod, "l2norm_fwd", l2norm_fwd, raising=False)  # the chunk_gdn route (0.5.21+) only
        mp.setattr(mod, "prepare_chunk_indices", prepare_chunk_indices, raising=False)
        if entry_route_serves_prefill():
            # the older route: on NPU gdn_triton binds sgl-kernel-npu's Triton entry as its chunk kernel
            # (``from sgl_kernel_npu.fla.chunk import chunk_gated_delta_rule_npu`` at import); the
            # plugin's gdn-sgl-kernel-npu-chunk hook then wraps it and rebinds this alias
            import sgl_kernel_npu.fla.chunk as skn_chunk

            mp.setattr(skn_chunk, "chunk_gated_delta_rule_npu", triton_chunk_entry)
            mp.setattr(gdn_triton, "chunk_gated_delta_rule", triton_chunk_entry)
            mp.setattr(gdn_triton, "is_npu", lambda: True)  # its extend's call-time branch (gathered states)
        mp.setattr(gdn_triton, "fused_sigmoid_gating_delta_rule_update", sigmoid_gating_delta_rule_decode)
        mp.setattr(torch.ops.npu, "causal_conv1d", conv_op, raising=False)
        mp.setattr(layernorm_gated, "_layer_norm_fwd", layer_norm_fwd)
        yield mod
    finally:
        mp.undo()


# ---------------------------------------------------------------------------------------------------
# The GDN models' projection split (a layout copy): SGLang's Triton kernels
# (sglang/kernels/ops/attention/triton_gdn_fused_proj.py) run under TRITON_INTERPRET=1 on a CPU at about
# 35 ms per launch of one token row, which makes prompts of several pages take minutes.  The plain
# torch forms below move the same elements; tests/e2e/test_prefix_cache.py checks them against
# the Triton kernels bit for bit.


def qkvzba_split_interleaved(mixed_qkvz, mixed_ba, num_heads_qk, num_heads_v, head_qk, head_v):
    """``fused_qkvzba_split_reshape_cat``: per key head [q | k | v group | z group] and [b group | a group]."""
    T, r = mixed_qkvz.shape[0], num_heads_v // num_heads_qk
    qkvz = mixed_qkvz.reshape(T, num_heads_qk, 2 * head_qk + 2 * r * head_v)
    q, k = qkvz[..., :head_qk], qkvz[..., head_qk:2 * head_qk]
    v = qkvz[..., 2 * head_qk:2 * head_qk + r * head_v]
    z = qkvz[..., 2 * head_qk + r * head_v:]
    ba = mixed_ba.reshape(T, num_heads_qk, 2 * r)
    mixed_qkv = torch.cat([q.reshape(T, -1), k.reshape(T, -1), v.reshape(T, -1)], dim=-1)
    return (mixed_qkv, z.reshape(T, num_heads_v, head_v).contiguous(), ba[..., :r].reshape(T, num_heads_v).contiguous(),
            ba[..., r:].reshape(T, num_heads_v).contiguous())


def qkvzba_split_contiguous(mixed_qkvz, mixed_ba, num_heads_qk, num_heads_v, head_qk, head_v):
    """``fused_qkvzba_split_reshape_cat_contiguous``: [all q | all k | all v | all z] and [all b | all a]."""
    T = mixed_qkvz.shape[0]
    qkv = 2 * num_heads_qk * head_qk + num_heads_v * head_v
    return (mixed_qkvz[:, :qkv].contiguous(),
            mixed_qkvz[:, qkv:qkv + num_heads_v * head_v].reshape(T, num_heads_v, head_v).contiguous(),
            mixed_ba[:, :num_heads_v].contiguous(), mixed_ba[:, num_heads_v:2 * num_heads_v].contiguous())


def sigmoid_gate_mul(attn_output, gate, inplace: bool = False, quant: bool = False):
    """``fused_sigmoid_mul`` (``sglang/kernels/ops/elementwise/elementwise.py``), Qwen3.5's attention
    output gate off NPU: ``attn_output * sigmoid(gate)`` computed in fp32 and stored in
    ``attn_output``'s dtype, a 3-D gate ``[T, heads, head_dim]`` read as ``attn_output``'s 2-D shape
    (torch's fp32 ``exp`` and the interpreter's numpy one may differ in the last bit).  Triton's CPU
    interpreter runs the kernel at ~2.5 s a call."""
    if quant:
        raise ValueError("sigmoid_gate_mul: quant=True (the FP8 output path) has no stand-in; expected quant=False")
    g = gate.reshape(attn_output.shape).float()
    result = (attn_output.float() * torch.sigmoid(g)).to(attn_output.dtype)
    if inplace:
        return attn_output.copy_(result)
    return result


@contextlib.contextmanager
def torch_model_kernels():
    """The GDN models' own Triton kernels replaced by their torch forms where the model modules bound
    them: the projection split (:func:`qkvzba_split_interleaved` / :func:`qkvzba_split_contiguous`) and
    Qwen3.5's attention output gate (:func:`sigmoid_gate_mul`)."""
    import sglang.srt.models.qwen3_5 as qwen3_5
    import sglang.srt.models.qwen3_next as qwen3_next

    with pytest.MonkeyPatch.context() as mp:
        if hasattr(qwen3_next, "fused_qkvzba_split_reshape_cat"):
            mp.setattr(qwen3_next, "fused_qkvzba_split_reshape_cat", qkvzba_split_interleaved)
        if hasattr(qwen3_5, "fused_qkvzba_split_reshape_cat_contiguous"):
            mp.setattr(qwen3_5, "fused_qkvzba_split_reshape_cat_contiguous", qkvzba_split_contiguous)
        if hasattr(qwen3_5, "fused_sigmoid_mul"):
            mp.setattr(qwen3_5, "fused_sigmoid_mul", sigmoid_gate_mul)
        yield
