"""CPU emulator of ``torch.ops.npu.npu_fused_infer_attention_score`` (``TND`` layout).

Models the op as SGLang's ``ascend_fa.fused_infer_attention_varlen`` calls it::

    out, lse = npu_fused_infer_attention_score(
        q, k, v, num_heads=Nq, num_key_value_heads=Nkv, scale=s,
        input_layout="TND", actual_seq_lengths=[...], actual_seq_lengths_kv=[...],
        softmax_lse_flag=flag)

Contract kept (failures raise ``RuntimeError`` like the real op's checks):

* ``query`` ``[Tq, Nq, D]``, ``key`` ``[Tk, Nkv, D]``, ``value`` ``[Tk, Nkv, Dv]``,
  contiguous, one dtype, fp16 or bf16 (the documented input types, op-plugin 517f2e7d
  ``torch_npu-npu_fused_infer_attention_score.md`` line 86; fp32 is refused with a RuntimeError
  whose text says the real op's text could not be read -- the plugin predicts the refusal from
  :mod:`~sglang_ascend_hybrid.ops.attention.contract` and never makes the call);
* ``num_heads == Nq``; ``num_key_value_heads`` is ``Nkv`` (0 means ``Nq``) and
  divides ``Nq``;
* ``actual_seq_lengths`` / ``actual_seq_lengths_kv``: cumulative ends, same count,
  non-decreasing (an empty sequence is allowed), at most 4096, the last equal to the
  packed token count (:mod:`sglang_ascend_hybrid.ops.attention.contract`, from op-plugin
  517f2e7d's documentation);
* head dims (128, 128, 128) or (192, 192, 128 / 192), at most 256 heads (same source);
* a query row of a sequence with no keys: the documentation does not say what the op
  writes, so the emulator writes NaN there (output and LSE) and no test can rely on it;
* output ``[Tq, Nq, Dv]`` in the input dtype; with ``softmax_lse_flag`` the LSE is
  ``[Tq, Nq, 1]`` fp32, otherwise a ``(1,)`` zero tensor.

The op's refusal texts are not in the documentation that was read: the texts below are
the emulator's own, and nothing in the plugin keys on them (calls outside the contract
are predicted from :mod:`~sglang_ascend_hybrid.ops.attention.contract` and never made).

Other layouts and the quantisation / mask / paged-KV arguments are not modelled:
any of them set to a non-default value raises ``NotImplementedError``.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Callable, Sequence

import torch

from sglang_ascend_hybrid.ops.attention import contract as fia_contract
from sglang_ascend_hybrid.ops.attention.contract import OP_NAME
from sglang_ascend_hybrid.ops.attention.torch_impl import attend_segment

# Keyword arguments the emulator accepts only at their real defaults.
_UNMODELLED_DEFAULTS = {
    "pse_shift": None, "atten_mask": None, "dequant_scale1": None, "quant_scale1": None,
    "dequant_scale2": None, "quant_scale2": None, "quant_offset2": None,
    "antiquant_scale": None, "antiquant_offset": None, "block_table": None,
    "query_padding_size": None, "kv_padding_size": None, "key_antiquant_scale": None,
    "key_antiquant_offset": None, "value_antiquant_scale": None,
    "value_antiquant_offset": None, "key_shared_prefix": None, "value_shared_prefix": None,
    "actual_shared_prefix_len": None, "query_rope": None, "key_rope": None,
    "key_rope_antiquant_scale": None, "pre_tokens": 2147483647, "next_tokens": 2147483647,
    "sparse_mode": 0, "inner_precise": 0, "block_size": 0, "antiquant_mode": 0,
    "key_antiquant_mode": 0, "value_antiquant_mode": 0,
}


def _fail(msg: str) -> RuntimeError:
    return RuntimeError(f"{OP_NAME}: {msg}")


def _check_seq_ends(ends: Sequence[int] | None, total: int, name: str) -> tuple[int, ...]:
    if ends is None:
        raise _fail(f"input_layout TND requires {name}, got None")
    ends = tuple(int(e) for e in ends)
    if not ends:
        raise _fail(f"{name} must hold at least one sequence end, got []")
    if len(ends) > fia_contract.MAX_SEQUENCES:
        raise _fail(f"{name} holds {len(ends)} sequences, at most {fia_contract.MAX_SEQUENCES}")
    previous = 0
    for end in ends:
        if end < previous:
            raise _fail(f"{name} must be non-decreasing cumulative ends, got {list(ends)}")
        previous = end
    if ends[-1] != total:
        raise _fail(f"{name} must end at the packed token count {total}, got {ends[-1]}")
    return ends


def npu_fused_infer_attention_score(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    num_heads: int = 1,
    num_key_value_heads: int = 0,
    scale: float = 1.0,
    input_layout: str = "BSH",
    actual_seq_lengths: Sequence[int] | None = None,
    actual_seq_lengths_kv: Sequence[int] | None = None,
    softmax_lse_flag: bool = False,
    **others,
) -> tuple[torch.Tensor, torch.Tensor]:
    for name, value_ in others.items():
        if name not in _UNMODELLED_DEFAULTS:
            raise TypeError(f"{OP_NAME}() got an unexpected keyword argument {name!r}")
        if value_ is not None and value_ != _UNMODELLED_DEFAULTS[name]:
            raise NotImplementedError(f"{OP_NAME} emulator does not model {name}={value_!r}")
    if input_layout != "TND":
        raise NotImplementedError(
            f"{OP_NAME} emulator models input_layout 'TND' only, got {input_layout!r}")

    tensors = {"query": query, "key": key, "value": value}
    for name, t in tensors.items():
        if t.dim() != 3:
            raise _fail(f"TND {name} must be 3-D [T, N, D], got shape {tuple(t.shape)}")
        if not fia_contract.dtype_supported(t.dtype):
            # op-plugin 517f2e7d docs/zh/custom_APIs/torch_npu/torch_npu-npu_fused_infer_attention_score.md
            # line 86: query float16 / bfloat16 only.  The real op's error text is not readable here.
            raise _fail(f"{name} dtype {t.dtype}: expected float16 or bfloat16 (op-plugin 517f2e7d documentation; "
                        f"the real op's error text could not be read, this text is the emulator's)")
        if not t.is_contiguous():
            raise _fail(f"{name} must be contiguous")
    if not query.dtype == key.dtype == value.dtype:
        raise _fail(f"query, key and value must share a dtype, got "
                    f"{query.dtype}, {key.dtype}, {value.dtype}")
    nq, nkv = query.shape[1], key.shape[1]
    if num_heads != nq:
        raise _fail(f"num_heads={num_heads} does not match query heads {nq}")
    expected_kv = num_key_value_heads or num_heads
    if expected_kv != nkv or value.shape[1] != nkv:
        raise _fail(f"num_key_value_heads={num_key_value_heads} does not match key/value "
                    f"heads {nkv}/{value.shape[1]}")
    if nq % nkv:
        raise _fail(f"num_heads={nq} must be a multiple of num_key_value_heads={nkv}")
    reason = fia_contract.refusal_reason(nq, nkv, query.shape[2], key.shape[2], value.shape[2], 0)
    if reason is not None:
        raise _fail(reason)
    if key.shape[0] != value.shape[0]:
        raise _fail(f"key and value token counts differ: {key.shape[0]} vs {value.shape[0]}")

    q_ends = _check_seq_ends(actual_seq_lengths, query.shape[0], "actual_seq_lengths")
    k_ends = _check_seq_ends(actual_seq_lengths_kv, key.shape[0], "actual_seq_lengths_kv")
    if len(q_ends) != len(k_ends):
        raise _fail(f"actual_seq_lengths has {len(q_ends)} sequences but "
                    f"actual_seq_lengths_kv has {len(k_ends)}")

    out = query.new_empty((query.shape[0], nq, value.shape[2]))
    lse = torch.empty((query.shape[0], nq, 1), dtype=torch.float32, device=query.device)
    for (qs, qe), (ks, ke) in zip(pairwise((0, *q_ends)), pairwise((0, *k_ends))):
        if qe == qs:
            continue
        if ke == ks:  # query rows without keys: undocumented output
            out[qs:qe] = float("nan")
            lse[qs:qe] = float("nan")
            continue
        seg_out, seg_lse = attend_segment(query[qs:qe], key[ks:ke], value[ks:ke], float(scale))
        out[qs:qe] = seg_out.to(out.dtype)
        lse[qs:qe, :, 0] = seg_lse.transpose(0, 1)
    if not softmax_lse_flag:
        lse = torch.zeros((1,), dtype=torch.float32, device=query.device)
    return out, lse


def emulators() -> dict[str, Callable]:
    """Name -> emulator, for ``seam.install_emulators``."""
    return {OP_NAME: npu_fused_infer_attention_score}
