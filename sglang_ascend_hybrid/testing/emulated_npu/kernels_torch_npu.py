"""CPU emulators of the ``torch_npu`` / ``torch.ops.npu`` ops on SGLang's non-MoE forward path.

Part of the emulated Ascend NPU device: every "npu" tensor there is an ordinary CPU tensor,
so each emulator below is plain torch. The device forwards ``torch_npu.<name>`` to
``TORCH_NPU[name]`` and ``torch.ops.npu.<name>`` to ``TORCH_OPS_NPU[name]``.

Sources (nothing fetched is committed):

* op-plugin, https://github.com/Ascend/op-plugin at commit
  517f2e7d0f202f38b76310706cb977ca2388ad21 ("op-plugin 517f2e7d" below):
  ``op_plugin/config/op_plugin_functions.yaml`` (signatures), ``docs/zh/custom_APIs/torch_npu/*.md``
  (documented formulas), ``op_plugin/ops/atb/*.cpp`` (the ATB parameter blocks of the attention
  and KV-cache ops) and ``test/test_custom_ops/test_atb_*.py`` (their golden references).
* SGLang 0.5.20 - 0.5.23 call sites (``sglang/srt/...``), which fix the argument forms accepted.

The attention and KV-cache ops are ATB / CANN kernels whose source is not readable. Their
emulators are STRICT: they accept only the forms SGLang passes (shapes, dtypes, the causal
mask template, lengths that fit the block table) and raise ``ValueError`` / ``TypeError``
naming the argument otherwise. The norms, SwiGLU and rotary ops follow the documented formula.
"""

from __future__ import annotations

import math
from typing import Callable, Optional, Sequence

import torch

_HALF_DTYPES = (torch.float16, torch.bfloat16)
_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_ATB_MASK_LEN = 128
_FIA_MASK_LEN = 2048
_FIA_EXTEND_LAYOUT = "TND"
_FIA_DECODE_LAYOUT = "BSND"
_FIA_GRAPH_DECODE_LAYOUT = "BSH"


# --------------------------------------------------------------------------- checks


def _attention_dtypes() -> tuple:
    """fp16 / bf16, the ATB attention ops' and KV writes' dtypes; plus fp32 where the emulated device
    is asked to widen them (``SGLANG_ASCEND_HYBRID_EMULATED_NPU_WIDEN_FP32``): an instrument for
    fp32 numerics checks against transformers, not a contract -- on an NPU these ops refuse fp32."""
    from sglang_ascend_hybrid.envs import ENV

    return _FLOAT_DTYPES if ENV.EMULATED_NPU_WIDEN_FP32.get() else _HALF_DTYPES


def _check_tensor(name: str, t, *, dtypes=None, dim=None) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if dtypes is not None and t.dtype not in dtypes:
        raise TypeError(f"{name}: dtype {t.dtype} not supported, expected one of {list(dtypes)}")
    if dim is not None and t.dim() not in ((dim,) if isinstance(dim, int) else dim):
        raise ValueError(f"{name}: expected {dim} dims, got shape {tuple(t.shape)}")
    return t


def _check_same_dtype(name: str, t: torch.Tensor, ref_name: str, ref: torch.Tensor) -> None:
    if t.dtype != ref.dtype:
        raise TypeError(f"{name}: dtype {t.dtype} differs from {ref_name}'s dtype {ref.dtype}")


def _check_contiguous(name: str, t: torch.Tensor) -> None:
    if not t.is_contiguous():
        raise ValueError(f"{name}: must be contiguous (shape {tuple(t.shape)}, stride {t.stride()})")


def _check_int(name: str, value, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}: expected an int >= {minimum}, got {value!r}")
    return value


def _int_list(name: str, values) -> list[int]:
    """Lengths given as a list / tuple / numpy array / 1-D integer tensor, as SGLang passes them."""
    if isinstance(values, torch.Tensor):
        if values.dim() != 1 or values.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"{name}: expected a 1-D int32/int64 tensor, got {values.dtype} {tuple(values.shape)}")
        return [int(v) for v in values.tolist()]
    if hasattr(values, "tolist"):  # numpy array (SGLang's np.cumsum)
        values = values.tolist()
    if not isinstance(values, (list, tuple)) or not all(isinstance(v, int) for v in values):
        raise TypeError(f"{name}: expected a sequence of ints, got {values!r}")
    return list(values)


def _lengths_tensor(name: str, t, batch: int) -> list[int]:
    _check_tensor(name, t, dtypes=(torch.int32,), dim=1)
    if t.shape[0] != batch:
        raise ValueError(f"{name}: has {t.shape[0]} entries, expected one per sequence ({batch})")
    return [int(v) for v in t.tolist()]


def _check_heads(num_heads, num_kv_heads) -> tuple[int, int]:
    num_heads = _check_int("num_heads", num_heads)
    num_kv_heads = _check_int("num_kv_heads", num_kv_heads)
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads: {num_heads} is not a multiple of num_kv_heads={num_kv_heads}")
    return num_heads, num_kv_heads


def _check_paged_cache(key_cache, value_cache, num_kv_heads: int, dtype: torch.dtype) -> tuple[int, int, int]:
    """``[num_blocks, block_size, kv_heads, head_dim]`` K and V caches; returns (blocks, block, Dv)."""
    _check_tensor("key_cache", key_cache, dtypes=_attention_dtypes(), dim=4)
    _check_tensor("value_cache", value_cache, dtypes=_attention_dtypes(), dim=4)
    for name, cache in (("key_cache", key_cache), ("value_cache", value_cache)):
        if cache.dtype != dtype:
            raise TypeError(f"{name}: dtype {cache.dtype} differs from query dtype {dtype}")
        if cache.shape[2] != num_kv_heads:
            raise ValueError(f"{name}: shape {tuple(cache.shape)} has {cache.shape[2]} heads, expected {num_kv_heads}")
    if key_cache.shape[:2] != value_cache.shape[:2]:
        raise ValueError(f"value_cache: blocks {tuple(value_cache.shape[:2])} differ from key_cache's "
                         f"{tuple(key_cache.shape[:2])}")
    return key_cache.shape[0], key_cache.shape[1], value_cache.shape[3]


def _check_block_table(block_table, batch: int, kv_lens: Sequence[int], block_size: int, num_blocks: int) -> None:
    """Each sequence's KV length must fit its row, and the blocks it reads must exist."""
    _check_tensor("block_table", block_table, dtypes=(torch.int32,), dim=2)
    if block_table.shape[0] != batch:
        raise ValueError(f"block_table: has {block_table.shape[0]} rows, expected one per sequence ({batch})")
    for b, kv_len in enumerate(kv_lens):
        used = -(-kv_len // block_size)
        if used > block_table.shape[1]:
            raise ValueError(f"block_table: row {b} has {block_table.shape[1]} blocks, KV length {kv_len} "
                             f"needs {used} of size {block_size}")
        ids = block_table[b, :used]
        if used and (int(ids.min()) < 0 or int(ids.max()) >= num_blocks):
            raise ValueError(f"block_table: row {b} reads blocks {ids.tolist()}, outside [0, {num_blocks})")


# --------------------------------------------------------------------------- attention core


def _gather_paged(cache: torch.Tensor, block_row: torch.Tensor, length: int) -> torch.Tensor:
    """Tokens ``0 .. length-1`` of one sequence from a ``[blocks, block_size, heads, dim]`` cache."""
    block_size = cache.shape[1]
    used = -(-length // block_size)
    blocks = cache[block_row[:used].long()]
    return blocks.reshape(used * block_size, cache.shape[2], cache.shape[3])[:length]


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, causal: bool) -> torch.Tensor:
    """fp32 softmax attention of ``q [Lq, H, D]`` over ``k/v [Lk, Hkv, *]``; query ``i`` sits at
    position ``Lk - Lq + i`` (bottom-right aligned causal mask when ``causal``)."""
    group = q.shape[1] // k.shape[1]
    kf = k.float().repeat_interleave(group, dim=1)
    vf = v.float().repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.float(), kf) * scale
    if causal:
        q_pos = torch.arange(k.shape[0] - q.shape[0], k.shape[0]).unsqueeze(1)
        scores = scores.masked_fill(torch.arange(k.shape[0]).unsqueeze(0) > q_pos, float("-inf"))
    return torch.einsum("hqk,khd->qhd", torch.softmax(scores, dim=-1), vf)


def _paged_attention_rows(query, key_cache, value_cache, block_table, q_lens, kv_lens, scale, causal):
    """Attention of each sequence's packed query rows against its paged KV; fp32 ``[T, H, Dv]``.  A
    sequence with KV length 0 (a graph padding row, FIA only: its callers check) gives zero rows."""
    outs, start = [], 0
    for b, (q_len, kv_len) in enumerate(zip(q_lens, kv_lens)):
        if kv_len == 0:
            outs.append(query.new_zeros(q_len, query.shape[1], value_cache.shape[3], dtype=torch.float32))
            start += q_len
            continue
        k = _gather_paged(key_cache, block_table[b], kv_len)
        v = _gather_paged(value_cache, block_table[b], kv_len)
        outs.append(_attend(query[start:start + q_len], k, v, scale, causal))
        start += q_len
    return torch.cat(outs, dim=0)


def _check_atb_causal_mask(mask, dtype: torch.dtype) -> None:
    """The ``norm`` mask SGLang's ``AscendAttnMaskBuilder.generate_attn_mask(128, "norm", dtype)`` builds:
    128 x 128, zero on and below the diagonal, above it ``finfo(float32).min`` cast to fp16 (-inf)
    for fp16 and ``1`` for bf16 (the compressed causal template of MASK_TYPE_NORM_COMPRESS)."""
    _check_tensor("mask", mask, dtypes=(dtype,), dim=2)
    if tuple(mask.shape) != (_ATB_MASK_LEN, _ATB_MASK_LEN):
        raise ValueError(f"mask: shape {tuple(mask.shape)}, expected ({_ATB_MASK_LEN}, {_ATB_MASK_LEN})")
    masked_value = torch.tensor(torch.finfo(torch.float32).min if dtype == torch.float16 else 1.0).to(dtype)
    upper = torch.ones(_ATB_MASK_LEN, _ATB_MASK_LEN, dtype=torch.bool).triu_(1)
    expected = torch.zeros(_ATB_MASK_LEN, _ATB_MASK_LEN, dtype=dtype).masked_fill_(upper, masked_value)
    if not torch.equal(mask, expected):
        raise ValueError(f"mask: not the causal 'norm' template (zeros on/below the diagonal, {masked_value.item()} "
                         f"above) SGLang builds for {dtype}")


def _check_fia_causal_mask(mask) -> None:
    """SGLang's ``generate_mask_flag(2048)``: bool, True strictly above the diagonal (sparse_mode 3)."""
    _check_tensor("atten_mask", mask, dtypes=(torch.bool,), dim=2)
    expected = torch.ones(_FIA_MASK_LEN, _FIA_MASK_LEN, dtype=torch.bool).triu_(1)
    if tuple(mask.shape) != expected.shape or not torch.equal(mask, expected):
        raise ValueError(f"atten_mask: shape {tuple(mask.shape)}, expected the {_FIA_MASK_LEN}x{_FIA_MASK_LEN} "
                         "upper-triangular bool mask of sparse_mode=3")


def _check_out(out, shape_2d: tuple[int, int], shape_3d: tuple[int, int, int], dtype: torch.dtype) -> None:
    _check_tensor("out", out, dtypes=(dtype,))
    if tuple(out.shape) not in (shape_2d, shape_3d):
        raise ValueError(f"out: shape {tuple(out.shape)}, expected {shape_2d} or {shape_3d}")
    _check_contiguous("out", out)


def _query_rows(query, num_heads: int, head_dim: int) -> torch.Tensor:
    """``[T, H*D]`` or ``[T, H, D]`` query as ``[T, H, D]``."""
    _check_tensor("query", query, dtypes=_attention_dtypes(), dim=(2, 3))
    expected = (num_heads * head_dim,) if query.dim() == 2 else (num_heads, head_dim)
    if tuple(query.shape[1:]) != expected:
        raise ValueError(f"query: shape {tuple(query.shape)} does not hold {num_heads} heads of dim {head_dim}")
    return query.reshape(query.shape[0], num_heads, head_dim)


def _scale(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name}: expected a positive finite float, got {value!r}")
    return float(value)


# --------------------------------------------------------------------------- ATB attention


def npu_flash_attention_qlens(query, key_cache, value_cache, block_table, mask, seq_len, context_lens,
                              num_kv_heads, num_heads, scale_value, out) -> None:
    """``torch_npu._npu_flash_attention_qlens``: causal prefill (extend) over a paged KV cache.

    Source: op-plugin 517f2e7d ``op_plugin/ops/atb/SelfAttentionQlensAtb.cpp`` (ATB
    SelfAttentionOperation, calcType PREFIX_ENCODER, maskType MASK_TYPE_NORM_COMPRESS, isTriuMask=1,
    BSND) and the golden ``test/test_custom_ops/test_atb_flash_attention_qlens.py``
    (``ref_fa_with_prefix_cache``: sequence ``b``'s ``seq_len[b]`` query rows are its last tokens,
    attending causally to KV tokens ``0 .. context_lens[b]-1`` read through ``block_table``).
    The ATB kernel is closed source: STRICT to SGLang's call (``ascend_backend.py`` forward_extend,
    0.5.20 - 0.5.23, keyword form): query ``[T, H*D]``, caches ``[blocks, page, Hkv, D]``, block_table
    int32, the 128x128 causal ``norm`` mask, int32 ``seq_len`` / ``context_lens``, ``out`` ``[T, H*Dv]``
    written in place. Softmax in fp32 (the kernel's KERNELTYPE_HIGH_PRECISION); returns None.
    """
    num_heads, num_kv_heads = _check_heads(num_heads, num_kv_heads)
    head_dim = _check_tensor("key_cache", key_cache, dim=4).shape[3]
    q = _query_rows(query, num_heads, head_dim)
    num_blocks, block_size, v_dim = _check_paged_cache(key_cache, value_cache, num_kv_heads, query.dtype)
    _check_atb_causal_mask(mask, query.dtype)
    batch = _check_tensor("seq_len", seq_len, dim=1).shape[0]
    q_lens = _lengths_tensor("seq_len", seq_len, batch)
    kv_lens = _lengths_tensor("context_lens", context_lens, batch)
    for b, (q_len, kv_len) in enumerate(zip(q_lens, kv_lens)):
        if not 1 <= q_len <= kv_len:
            raise ValueError(f"seq_len: entry {b} is {q_len}, expected 1 <= seq_len <= context_lens ({kv_len})")
    if sum(q_lens) != q.shape[0]:
        raise ValueError(f"seq_len: sums to {sum(q_lens)}, query has {q.shape[0]} rows")
    _check_block_table(block_table, batch, kv_lens, block_size, num_blocks)
    _check_out(out, (q.shape[0], num_heads * v_dim), (q.shape[0], num_heads, v_dim), query.dtype)
    result = _paged_attention_rows(q, key_cache, value_cache, block_table, q_lens, kv_lens,
                                   _scale("scale_value", scale_value), causal=True)
    out.view(q.shape[0], num_heads, v_dim).copy_(result)


def npu_paged_attention(query, key_cache, value_cache, num_kv_heads, num_heads, scale_value, block_table,
                        context_lens, out, workspace=None) -> None:
    """``torch_npu._npu_paged_attention``: decode, one query row per sequence over its paged KV.

    Source: op-plugin 517f2e7d ``op_plugin/ops/atb/PagedAttentionAtb.cpp`` (ATB PagedAttentionOperation,
    maskType UNDEFINED, BSND) and the golden ``test/test_custom_ops/test_atb_paged_attention.py``
    (``ref_attention_impl``: row ``i`` attends, unmasked, to KV tokens ``0 .. context_lens[i]-1``).
    Closed ATB kernel: STRICT to SGLang's call (``ascend_backend.py`` forward_decode, 0.5.20 - 0.5.23):
    query ``[B, H, D]``, caches ``[blocks, page, Hkv, D]``, int32 ``block_table`` / ``context_lens``
    (every length >= 1 and within its block-table row), ``out`` ``[B, H, Dv]`` written in place;
    ``workspace`` must be None. Softmax in fp32; returns None.
    """
    if workspace is not None:
        raise ValueError(f"workspace: only None is emulated (graph capture is not), got {type(workspace).__name__}")
    num_heads, num_kv_heads = _check_heads(num_heads, num_kv_heads)
    _check_tensor("query", query, dtypes=_attention_dtypes(), dim=3)
    head_dim = _check_tensor("key_cache", key_cache, dim=4).shape[3]
    if tuple(query.shape[1:]) != (num_heads, head_dim):
        raise ValueError(f"query: shape {tuple(query.shape)}, expected [B, {num_heads}, {head_dim}]")
    num_blocks, block_size, v_dim = _check_paged_cache(key_cache, value_cache, num_kv_heads, query.dtype)
    batch = query.shape[0]
    kv_lens = _lengths_tensor("context_lens", context_lens, batch)
    if any(n < 1 for n in kv_lens):
        raise ValueError(f"context_lens: {kv_lens}, every sequence needs at least one KV token")
    _check_block_table(block_table, batch, kv_lens, block_size, num_blocks)
    _check_out(out, (batch, num_heads * v_dim), (batch, num_heads, v_dim), query.dtype)
    result = _paged_attention_rows(query, key_cache, value_cache, block_table, [1] * batch, kv_lens,
                                   _scale("scale_value", scale_value), causal=False)
    out.view(batch, num_heads, v_dim).copy_(result)


# --------------------------------------------------------------------------- FIA (ASCEND_USE_FIA=1)


_FIA_PAGED_KEYWORDS = frozenset({
    "atten_mask", "actual_seq_lengths", "actual_seq_lengths_kv", "block_table", "num_heads", "scale",
    "input_layout", "num_key_value_heads", "sparse_mode", "block_size",
})


def _fia_unpaged(query, key, value, **kwargs):
    """Non-paged calls go to the plugin's existing TND emulator (same op, other contract)."""
    from sglang_ascend_hybrid.emulators.fused_infer_attention import npu_fused_infer_attention_score

    return npu_fused_infer_attention_score(query, key, value, **kwargs)


def _fia_cache_4d(name: str, cache, block_size: int, num_kv_heads: int) -> torch.Tensor:
    """SGLang's ``cache.view(-1, page_size, Hkv * D)`` as ``[blocks, page, Hkv, D]``."""
    _check_tensor(name, cache, dtypes=_attention_dtypes(), dim=3)
    if cache.shape[1] != block_size or cache.shape[2] % num_kv_heads:
        raise ValueError(f"{name}: shape {tuple(cache.shape)}, expected [blocks, {block_size}, "
                         f"{num_kv_heads} * head_dim]")
    return cache.view(cache.shape[0], block_size, num_kv_heads, cache.shape[2] // num_kv_heads)


def _fia_query_lens(layout: str, query, actual_seq_lengths, batch_rows: int) -> list[int]:
    if layout == _FIA_DECODE_LAYOUT:
        if actual_seq_lengths is not None:
            raise ValueError(f"actual_seq_lengths: must be None for BSND decode, got {actual_seq_lengths!r}")
        if query.shape[1] != 1:
            raise ValueError(f"query: BSND decode expects S == 1, got shape {tuple(query.shape)}")
        return [1] * batch_rows
    ends = _int_list("actual_seq_lengths", actual_seq_lengths)
    if len(ends) != batch_rows or ends != sorted(ends) or (ends and ends[-1] != query.shape[0]):
        raise ValueError(f"actual_seq_lengths: {ends}, expected {batch_rows} non-decreasing cumulative ends "
                         f"ending at the query's {query.shape[0]} rows")
    return [e - s for s, e in zip([0] + ends[:-1], ends)]


def npu_fused_infer_attention_score(query, key, value, **kwargs):
    """``torch_npu.npu_fused_infer_attention_score``: :func:`_fia` with the arguments a replayed NPU graph
    passes (``actual_seq_lengths_kv`` as ``NPUGraph.update`` rebound it, torch_npu's IFA graph handler)."""
    return _fia(query, key, value, **_graph_rebound("npu_fused_infer_attention_score", kwargs))


def _fia(query, key, value, *, atten_mask=None, actual_seq_lengths=None, actual_seq_lengths_kv=None,
         block_table=None, num_heads=1, scale=1.0, input_layout="BSH", num_key_value_heads=0, sparse_mode=0,
         block_size=0, **unmodelled):
    """``torch_npu.npu_fused_infer_attention_score`` with a paged KV cache (``block_table``).

    Source: op-plugin 517f2e7d ``op_plugin/config/op_plugin_functions.yaml`` (signature) and
    ``docs/zh/custom_APIs/torch_npu/torch_npu-npu_fused_infer_attention_score.md`` (sparse_mode 3 is
    rightDownCausal with the 2048x2048 optimised mask; without ``softmax_lse_flag`` the second output
    is a ``(1,)`` zero tensor). Closed CANN kernel: STRICT to SGLang's two ASCEND_USE_FIA=1 calls in
    ``ascend_backend.py`` (0.5.20 - 0.5.23):

    * extend: ``input_layout="TND"``, query ``[T, H, D]``, key/value ``[blocks, page, Hkv*D]``,
      ``atten_mask`` = the 2048x2048 bool upper-triangular mask, ``sparse_mode=3``,
      ``actual_seq_lengths`` = cumulative query ends, ``actual_seq_lengths_kv`` = per-sequence KV lengths;
    * decode: ``input_layout="BSND"``, query ``[B, 1, H, D]``, no mask, ``sparse_mode=0``;
    * graph decode (the ``.out`` form, ASCEND_USE_FIA unset): ``input_layout="BSH"``, see :func:`_fia_bsh_decode`.

    Calls without ``block_table`` go to :mod:`sglang_ascend_hybrid.emulators.fused_infer_attention`.
    Any other argument set raises. Returns ``(out, zeros(1) fp32)``, ``out`` shaped like the query
    with the value's head dim, in the query dtype.
    """
    if block_table is None:
        return _fia_unpaged(query, key, value, atten_mask=atten_mask, actual_seq_lengths=actual_seq_lengths,
                            actual_seq_lengths_kv=actual_seq_lengths_kv, num_heads=num_heads, scale=scale,
                            input_layout=input_layout, num_key_value_heads=num_key_value_heads,
                            sparse_mode=sparse_mode, block_size=block_size, **unmodelled)
    if unmodelled:
        raise ValueError(f"{sorted(unmodelled)}: not emulated with block_table (SGLang never passes them)")
    num_heads, num_kv_heads = _check_heads(num_heads, num_key_value_heads)
    block_size = _check_int("block_size", block_size)
    if input_layout == _FIA_GRAPH_DECODE_LAYOUT:
        return _fia_bsh_decode(query, key, value, atten_mask=atten_mask, actual_seq_lengths=actual_seq_lengths,
                               actual_seq_lengths_kv=actual_seq_lengths_kv, block_table=block_table,
                               num_heads=num_heads, num_kv_heads=num_kv_heads, scale=scale,
                               sparse_mode=sparse_mode, block_size=block_size)
    if input_layout not in (_FIA_EXTEND_LAYOUT, _FIA_DECODE_LAYOUT):
        raise ValueError(f"input_layout: {input_layout!r}, expected 'TND' (extend), 'BSND' (decode) or 'BSH' "
                         "(graph decode)")
    is_extend = input_layout == _FIA_EXTEND_LAYOUT
    if sparse_mode != (3 if is_extend else 0):
        raise ValueError(f"sparse_mode: {sparse_mode!r}, SGLang's {input_layout} call uses {3 if is_extend else 0}")
    if is_extend:
        _check_fia_causal_mask(atten_mask)
    elif atten_mask is not None:
        raise ValueError("atten_mask: must be None for BSND decode")
    k4 = _fia_cache_4d("key", key, block_size, num_kv_heads)
    v4 = _fia_cache_4d("value", value, block_size, num_kv_heads)
    _check_tensor("query", query, dtypes=(key.dtype,), dim=3 if is_extend else 4)
    _check_same_dtype("value", value, "key", key)
    if tuple(query.shape[-2:]) != (num_heads, k4.shape[3]):
        raise ValueError(f"query: shape {tuple(query.shape)}, expected trailing ({num_heads}, {k4.shape[3]})")
    kv_lens = _int_list("actual_seq_lengths_kv", actual_seq_lengths_kv)
    batch = len(kv_lens)
    if not is_extend and query.shape[0] != batch:
        raise ValueError(f"query: {query.shape[0]} rows, actual_seq_lengths_kv has {batch}")
    q_lens = _fia_query_lens(input_layout, query, actual_seq_lengths, batch)
    for b, (q_len, kv_len) in enumerate(zip(q_lens, kv_lens)):
        # KV length 0: SGLang's graph padding rows (get_cuda_graph_seq_len_fill_value is 0 on Ascend, the
        # target-verify graph pads with them too): zero rows, the doc's empty-KV rule ("key/value 为空（S2=0）
        # 则 attention_out 按对应shape返回全0") applied per sequence, as in the BSH graph decode below
        if not (q_len >= 1 and (kv_len == 0 or q_len <= kv_len)):
            raise ValueError(f"actual_seq_lengths_kv: entry {b} is {kv_len} for {q_len} query rows "
                             "(expected 1 <= query rows <= KV length, or KV length 0)")
    _check_block_table(block_table, batch, kv_lens, block_size, k4.shape[0])
    rows = query.reshape(-1, num_heads, k4.shape[3])
    result = _paged_attention_rows(rows, k4, v4, block_table, q_lens, kv_lens, _scale("scale", scale),
                                   causal=is_extend)
    out = result.to(query.dtype).reshape(*query.shape[:-1], v4.shape[3])
    return out, torch.zeros(1, dtype=torch.float32)


def _graph_rebound(op: str, kwargs: dict) -> dict:
    """``kwargs`` as a replayed NPU graph passes them to ``op`` (what ``NPUGraph.update`` rebound)."""
    from sglang_ascend_hybrid.testing.emulated_npu import npu_module

    return npu_module.graph_op_arguments(op, kwargs)


def _fia_bsh_decode(query, key, value, *, atten_mask, actual_seq_lengths, actual_seq_lengths_kv, block_table,
                    num_heads, num_kv_heads, scale, sparse_mode, block_size):
    """FIA's ``input_layout="BSH"`` paged decode: SGLang's graph decode (``ascend_backend.py``
    forward_decode_graph, 0.5.23): query ``[B, 1, H*D]``, key/value ``[blocks, page, Hkv*D]`` (the
    doc's BnBsH cache, which BSH requires), no mask, ``sparse_mode=0``. A KV length of 0 -- SGLang's
    graph padding rows (``get_cuda_graph_seq_len_fill_value`` is 0 on Ascend) -- gives a zero row, as
    the doc's empty-KV rule ("key/value 为空（S2=0）则 attention_out 按对应shape返回全0") does for the
    whole batch. Returns ``(out [B, 1, H*Dv], zeros(1) fp32)``."""
    if atten_mask is not None or sparse_mode != 0 or actual_seq_lengths is not None:
        raise ValueError(f"BSH decode: atten_mask={type(atten_mask).__name__}, sparse_mode={sparse_mode!r}, "
                         f"actual_seq_lengths={actual_seq_lengths!r}; SGLang's graph decode passes None / 0 / None")
    k4 = _fia_cache_4d("key", key, block_size, num_kv_heads)
    v4 = _fia_cache_4d("value", value, block_size, num_kv_heads)
    _check_same_dtype("value", value, "key", key)
    _check_tensor("query", query, dtypes=(key.dtype,), dim=3)
    if query.shape[1] != 1 or query.shape[2] != num_heads * k4.shape[3]:
        raise ValueError(f"query: shape {tuple(query.shape)}, expected [B, 1, {num_heads} * {k4.shape[3]}]")
    kv_lens = _int_list("actual_seq_lengths_kv", actual_seq_lengths_kv)
    batch = query.shape[0]
    if len(kv_lens) != batch or any(n < 0 for n in kv_lens):
        raise ValueError(f"actual_seq_lengths_kv: {kv_lens}, expected {batch} lengths >= 0")
    _check_block_table(block_table, batch, kv_lens, block_size, k4.shape[0])
    rows = query.reshape(batch, num_heads, k4.shape[3])
    out = torch.zeros(batch, num_heads, v4.shape[3], dtype=torch.float32)
    live = [b for b, n in enumerate(kv_lens) if n > 0]
    if live:
        index = torch.tensor(live)
        out[index] = _paged_attention_rows(rows[index], k4, v4, block_table[index], [1] * len(live),
                                           [kv_lens[b] for b in live], _scale("scale", scale), causal=False)
    return out.to(query.dtype).reshape(batch, 1, num_heads * v4.shape[3]), torch.zeros(1, dtype=torch.float32)


def npu_fused_infer_attention_score_get_max_workspace(query, key, value, **kwargs) -> torch.Tensor:
    """``torch_npu._npu_fused_infer_attention_score_get_max_workspace``: the workspace the ``.out`` call
    takes (op-plugin 517f2e7d ``op_plugin/config/op_plugin_functions.yaml``: same arguments as the op,
    returns a Tensor; ``test/test_custom_ops/test_npu_fused_infer_attention_score_with_workspace.py``).
    Its content is the kernel's scratch: the emulated one is a 1-element uint8 tensor the ``.out``
    emulator asks for and never reads. The arguments are checked by running the op's emulator."""
    _fia(query, key, value, **kwargs)
    return torch.zeros(1, dtype=torch.uint8)


def npu_fused_infer_attention_score_out(query, key, value, *, workspace=None, out=None, softmax_lse_flag=False,
                                        **kwargs):
    """``torch_npu.npu_fused_infer_attention_score.out``: the op writing ``out=[attention_out, softmax_lse]``
    (op-plugin 517f2e7d ``op_plugin_functions.yaml``: ``... Tensor? workspace=None, Tensor(a!) attention_out,
    Tensor(b!) softmax_lse``); SGLang's graph decode (``ascend_backend.py`` forward_decode_graph) passes a
    workspace from ``_npu_fused_infer_attention_score_get_max_workspace`` and ``softmax_lse`` of shape (1,)
    (``softmax_lse_flag`` False: a (1,) zero, per the doc). STRICT: ``out`` two contiguous tensors of the
    result's shape / dtype and (1,) fp32. Returns ``out``."""
    if softmax_lse_flag:
        raise ValueError("softmax_lse_flag: only False is emulated (SGLang's graph decode does not ask the LSE)")
    if not isinstance(workspace, torch.Tensor):
        raise ValueError(f"workspace: expected the tensor _npu_fused_infer_attention_score_get_max_workspace "
                         f"returned, got {type(workspace).__name__}")
    if not isinstance(out, (list, tuple)) or len(out) != 2:
        raise ValueError(f"out: expected [attention_out, softmax_lse], got {type(out).__name__}")
    result, _ = _fia(query, key, value, **_graph_rebound("npu_fused_infer_attention_score.out", kwargs))
    attention_out, softmax_lse = out
    _check_tensor("attention_out", attention_out, dtypes=(result.dtype,))
    if tuple(attention_out.shape) != tuple(result.shape):
        raise ValueError(f"attention_out: shape {tuple(attention_out.shape)}, expected {tuple(result.shape)}")
    _check_contiguous("attention_out", attention_out)
    _check_tensor("softmax_lse", softmax_lse, dtypes=(torch.float32, query.dtype))
    if softmax_lse.numel() != 1:
        raise ValueError(f"softmax_lse: shape {tuple(softmax_lse.shape)}, expected (1,) without softmax_lse_flag")
    attention_out.copy_(result)
    softmax_lse.zero_()
    return out


npu_fused_infer_attention_score.out = npu_fused_infer_attention_score_out


# --------------------------------------------------------------------------- KV-cache writes


def npu_reshape_and_cache(key, value, key_cache, value_cache, slot_indices) -> None:
    """``torch_npu._npu_reshape_and_cache``: write token rows into paged K/V caches, in place.

    Source: op-plugin 517f2e7d ``op_plugin/ops/atb/ReshapeAndCachAtb.cpp`` (ATB ReshapeAndCacheOperation,
    K_CACHE_V_CACHE for ND caches) and ``test/test_custom_ops/test_atb_reshape_and_cache.py`` (slot ``s``
    is block ``s // block_size``, offset ``s % block_size``). Closed ATB kernel: STRICT to SGLang's call
    (``memory_pool_npu.py`` set_kv_buffer, 0.5.20 - 0.5.23): key ``[N, Hkv, D]``, value ``[N, Hkv, Dv]``,
    caches ``[blocks, page, Hkv, D]`` of the same dtype, ``slot_indices`` int32 ``[N]`` of distinct slots
    inside the cache (the op's behaviour on repeated slots is not documented), except SGLang's padding slot 0
    (``memory_pool_npu.py``: "The padded slot 0 is used for writing dummy outputs from padded tokens"; graph
    capture and padded graph replays write every padded token there): slot 0 may repeat, and its content is
    then undefined, so it is filled with NaN (float caches) where a read of it would show. Returns None.
    """
    _check_tensor("key", key, dtypes=_FLOAT_DTYPES + (torch.int8,), dim=3)
    _check_tensor("value", value, dim=3)
    _check_tensor("slot_indices", slot_indices, dtypes=(torch.int32,), dim=1)
    for name, rows, cache in (("key", key, key_cache), ("value", value, value_cache)):
        _check_tensor(f"{name}_cache", cache, dim=4)
        _check_same_dtype(name, rows, f"{name}_cache", cache)
        _check_contiguous(f"{name}_cache", cache)
        if rows.shape[0] != slot_indices.shape[0] or tuple(rows.shape[1:]) != tuple(cache.shape[2:]):
            raise ValueError(f"{name}: shape {tuple(rows.shape)}, expected [{slot_indices.shape[0]}, "
                             f"{cache.shape[2]}, {cache.shape[3]}] for {name}_cache {tuple(cache.shape)}")
    if key_cache.shape[:2] != value_cache.shape[:2]:
        raise ValueError(f"value_cache: blocks {tuple(value_cache.shape[:2])} differ from key_cache's "
                         f"{tuple(key_cache.shape[:2])}")
    _check_slots("slot_indices", slot_indices, key_cache.shape[0] * key_cache.shape[1], padding_slot=0)
    slots = slot_indices.long()
    key_cache.view(-1, *key_cache.shape[2:])[slots] = key
    value_cache.view(-1, *value_cache.shape[2:])[slots] = value
    if int((slots == 0).sum()) > 1:  # several padded tokens wrote the padding slot: which one landed is undefined
        for cache in (key_cache, value_cache):
            if cache.is_floating_point():
                cache.view(-1, *cache.shape[2:])[0] = float("nan")


def _check_slots(name: str, slots: torch.Tensor, capacity: int, padding_slot: Optional[int] = None) -> None:
    if slots.numel() == 0:
        return
    low, high = int(slots.min()), int(slots.max())
    if low < 0 or high >= capacity:
        raise ValueError(f"{name}: values in [{low}, {high}], expected within [0, {capacity})")
    if padding_slot is not None:
        slots = slots[slots != padding_slot]
    if torch.unique(slots).numel() != slots.numel():
        raise ValueError(f"{name}: repeated slots {slots.tolist()}; the op's order on duplicates is undocumented")


def npu_scatter_nd_update_(self, indices, updates) -> torch.Tensor:
    """``torch_npu.npu_scatter_nd_update_``: ``self[indices[i]] = updates[i]`` in place; returns ``self``.

    Source: op-plugin 517f2e7d ``op_plugin/config/op_plugin_functions.yaml``
    (``npu_scatter_nd_update_(Tensor(a!) self, Tensor indices, Tensor updates) -> Tensor(a!)``) and
    ``docs/zh/custom_APIs/torch_npu/torch_npu-npu_scatter_nd_update_.md``. Kernel closed: STRICT to the
    form SGLang uses (``memory_pool_npu.py`` FIA KV write, 0.5.20 - 0.5.23, and its other pools):
    ``indices`` int32/int64 ``[N, 1]`` (rows of the first dim, distinct, in range) and
    ``updates`` ``[N, *self.shape[1:]]`` of ``self``'s dtype.
    """
    _check_tensor("self", self)
    _check_tensor("indices", indices, dtypes=(torch.int32, torch.int64), dim=2)
    _check_tensor("updates", updates, dtypes=(self.dtype,))
    if indices.shape[1] != 1:
        raise ValueError(f"indices: shape {tuple(indices.shape)}, only [N, 1] (first-dim rows) is emulated")
    if tuple(updates.shape) != (indices.shape[0], *self.shape[1:]):
        raise ValueError(f"updates: shape {tuple(updates.shape)}, expected {(indices.shape[0], *self.shape[1:])}")
    _check_slots("indices", indices[:, 0], self.shape[0])
    self[indices[:, 0].long()] = updates
    return self


# --------------------------------------------------------------------------- norms


def _rms_norm_fp32(x: torch.Tensor, gamma_f32: torch.Tensor, epsilon: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``y = x * rstd * gamma`` in fp32 over ``gamma.dim()`` trailing dims; rstd keeps them as size 1."""
    dims = tuple(range(x.dim() - gamma_f32.dim(), x.dim()))
    rstd = torch.rsqrt(x.pow(2).mean(dim=dims, keepdim=True) + epsilon)
    return x * rstd * gamma_f32, rstd


def _check_norm_inputs(x, gamma, epsilon) -> None:
    _check_tensor("x", x, dtypes=_FLOAT_DTYPES)
    _check_tensor("gamma", gamma, dtypes=(x.dtype,))
    if gamma.dim() == 0 or gamma.dim() > x.dim() or tuple(x.shape[x.dim() - gamma.dim():]) != tuple(gamma.shape):
        raise ValueError(f"gamma: shape {tuple(gamma.shape)} is not the trailing shape of x {tuple(x.shape)}")
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or epsilon < 0:
        raise ValueError(f"epsilon: expected a float >= 0, got {epsilon!r}")


def npu_rms_norm(x, gamma, epsilon=1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch_npu.npu_rms_norm(x, gamma, epsilon) -> (y, rstd)``.

    Source: op-plugin 517f2e7d ``docs/zh/custom_APIs/torch_npu/（beta）torch_npu-npu_rms_norm.md``:
    ``y = x / sqrt(mean(x^2) + eps) * gamma`` over gamma's trailing dims; ``rstd`` fp32 shaped like x
    with those dims kept as 1; gamma has x's dtype. Computed in fp32, y cast to x's dtype.
    SGLang: ``RMSNorm.forward_npu`` (``layers/layernorm.py``, 0.5.20 - 0.5.23), ``(x, weight, eps)[0]``.
    """
    _check_norm_inputs(x, gamma, epsilon)
    y, rstd = _rms_norm_fp32(x.float(), gamma.float(), float(epsilon))
    return y.to(x.dtype), rstd


def npu_gemma_rms_norm(x, gamma, epsilon=1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch_npu.npu_gemma_rms_norm(x, gamma, epsilon) -> (y, rstd)``: RMSNorm scaled by ``1 + gamma``.

    Source: op-plugin 517f2e7d ``op_plugin/config/op_plugin_functions.yaml`` (signature; no formula doc in
    that tree) and the Gemma convention SGLang relies on: ``GemmaRMSNorm.forward_npu`` (``layers/layernorm.py``)
    calls it with the raw weight where ``forward_native`` multiplies by ``1 + weight``. Reached on Qwen3.5 /
    Qwen3-Next (GemmaRMSNorm without residual); on 0.5.23 through ``sgl_kernel_npu.norm.gemma_rmsnorm`` when
    that package has it, else this op. Computed in fp32 like :func:`npu_rms_norm`.
    """
    _check_norm_inputs(x, gamma, epsilon)
    y, rstd = _rms_norm_fp32(x.float(), 1.0 + gamma.float(), float(epsilon))
    return y.to(x.dtype), rstd


def npu_add_rms_norm(x1, x2, gamma, epsilon=1e-6) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``torch_npu.npu_add_rms_norm(x1, x2, gamma, epsilon) -> (y, rstd, x)`` with ``x = x1 + x2``.

    Source: op-plugin 517f2e7d ``docs/zh/custom_APIs/torch_npu/torch_npu-npu_add_rms_norm.md``: y and x
    have x1's dtype and shape, rstd is fp32. The sum is formed in fp32 and normalised from fp32 (the
    rounded sum is only the third output). SGLang (0.5.20 - 0.5.23): ``RMSNorm.forward_npu`` passes
    ``(residual, x, weight, eps)``; ``GemmaRMSNorm.forward_npu`` ``(residual, x, gemma_weight.to(x.dtype), eps)``.
    """
    _check_norm_inputs(x1, gamma, epsilon)
    _check_tensor("x2", x2, dtypes=(x1.dtype,))
    if x2.shape != x1.shape:
        raise ValueError(f"x2: shape {tuple(x2.shape)} differs from x1's {tuple(x1.shape)}")
    x_sum = x1.float() + x2.float()
    y, rstd = _rms_norm_fp32(x_sum, gamma.float(), float(epsilon))
    return y.to(x1.dtype), rstd, x_sum.to(x1.dtype)


# --------------------------------------------------------------------------- activation


def npu_swiglu(x, dim=-1) -> torch.Tensor:
    """``torch_npu.npu_swiglu(x, dim=-1)`` / ``torch.ops.npu.npu_swiglu``: ``silu(a) * b``, ``a, b = x.chunk(2, dim)``.

    Source: op-plugin 517f2e7d ``docs/zh/custom_APIs/torch_npu/（beta）torch_npu-npu_swiglu.md`` (x split in
    two halves along ``dim``, the first through Swish). fp32 compute, output in x's dtype. SGLang:
    ``SiluAndMul.forward_npu`` (``layers/activation.py``) and ``torch.ops.npu.npu_swiglu(hidden_states)``
    (``hardware_backend/npu/moe/activation.py`` / ``quantization/moe_methods.py``), 0.5.20 - 0.5.23.
    """
    _check_tensor("x", x, dtypes=_FLOAT_DTYPES)
    if isinstance(dim, bool) or not isinstance(dim, int) or not -x.dim() <= dim < x.dim():
        raise ValueError(f"dim: {dim!r} out of range for x of {x.dim()} dims")
    if x.shape[dim] % 2:
        raise ValueError(f"x: size {x.shape[dim]} along dim {dim} is odd, expected an even split")
    a, b = x.float().chunk(2, dim=dim)
    return (torch.nn.functional.silu(a) * b).to(x.dtype)


# --------------------------------------------------------------------------- rotary


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def npu_rotary_mul(x, r1, r2, rotary_mode="half", rotate=None) -> torch.Tensor:
    """``torch_npu.npu_rotary_mul(x, cos, sin)``: ``x * cos + rotate_half(x) * sin`` (``rotary_mode='half'``).

    Source: op-plugin 517f2e7d ``docs/zh/custom_APIs/torch_npu/torch_npu-npu_rotary_mul.md`` (half mode:
    ``x1, x2 = chunk(x, 2, -1); x_new = cat(-x2, x1); out = x * r1 + x_new * r2``; r1/r2 broadcast to x).
    STRICT to SGLang's form (``layers/rotary_embedding/utils.py`` ``apply_rotary_pos_emb_npu``):
    x ``[1, T, N, D]``, cos/sin ``[1, T, 1, D]``, mode 'half', no ``rotate``; same dtype. fp32 compute.
    """
    if rotary_mode != "half" or rotate is not None:
        raise ValueError(f"rotary_mode: only 'half' without rotate is emulated, got {rotary_mode!r}, rotate={rotate!r}")
    _check_tensor("x", x, dtypes=_FLOAT_DTYPES, dim=4)
    for name, r in (("r1", r1), ("r2", r2)):
        _check_tensor(name, r, dtypes=(x.dtype,), dim=4)
        if r.shape[-1] != x.shape[-1] or torch.broadcast_shapes(r.shape, x.shape) != x.shape:
            raise ValueError(f"{name}: shape {tuple(r.shape)} does not broadcast to x {tuple(x.shape)}")
    if x.shape[-1] % 2:
        raise ValueError(f"x: head dim {x.shape[-1]} is odd")
    xf = x.float()
    return (xf * r1.float() + _rotate_half(xf) * r2.float()).to(x.dtype)


def _mrope_rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, neox: bool) -> torch.Tensor:
    """Rotate the first ``2 * cos.shape[-1]`` dims of ``x [T, N, D]``; the rest pass through."""
    rot = 2 * cos.shape[-1]
    x_rot, x_pass = x[..., :rot], x[..., rot:]
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    if neox:
        x1, x2 = x_rot.chunk(2, dim=-1)
        rotated = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    else:
        x1, x2 = x_rot[..., 0::2], x_rot[..., 1::2]
        rotated = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)
    return torch.cat((rotated, x_pass), dim=-1)


def npu_mrope(positions, query, key, cos_sin_cache, head_size, *, mrope_section=None, rotary_mode="half",
              cache_mode="default") -> tuple[torch.Tensor, torch.Tensor]:
    """``torch_npu.npu_mrope`` as plain RoPE (``mrope_section=[0, 0, 0]``): returns ``(query, key)`` rotated.

    Source: op-plugin 517f2e7d ``docs/zh/custom_APIs/torch_npu/torch_npu-npu_mrope.md`` and
    ``op_plugin_functions.yaml``: cos_sin_cache ``[max_pos, rotary_dim]`` = ``cat(cos, sin)``, query/key
    ``[T, N*head_size]``, 1-D positions, 'half' = NeoX, 'interleave' = GPT-J, dims past rotary_dim pass
    through. STRICT to SGLang's ``RotaryEmbedding.forward_npu`` (``rotary_embedding/base.py``) call with
    ``mrope_section=[0, 0, 0]``; the multimodal (3-D positions) form is not emulated. fp32 compute.
    """
    if list(mrope_section or []) != [0, 0, 0] or cache_mode != "default":
        raise ValueError(f"mrope_section: only [0, 0, 0] with cache_mode 'default' is emulated, got "
                         f"{mrope_section!r}, {cache_mode!r}")
    if rotary_mode not in ("half", "interleave"):
        raise ValueError(f"rotary_mode: {rotary_mode!r}, expected 'half' or 'interleave'")
    head_size = _check_int("head_size", head_size)
    _check_tensor("positions", positions, dtypes=(torch.int32, torch.int64), dim=1)
    _check_tensor("query", query, dtypes=_FLOAT_DTYPES, dim=2)
    _check_tensor("key", key, dtypes=(query.dtype,), dim=2)
    _check_tensor("cos_sin_cache", cos_sin_cache, dtypes=_FLOAT_DTYPES, dim=2)
    rotary_dim = cos_sin_cache.shape[1]
    for name, t in (("query", query), ("key", key)):
        if t.shape[0] != positions.shape[0] or t.shape[1] % head_size:
            raise ValueError(f"{name}: shape {tuple(t.shape)}, expected [{positions.shape[0]}, N * {head_size}]")
    if rotary_dim % 2 or rotary_dim > head_size:
        raise ValueError(f"cos_sin_cache: rotary dim {rotary_dim} must be even and <= head_size {head_size}")
    if positions.numel() and (int(positions.min()) < 0 or int(positions.max()) >= cos_sin_cache.shape[0]):
        raise ValueError(f"positions: outside [0, {cos_sin_cache.shape[0]}) of cos_sin_cache")
    cos, sin = cos_sin_cache[positions.long()].float().chunk(2, dim=-1)
    neox = rotary_mode == "half"
    outs = []
    for t in (query, key):
        rotated = _mrope_rotate(t.float().view(t.shape[0], -1, head_size), cos, sin, neox)
        outs.append(rotated.reshape(t.shape).to(t.dtype))
    return outs[0], outs[1]


# --------------------------------------------------------------------------- format cast


_ACL_FORMAT_ND = 2


def npu_format_cast(tensor, acl_format, **kwargs) -> torch.Tensor:
    """``torch.ops.npu.npu_format_cast``: STRICT, only the identity cast to ND (ACL format 2).

    Source: op-plugin 517f2e7d ``op_plugin/config/derivatives.yaml`` (``_npu_format_cast(Tensor self,
    int acl_format)``). SGLang's ``hardware_backend/npu/utils.py::npu_format_cast`` returns early for
    tensors on the CPU device, which every emulated-NPU tensor is, so SGLang does not reach the op
    here; private NPU storage formats (FRACTAL_NZ = 29, ...) cannot be represented on a CPU tensor.
    """
    _check_tensor("tensor", tensor)
    if kwargs or acl_format != _ACL_FORMAT_ND:
        raise ValueError(f"acl_format: {acl_format!r} (kwargs {sorted(kwargs)}), only ND ({_ACL_FORMAT_ND}) "
                         "is emulated; NPU-private formats have no CPU representation")
    return tensor


TORCH_NPU: dict[str, Callable] = {
    "npu_rms_norm": npu_rms_norm,
    "npu_add_rms_norm": npu_add_rms_norm,
    "npu_gemma_rms_norm": npu_gemma_rms_norm,
    "npu_swiglu": npu_swiglu,
    "npu_rotary_mul": npu_rotary_mul,
    "npu_mrope": npu_mrope,
    "_npu_flash_attention_qlens": npu_flash_attention_qlens,
    "_npu_paged_attention": npu_paged_attention,
    "npu_fused_infer_attention_score": npu_fused_infer_attention_score,
    "_npu_fused_infer_attention_score_get_max_workspace": npu_fused_infer_attention_score_get_max_workspace,
    "_npu_reshape_and_cache": npu_reshape_and_cache,
    "npu_scatter_nd_update_": npu_scatter_nd_update_,
    "npu_format_cast": npu_format_cast,
}

TORCH_OPS_NPU: dict[str, Callable] = {
    "npu_swiglu": npu_swiglu,
    "npu_format_cast": npu_format_cast,
    "npu_fused_infer_attention_score": npu_fused_infer_attention_score,
}
