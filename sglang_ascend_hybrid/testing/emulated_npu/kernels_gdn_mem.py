"""CPU emulators of the sgl-kernel-npu GDN-side helpers and memory kernels SGLang calls directly.

Part of the emulated Ascend NPU device: every "npu" tensor there is a CPU tensor, so each emulator
is plain torch.  ``OPS`` maps ``"sgl_kernel_npu.<module>:<attr>"`` (exactly as SGLang imports it)
to the emulator.

Source of every op unless its docstring says otherwise: sgl-project/sgl-kernel-npu at commit
f425bdf1e191a7682296d3b2ed0b927d4e37d671, under ``python/sgl_kernel_npu/sgl_kernel_npu/``.  The ops
are Triton kernels whose source is readable, so each emulator copies what the kernel computes
(float32 math, output dtypes, defects).  Where a kernel addresses memory with offsets computed from
its integer arguments instead of the tensors' strides, or would leave output unwritten or read out
of bounds, the emulator raises instead (``ValueError`` / ``TypeError`` naming argument, value and
expectation).  Checks the source itself makes with ``assert`` raise ``AssertionError``.

Not emulated here (other files): norm / rotary ops, MoE ops, the GDN chunk / recurrent / causal
conv1d ops.  ``mamba.mamba_state_update_triton:move_intermediate_cache`` maps to the package's
existing emulator.
"""

from __future__ import annotations

from typing import Callable

import torch

from sglang_ascend_hybrid.emulators.gdn_gating import fused_gdn_gating_kernel_without_sigmoid, fused_gdn_gating_npu
from sglang_ascend_hybrid.emulators.gdn_l2norm import l2norm_fwd
from sglang_ascend_hybrid.emulators.mamba_state_update import emulate_move_intermediate_cache

SGL_KERNEL_NPU_COMMIT = "f425bdf1e191a7682296d3b2ed0b927d4e37d671"


# ----------------------------------------------------------------------------- checks


def _is_power_of_two(n: int) -> bool:
    return n > 0 and (n & (n - 1)) == 0


def _require_tensor(name: str, t) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")


def _require_ndim(name: str, t: torch.Tensor, ndim: int) -> None:
    _require_tensor(name, t)
    if t.dim() != ndim:
        raise ValueError(f"{name}: expected a {ndim}-D tensor, got shape {tuple(t.shape)}")


def _require_contiguous(name: str, t: torch.Tensor, why: str) -> None:
    if not t.is_contiguous():
        raise ValueError(f"{name}: expected a contiguous tensor ({why}), got shape {tuple(t.shape)} "
                         f"strides {t.stride()}")


def _require_shape(name: str, t: torch.Tensor, shape: tuple) -> None:
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {tuple(t.shape)}")


def _require_power_of_two(name: str, value: int, why: str) -> None:
    if not _is_power_of_two(int(value)):
        raise ValueError(f"{name}={value}: expected a power of two ({why})")


# ----------------------------------------------------------------------------- fla/utils.py


def _check_qkvzba_inputs(mixed_qkvz, mixed_ba, qkvz_cols: int, ba_cols: int) -> None:
    _require_ndim("mixed_qkvz", mixed_qkvz, 2)
    _require_ndim("mixed_ba", mixed_ba, 2)
    _require_shape("mixed_qkvz", mixed_qkvz, (mixed_qkvz.shape[0], qkvz_cols))
    _require_shape("mixed_ba", mixed_ba, (mixed_qkvz.shape[0], ba_cols))
    why = "the kernel addresses rows with a row stride computed from the head arguments"
    _require_contiguous("mixed_qkvz", mixed_qkvz, why)
    _require_contiguous("mixed_ba", mixed_ba, why)


def _qkvzba_outputs(mixed_qkvz, mixed_ba, num_heads_v: int, head_v: int, qkv_cols: int):
    rows = mixed_qkvz.shape[0]
    mixed_qkv = torch.empty(rows, qkv_cols, dtype=mixed_qkvz.dtype, device=mixed_qkvz.device)
    z = torch.empty(rows, num_heads_v, head_v, dtype=mixed_qkvz.dtype, device=mixed_qkvz.device)
    b = torch.empty(rows, num_heads_v, dtype=mixed_ba.dtype, device=mixed_ba.device)
    a = torch.empty(rows, num_heads_v, dtype=mixed_ba.dtype, device=mixed_ba.device)
    return mixed_qkv, z, b, a


def fused_qkvzba_split_reshape_cat(mixed_qkvz, mixed_ba, num_heads_qk, num_heads_v, head_qk, head_v):
    """``sgl_kernel_npu.fla.utils.fused_qkvzba_split_reshape_cat`` (interleaved input, Qwen3-Next).

    Source: sgl-project/sgl-kernel-npu ``python/sgl_kernel_npu/sgl_kernel_npu/fla/utils.py`` at
    f425bdf1e191a7682296d3b2ed0b927d4e37d671, host ``fused_qkvzba_split_reshape_cat`` and
    ``fused_qkvzba_split_reshape_cat_kernel``.  Per qk-head group ``h`` the input row holds
    ``[q_h | k_h | v_h (ratio*head_v) | z_h (ratio*head_v)]`` and ``mixed_ba`` row holds
    ``[b_h (ratio) | a_h (ratio)]``; output ``mixed_qkv = [all q | all k | all v]`` ``[T, qkv]``,
    ``z`` ``[T, Hv, Dv]``, ``b``/``a`` ``[T, Hv]`` (``b``/``a`` in ``mixed_ba``'s dtype).  A pure copy.

    Strict where the kernel is silent: it addresses rows with strides computed from the head
    arguments (inputs must be contiguous with exactly that width), uses ``num_heads_v //
    num_heads_qk`` (must divide, or heads go unwritten) and ``tl.arange`` over ``head_qk``,
    ``ratio * head_v`` and ``ratio`` (Triton needs powers of two).
    SGLang: ``models/qwen3_next.py`` (0.5.20-0.5.23), positional ``(qkvz, ba, cdiv(k_heads, tp),
    cdiv(v_heads, tp), head_k_dim, head_v_dim)``.
    """
    if num_heads_qk <= 0 or num_heads_v % num_heads_qk:
        raise ValueError(f"num_heads_v={num_heads_v}: expected a positive multiple of num_heads_qk={num_heads_qk} "
                         f"(the kernel uses num_heads_v // num_heads_qk heads per group)")
    ratio = num_heads_v // num_heads_qk
    for name, value in (("head_qk", head_qk), ("num_heads_v // num_heads_qk", ratio),
                        ("(num_heads_v // num_heads_qk) * head_v", ratio * head_v)):
        _require_power_of_two(name, value, "the kernel takes tl.arange over it")
    group_cols = 2 * head_qk + 2 * ratio * head_v
    _check_qkvzba_inputs(mixed_qkvz, mixed_ba, num_heads_qk * group_cols, num_heads_qk * 2 * ratio)
    rows = mixed_qkvz.shape[0]
    qkv_cols = num_heads_qk * head_qk * 2 + num_heads_v * head_v
    mixed_qkv, z, b, a = _qkvzba_outputs(mixed_qkvz, mixed_ba, num_heads_v, head_v, qkv_cols)
    groups = mixed_qkvz.view(rows, num_heads_qk, group_cols)
    q_end, k_end, v_end = head_qk, 2 * head_qk, 2 * head_qk + ratio * head_v
    total_q = num_heads_qk * head_qk
    mixed_qkv[:, :total_q] = groups[:, :, :q_end].reshape(rows, total_q)
    mixed_qkv[:, total_q:2 * total_q] = groups[:, :, q_end:k_end].reshape(rows, total_q)
    mixed_qkv[:, 2 * total_q:] = groups[:, :, k_end:v_end].reshape(rows, num_heads_v * head_v)
    z.copy_(groups[:, :, v_end:].reshape(rows, num_heads_v, head_v))
    ba = mixed_ba.view(rows, num_heads_qk, 2 * ratio)
    b.copy_(ba[:, :, :ratio].reshape(rows, num_heads_v))
    a.copy_(ba[:, :, ratio:].reshape(rows, num_heads_v))
    return mixed_qkv, z, b, a


def fused_qkvzba_split_reshape_cat_contiguous(mixed_qkvz, mixed_ba, num_heads_qk, num_heads_v, head_qk, head_v,
                                              block_size_col=1024):
    """``sgl_kernel_npu.fla.utils.fused_qkvzba_split_reshape_cat_contiguous`` (Qwen3.5 layout).

    Source: sgl-project/sgl-kernel-npu ``python/sgl_kernel_npu/sgl_kernel_npu/fla/utils.py`` at
    f425bdf1e191a7682296d3b2ed0b927d4e37d671, host ``fused_qkvzba_split_reshape_cat_contiguous`` and
    ``fused_qkvzba_split_reshape_cat_contiguous_kernel``.  Input row ``[all q | all k | all v | all z]``,
    ``mixed_ba`` row ``[all b (Hv) | all a (Hv)]``; outputs as the interleaved variant (a copy).

    Strict where the kernel is silent: rows addressed with strides computed from the head arguments
    (inputs must be contiguous with exactly that width); ``tl.arange(0, num_heads_v)`` and
    ``tl.arange(0, block_size_col)`` (powers of two).
    SGLang: ``models/qwen3_5.py`` (0.5.21-0.5.23; 0.5.20 does not import it), positional
    ``(qkvz, ba, k_heads_tp, v_heads_tp, head_k_dim, head_v_dim)``.
    """
    _require_power_of_two("num_heads_v", num_heads_v, "the kernel takes tl.arange(0, NUM_HEADS_V) for b and a")
    _require_power_of_two("block_size_col", block_size_col, "the kernel takes tl.arange over it")
    total_q, total_v = num_heads_qk * head_qk, num_heads_v * head_v
    _check_qkvzba_inputs(mixed_qkvz, mixed_ba, 2 * total_q + 2 * total_v, 2 * num_heads_v)
    rows = mixed_qkvz.shape[0]
    qkv_cols = 2 * total_q + total_v
    mixed_qkv, z, b, a = _qkvzba_outputs(mixed_qkvz, mixed_ba, num_heads_v, head_v, qkv_cols)
    mixed_qkv.copy_(mixed_qkvz[:, :qkv_cols])
    z.copy_(mixed_qkvz[:, qkv_cols:].reshape(rows, num_heads_v, head_v))
    b.copy_(mixed_ba[:, :num_heads_v])
    a.copy_(mixed_ba[:, num_heads_v:])
    return mixed_qkv, z, b, a


# Identity-keyed result cache of sgl-kernel-npu's ``tensor_cache`` decorator (fla/utils.py): the most
# recent 4 calls; a tensor argument matches only the *same object* (``is``), so a cu_seqlens tensor
# changed in place since a cached call returns the stale result, as on the device.
_CHUNK_INDICES_CACHE: list = []
_TENSOR_CACHE_SIZE = 4


def _cached_chunk_indices(cu_seqlens, chunk_size):
    for i, (last_cu, last_size, result) in enumerate(_CHUNK_INDICES_CACHE):
        if last_cu is cu_seqlens and last_size == chunk_size and type(last_size) is type(chunk_size):
            _CHUNK_INDICES_CACHE.append(_CHUNK_INDICES_CACHE.pop(i))
            return result
    return None


def prepare_chunk_indices(cu_seqlens, chunk_size):
    """``sgl_kernel_npu.fla.utils.prepare_chunk_indices``: ``[num_chunks, 2]`` rows ``(seq, chunk)``.

    Source: sgl-project/sgl-kernel-npu ``python/sgl_kernel_npu/sgl_kernel_npu/fla/utils.py`` at
    f425bdf1e191a7682296d3b2ed0b927d4e37d671 (``prepare_lens`` casts to int64; ``prepare_chunk_indices``;
    both under ``@tensor_cache``, copied: results cached by argument identity, 4 entries).  The result
    has ``cu_seqlens``'s dtype and device.  A ``cu_seqlens`` of one element fails in ``torch.cat`` of
    nothing, as the source does.
    SGLang: ``hardware_backend/npu/attention/ascend_gdn_backend.py`` ``chunk_gdn`` (0.5.21-0.5.23),
    ``prepare_chunk_indices(cu_seqlens, 64)``; 0.5.20 only from the KDA backend.
    """
    _require_ndim("cu_seqlens", cu_seqlens, 1)
    cached = _cached_chunk_indices(cu_seqlens, chunk_size)
    if cached is not None:
        return cached
    cu64 = cu_seqlens.to(torch.int64)
    lens = cu64[1:] - cu64[:-1]
    chunks_per_seq = ((lens + chunk_size - 1) // chunk_size).tolist()
    indices = torch.cat([torch.arange(n) for n in chunks_per_seq])
    result = torch.stack([indices.eq(0).cumsum(0) - 1, indices], 1).to(cu_seqlens)
    if len(_CHUNK_INDICES_CACHE) >= _TENSOR_CACHE_SIZE:
        _CHUNK_INDICES_CACHE.pop(0)
    _CHUNK_INDICES_CACHE.append((cu_seqlens, chunk_size, result))
    return result


# ----------------------------------------------------------------------------- fla/fused_gdn_gating.py


# fused_gdn_gating_npu, fused_gdn_gating_kernel_without_sigmoid: the plugin's own emulators
# (sglang_ascend_hybrid/emulators/gdn_gating.py, their source cited there), which the GDN decode's seam
# op uses as well.  SGLang calls both positionally ``(layer.A_log, a, b, layer.dt_bias)``
# (``layers/attention/linear/gdn_backend.py`` and ``hardware_backend/npu/attention/ascend_gdn_backend.py``,
# 0.5.20-0.5.23); it stores beta_output in b's dtype where SGLang's CUDA kernel stores float32.


# ----------------------------------------------------------------------------- fla/l2norm.py


# l2norm_fwd: the plugin's own emulator (sglang_ascend_hybrid/emulators/gdn_l2norm.py, its source cited
# there), which the GDN prefill's seam op uses as well.


# ----------------------------------------------------------------------------- fla/layernorm_gated.py


def _check_layer_norm_inputs(x, weight, bias, z, out, group_size):
    _require_ndim("x", x, 2)
    m, n = x.shape
    assert n % group_size == 0, f"group_size={group_size}: must divide x.shape[1]={n}"
    assert x.stride(-1) == 1, f"x: last-dim stride must be 1, got {x.stride()}"
    if z is not None:
        assert z.stride(-1) == 1, f"z: last-dim stride must be 1, got {z.stride()}"
        assert tuple(z.shape) == (m, n), f"z: expected shape {(m, n)}, got {tuple(z.shape)}"
    assert tuple(weight.shape) == (n,), f"weight: expected shape {(n,)}, got {tuple(weight.shape)}"
    assert weight.stride(-1) == 1, f"weight: last-dim stride must be 1, got {weight.stride()}"
    if bias is not None:
        assert bias.stride(-1) == 1, f"bias: last-dim stride must be 1, got {bias.stride()}"
        assert tuple(bias.shape) == (n,), f"bias: expected shape {(n,)}, got {tuple(bias.shape)}"
    if out is not None:
        assert out.shape == x.shape, f"out: expected shape {tuple(x.shape)}, got {tuple(out.shape)}"


def _gated_norm_rows(x, weight, bias, z, eps, norm_before_gate, is_rms_norm):
    """One group of the 1-pass kernel on ``[M, G]`` float32 rows -> ``(y, mean or None, rstd)``."""
    if z is not None and not norm_before_gate:
        x = x * (z * torch.sigmoid(z))
    mean = x.mean(dim=1) if not is_rms_norm else None
    xbar = x - mean[:, None] if not is_rms_norm else x
    rstd = 1.0 / torch.sqrt((xbar * xbar).sum(dim=1) / x.shape[1] + eps)
    y = xbar * rstd[:, None] * weight[None, :]
    if bias is not None:
        y = y + bias[None, :]
    if z is not None and norm_before_gate:
        y = y * (z * torch.sigmoid(z))
    return y, mean, rstd


def layer_norm_fwd_npu(x, weight, bias, eps, z=None, out=None, group_size=None, norm_before_gate=True,
                       is_rms_norm=False, activation=None):
    """``sgl_kernel_npu.fla.layernorm_gated.layer_norm_fwd_npu`` -> ``(out, mean, rstd)``.

    Source: sgl-project/sgl-kernel-npu ``python/sgl_kernel_npu/sgl_kernel_npu/fla/layernorm_gated.py``
    at f425bdf1e191a7682296d3b2ed0b927d4e37d671 (``layer_norm_fwd_npu``, ``_layer_norm_fwd_1pass_kernel_npu``).
    Per row and group (float32): optional pre-gate ``x *= z * sigmoid(z)`` (``norm_before_gate=False``),
    (RMS)norm with ``rstd = 1 / sqrt(var + eps)``, ``* weight (+ bias)``, optional post-gate; the gate is
    always SiLU (``activation`` is accepted and ignored, as in the source).  ``out`` (given: written in
    place; else ``empty_like(x)``) in its dtype; ``mean`` float32 ``[groups*M]`` or ``None`` for RMS
    norm; ``rstd`` float32 ``[groups*M]``, index ``group * M + row``.  The source's asserts raise
    ``AssertionError`` here too (so a 3-D ``z`` fails, as on the device).
    Strict: for a non-RMS norm with ``group_size`` not a power of two the kernel's mean sums masked,
    unset lanes (``tl.load`` without ``other``): undefined, so this raises ``ValueError``.
    SGLang: ``sglang/kernels/ops/attention/fla/layernorm_gated.py`` ``rms_norm_gated`` (0.5.20-0.5.23)
    imports it as ``_layer_norm_fwd`` and calls ``(x, weight, bias, eps, z=z, group_size=...,
    norm_before_gate=..., is_rms_norm=..., activation=...)``; reached from ``RMSNormGated`` in
    Qwen3.5 / Qwen3-Next GDN layers.
    """
    group_size = x.shape[-1] if group_size is None else group_size
    _check_layer_norm_inputs(x, weight, bias, z, out, group_size)
    if not is_rms_norm and not _is_power_of_two(group_size):
        raise ValueError(f"group_size={group_size}: a non-RMS norm needs a power of two here (the kernel's mean "
                         f"would sum unset masked lanes)")
    if out is None:
        out = torch.empty_like(x)
    assert out.stride(-1) == 1, f"out: last-dim stride must be 1, got {out.stride()}"
    m, n = x.shape
    ngroups = n // group_size
    mean = None if is_rms_norm else torch.empty(ngroups * m, dtype=torch.float32, device=x.device)
    rstd = torch.empty(ngroups * m, dtype=torch.float32, device=x.device)
    for g in range(ngroups):
        cols = slice(g * group_size, (g + 1) * group_size)
        y, g_mean, g_rstd = _gated_norm_rows(
            x[:, cols].float(), weight[cols].float(), None if bias is None else bias[cols].float(),
            None if z is None else z[:, cols].float(), eps, norm_before_gate, is_rms_norm)
        out[:, cols] = y.to(out.dtype)
        rstd[g * m:(g + 1) * m] = g_rstd
        if mean is not None:
            mean[g * m:(g + 1) * m] = g_mean
    return out, mean, rstd


# ----------------------------------------------------------------------------- mem_cache/allocator.py


def _check_alloc_extend_args(grid, pre_lens, seq_lens, last_loc, free_pages, out_indices, bs_upper, page_size):
    for name, t in (("pre_lens_ptr", pre_lens), ("seq_lens_ptr", seq_lens), ("last_loc_ptr", last_loc),
                    ("free_page_ptr", free_pages), ("out_indices", out_indices)):
        _require_ndim(name, t, 1)
        _require_contiguous(name, t, "the kernel addresses it by flat offsets")
    if not (isinstance(grid, tuple) and len(grid) >= 1 and all(int(g) == 1 for g in grid[1:])):
        raise ValueError(f"grid={grid}: expected (bs,) (SGLang launches alloc_extend_kernel[(bs,)])")
    bs = int(grid[0])
    for name, t in (("pre_lens_ptr", pre_lens), ("seq_lens_ptr", seq_lens), ("last_loc_ptr", last_loc)):
        if t.numel() < bs:
            raise ValueError(f"{name}: has {t.numel()} elements, the grid reads {bs} (out of bounds)")
    _require_power_of_two("bs_upper", bs_upper, "tl.arange(0, bs_upper)")
    _require_power_of_two("page_size", page_size, "tl.arange(0, page_size)")
    if bs > bs_upper:
        raise ValueError(f"bs_upper={bs_upper}: expected >= grid size {bs} (the prefix sums would miss rows)")
    extend = seq_lens[:bs].to(torch.int64) - pre_lens[:bs].to(torch.int64)
    if bool((extend < 0).any()):
        raise ValueError(f"seq_lens_ptr: expected seq_lens >= pre_lens, got extend lengths {extend.tolist()}")
    if int(extend.sum()) != out_indices.numel():
        raise ValueError(f"out_indices: has {out_indices.numel()} elements, the batch extends by "
                         f"{int(extend.sum())} tokens (rows would stay unwritten or be written out of bounds)")
    return bs


def _ceil_div(a: int, b: int) -> int:
    return (a + b - 1) // b


def _free_page(free_pages, index: int) -> int:
    if not 0 <= index < free_pages.numel():
        raise ValueError(f"free_page_ptr: the kernel reads index {index}, it has {free_pages.numel()} pages "
                         f"(out of bounds)")
    return int(free_pages[index])


def _alloc_one_request(pid, pre, seq, last_loc, free_pages, page_size, max_num_extend_tokens, block_size):
    """Program ``pid`` of ``alloc_extend_kernel``: its slots and the output offset they start at."""
    output_start = int((seq[:pid + 1] - pre[:pid + 1]).sum()) - int(seq[pid] - pre[pid])
    new_pages = [_ceil_div(int(s), page_size) - _ceil_div(int(p), page_size) for s, p in zip(seq, pre)]
    new_page_start = sum(new_pages[:pid + 1]) - new_pages[pid]
    seq_len, pre_len = int(seq[pid]), int(pre[pid])
    part1 = min(seq_len, _ceil_div(pre_len, page_size) * page_size) - pre_len
    slots = [int(last_loc[pid]) + 1 + i for i in range(max(part1, 0))]
    if pre_len + part1 == seq_len:
        return output_start, slots
    part2 = seq_len // page_size * page_size - _ceil_div(pre_len, page_size) * page_size
    covered = _ceil_div(max_num_extend_tokens, block_size) * block_size
    if part2 > covered:
        raise ValueError(f"max_num_extend_tokens={max_num_extend_tokens}: the kernel's loop covers {covered} slots, "
                         f"request {pid} needs {part2} in full pages (rows would stay unwritten)")
    slots += [_free_page(free_pages, new_page_start + i // page_size) * page_size + i % page_size
              for i in range(part2)]
    if pre_len + part1 + part2 == seq_len:
        return output_start, slots
    part3 = seq_len - seq_len // page_size * page_size
    last_page = _free_page(free_pages, new_page_start + new_pages[pid] - 1)
    return output_start, slots + [last_page * page_size + i for i in range(part3)]


def _alloc_extend(grid, pre_lens_ptr, seq_lens_ptr, last_loc_ptr, free_page_ptr, out_indices, bs_upper, page_size,
                  max_num_extend_tokens, BLOCK_SIZE=2048):
    bs = _check_alloc_extend_args(grid, pre_lens_ptr, seq_lens_ptr, last_loc_ptr, free_page_ptr, out_indices,
                                  bs_upper, page_size)
    pre, seq = pre_lens_ptr[:bs].tolist(), seq_lens_ptr[:bs].tolist()
    pre_t, seq_t = torch.tensor(pre, dtype=torch.int64), torch.tensor(seq, dtype=torch.int64)
    for pid in range(bs):
        start, slots = _alloc_one_request(pid, pre_t, seq_t, last_loc_ptr, free_page_ptr, page_size,
                                          max_num_extend_tokens, BLOCK_SIZE)
        if slots:
            out_indices[start:start + len(slots)] = torch.tensor(slots, dtype=torch.int64).to(out_indices.dtype)


class _AllocExtendKernel:
    """``sgl_kernel_npu.mem_cache.allocator.alloc_extend_kernel``: a ``@triton.jit`` kernel SGLang
    launches as ``alloc_extend_kernel[(bs,)](...)``, so the emulator is indexed by the grid first.

    Source: sgl-project/sgl-kernel-npu ``python/sgl_kernel_npu/sgl_kernel_npu/mem_cache/allocator.py`` at
    f425bdf1e191a7682296d3b2ed0b927d4e37d671.  Program ``pid`` writes request ``pid``'s new KV slots into
    ``out_indices`` (in place) at the exclusive prefix sum of extend lengths: part 1 continues the old
    partial page (``last_loc + 1 + i``), part 2 fills whole new pages from ``free_page_ptr`` (at the
    exclusive prefix sum of new-page counts), part 3 starts the last new partial page.  The same as
    SGLang's ``alloc_extend_naive``.
    Strict: grid ``(bs,)`` with ``bs <= bs_upper``; ``bs_upper`` and ``page_size`` powers of two
    (``tl.arange``); ``seq_lens >= pre_lens``; ``out_indices`` exactly the batch's extend tokens (else
    unwritten rows / out-of-bounds writes); every free-page read in bounds; part 2 within the kernel's
    ``cdiv(max_num_extend_tokens, BLOCK_SIZE) * BLOCK_SIZE`` loop.
    SGLang: ``hardware_backend/npu/allocator_npu.py`` ``alloc_extend`` (0.5.20-0.5.23), positional
    ``(prefix_lens, seq_lens, last_loc, free_pages, out_indices(int64), next_power_of_2(bs), page_size,
    next_power_of_2(extend_num_tokens))``; ``alloc_decode`` there is plain torch (no kernel).
    """

    def __getitem__(self, grid) -> Callable:
        grid = tuple(grid) if isinstance(grid, (tuple, list)) else (grid,)

        def launch(*args, **kwargs):
            _alloc_extend(grid, *args, **kwargs)

        return launch

    def __call__(self, *args, **kwargs):
        raise TypeError("alloc_extend_kernel: a Triton kernel is launched as alloc_extend_kernel[grid](...)")


alloc_extend_kernel = _AllocExtendKernel()


OPS: dict[str, Callable] = {
    "sgl_kernel_npu.fla.utils:fused_qkvzba_split_reshape_cat": fused_qkvzba_split_reshape_cat,
    "sgl_kernel_npu.fla.utils:fused_qkvzba_split_reshape_cat_contiguous": fused_qkvzba_split_reshape_cat_contiguous,
    "sgl_kernel_npu.fla.utils:prepare_chunk_indices": prepare_chunk_indices,
    "sgl_kernel_npu.fla.fused_gdn_gating:fused_gdn_gating_npu": fused_gdn_gating_npu,
    "sgl_kernel_npu.fla.fused_gdn_gating:fused_gdn_gating_kernel_without_sigmoid":
        fused_gdn_gating_kernel_without_sigmoid,
    "sgl_kernel_npu.fla.l2norm:l2norm_fwd": l2norm_fwd,
    "sgl_kernel_npu.fla.layernorm_gated:layer_norm_fwd_npu": layer_norm_fwd_npu,
    "sgl_kernel_npu.mem_cache.allocator:alloc_extend_kernel": alloc_extend_kernel,
    "sgl_kernel_npu.mamba.mamba_state_update_triton:move_intermediate_cache": emulate_move_intermediate_cache,
}
