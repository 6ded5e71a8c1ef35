"""CPU emulators of the Ascend causal-conv1d kernels, with their contracts.

Three device ops take part in the short-conv ladder
(:mod:`sglang_ascend_hybrid.ops.causal_conv1d`):

``causal_conv1d`` (``torch.ops.npu.causal_conv1d``, AscendC, as called by
    SGLang's ``ascend_gdn_backend.py``): ``x [T, dim]``, ``weight [W, dim]``,
    ``conv_states`` window-major ``[slots, window, dim]`` contiguous with the
    state in the last ``W - 1`` rows, ``run_mode`` 0 (prefill, varlen by
    ``query_start_loc``) or 1 (decode).  Returns ``[T, dim]``.  Refuses widths
    outside 2-4, ``dim % 16 != 0`` and dtypes other than fp16 / bf16 with a
    ``RuntimeError`` (the real op's aclnn shape check).
``sgl_kernel_npu.mamba.causal_conv1d:causal_conv1d_fn_v2``: varlen prefill on
    a window-major per-layer pool ``[slots, W - 1, dim]``; ``x [dim, T]``.
    Pad rows (and only those) are redirected to the reserved slot 0, which is
    scribbled on: that is the real op's documented behaviour.
``sgl_kernel_npu.mamba.causal_conv1d:causal_conv1d_update_npu_v2``: decode on
    the same pool; pad rows are skipped.

The emulators loop over sequences in plain torch on purpose: they are an
independent second implementation next to the vectorised reference.
Speculative-verify features of the real ops (``num_accepted_tokens``) are not
emulated and raise ``NotImplementedError``.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

OP_ACLNN = "causal_conv1d"
OP_FN_V2 = "sgl_kernel_npu.mamba.causal_conv1d:causal_conv1d_fn_v2"
OP_UPDATE_V2 = "sgl_kernel_npu.mamba.causal_conv1d:causal_conv1d_update_npu_v2"


def _refuse_unsupported(name: str, width: int, dim: int, dtype: torch.dtype) -> None:
    if not 2 <= width <= 4:
        raise RuntimeError(f"{name}: unsupported conv width {width}; check failed: width in [2, 4]")
    if dim % 16:
        raise RuntimeError(f"{name}: unsupported dim {dim}; check failed: dim % 16 == 0")
    if dtype not in (torch.float16, torch.bfloat16):
        raise RuntimeError(f"{name}: unsupported dtype {dtype}; check failed: fp16 / bf16")


def _conv_one(seq: torch.Tensor, init: torch.Tensor, weight_dw: torch.Tensor,
              bias: Optional[torch.Tensor], silu: bool) -> torch.Tensor:
    """seq [dim, L], init [dim, W-1], weight_dw [dim, W] -> [dim, L] (fp32)."""
    width = weight_dw.shape[1]
    full = torch.cat([init.float(), seq.float()], dim=-1)
    out = torch.zeros_like(seq, dtype=torch.float32)
    for k in range(width):  # out[t] = sum_k w[k] * full[t + k]
        out += weight_dw[:, k:k + 1].float() * full[:, k:k + seq.shape[1]]
    if bias is not None:
        out += bias.float()[:, None]
    return F.silu(out) if silu else out


def emulate_npu_causal_conv1d(x, weight, conv_states=None, bias=None, query_start_loc=None,
                              cache_indices=None, has_initial_state=None,
                              num_accepted_tokens=None, activation_mode=0, pad_slot_id=-1,
                              run_mode=0):
    if num_accepted_tokens is not None:
        raise NotImplementedError("emulator: speculative verify (num_accepted_tokens) is not emulated")
    width, dim = weight.shape
    _refuse_unsupported("causal_conv1d", width, dim, x.dtype)
    if x.dim() != 2 or x.shape[1] != dim:
        raise RuntimeError(f"causal_conv1d: x shape {tuple(x.shape)} check failed: [T, {dim}]")
    if conv_states is None or conv_states.dim() != 3 or conv_states.shape[2] != dim \
            or conv_states.shape[1] < width - 1 or not conv_states.is_contiguous():
        raise RuntimeError("causal_conv1d: conv_states shape check failed: contiguous [slots, window, dim]")
    s = width - 1
    out = torch.zeros_like(x)
    qsl = query_start_loc.tolist()
    for i in range(len(qsl) - 1):
        slot = int(cache_indices[i])
        start, end = qsl[i], qsl[i + 1]
        if slot == pad_slot_id or end == start:
            continue
        window = conv_states[slot]  # [window, dim]
        if run_mode == 0 and not (has_initial_state is not None and bool(has_initial_state[i])):
            init = torch.zeros(s, dim, dtype=x.dtype)
        else:
            init = window[-s:]
        seq = x[start:end].t()
        out[start:end] = _conv_one(seq, init.t(), weight.t(), bias, activation_mode == 1).t().to(x.dtype)
        rows = torch.cat([window.to(x.dtype), x[start:end]], dim=0)[-window.shape[0]:]
        if run_mode == 0:
            rows = torch.cat([init.to(x.dtype), x[start:end]], dim=0)[-s:]
            window[-s:] = rows.to(window.dtype)
        else:  # decode shifts the whole window
            window.copy_(rows.to(window.dtype))
    return out


def _pool_rows(pool: torch.Tensor, dim: int, state_len: int) -> torch.Tensor:
    """A per-slot [state_len, dim] accessor of either pool layout (like the real op)."""
    if pool.shape[-1] == dim and pool.shape[-2] == state_len:
        return pool
    if pool.shape[-2] == dim and pool.shape[-1] == state_len:
        return pool.transpose(1, 2)
    raise AssertionError(f"conv-state pool {tuple(pool.shape)} matches neither "
                         f"(slots, {dim}, {state_len}) nor (slots, {state_len}, {dim})")


def emulate_causal_conv1d_fn_v2(x, weight, bias, query_start_loc, cache_indices,
                                has_initial_state, conv_states, activation, pad_slot_id=-1):
    assert x.dim() == 2, "NPU causal_conv1d prefill requires the packed (dim, cu_seq) layout"
    dim = x.shape[0]
    width = weight.shape[1]
    s = width - 1
    pool = _pool_rows(conv_states, dim, s)
    silu = activation in ("silu", "swish")
    out = torch.zeros_like(x)
    qsl = query_start_loc.tolist()
    for i in range(len(qsl) - 1):
        slot = int(cache_indices[i])
        slot = 0 if slot == pad_slot_id else slot  # real op: pads write the reserved slot 0
        start, end = qsl[i], qsl[i + 1]
        use_init = has_initial_state is not None and bool(has_initial_state[i])
        init = pool[slot].t().to(x.dtype) if use_init else torch.zeros(dim, s, dtype=x.dtype)
        seq = x[:, start:end]
        out[:, start:end] = _conv_one(seq, init, weight, bias, silu).to(x.dtype)
        pool[slot] = torch.cat([init, seq], dim=-1)[:, -s:].t().to(pool.dtype)
    return out


def emulate_causal_conv1d_update_npu_v2(x, conv_state, weight, bias=None, activation=None,
                                        conv_state_indices=None, pad_slot_id=-1):
    squeeze = x.dim() == 2
    x3 = x.unsqueeze(-1) if squeeze else x
    batch, dim, _ = x3.shape
    s = weight.shape[1] - 1
    pool = _pool_rows(conv_state, dim, s)
    silu = activation in ("silu", "swish")
    out = torch.zeros_like(x3)
    for i in range(batch):
        slot = int(conv_state_indices[i]) if conv_state_indices is not None else i
        if slot == pad_slot_id:
            continue
        init = pool[slot].t().to(x.dtype)
        out[i] = _conv_one(x3[i], init, weight, bias, silu).to(x.dtype)
        pool[slot] = torch.cat([init, x3[i]], dim=-1)[:, -s:].t().to(pool.dtype)
    return out.squeeze(-1) if squeeze else out


def emulators() -> dict:
    """Name -> emulator, for :func:`sglang_ascend_hybrid.ops.seam.install_emulators`."""
    return {
        OP_ACLNN: emulate_npu_causal_conv1d,
        OP_FN_V2: emulate_causal_conv1d_fn_v2,
        OP_UPDATE_V2: emulate_causal_conv1d_update_npu_v2,
    }
