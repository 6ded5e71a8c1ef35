"""Checks the emulated NPU's ``torch_npu`` op emulators against SGLang's native forms and fp64 attention.

Norms, SwiGLU and rotary are compared with SGLang's own ``forward_native`` / torch reference functions;
the ATB / FIA paged attention ops with a plain fp64 causal softmax loop on tiny paged caches (GQA,
several sequences with cached prefixes, decode); the KV writes by reading the pool memory back.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.base_release_only

_MODULE_PATH = (Path(__file__).resolve().parents[2] / "sglang_ascend_hybrid" / "testing" / "emulated_npu"
                / "kernels_torch_npu.py")


def _load_module():
    spec = importlib.util.spec_from_file_location("emulated_npu_kernels_torch_npu", _MODULE_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


K = _load_module()
PAGE = 4  # small page so sequences span several blocks


def _max_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.double() - b.double()).abs().max().item()


# --------------------------------------------------------------------------- norms / activation / rotary


def _sglang_rmsnorm(cls, hidden: int, dtype):
    layer = cls(hidden, eps=1e-6).to(dtype)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(hidden) * 0.5 + (0.0 if cls.__name__.startswith("Gemma") else 1.0))
    return layer


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_and_add_rms_norm_match_sglang_forward_native(dtype):
    from sglang.srt.layers.layernorm import RMSNorm

    torch.manual_seed(0)
    layer = _sglang_rmsnorm(RMSNorm, 32, dtype)
    x, residual = torch.randn(5, 32, dtype=dtype), torch.randn(5, 32, dtype=dtype)
    y, rstd = K.TORCH_NPU["npu_rms_norm"](x, layer.weight.data, layer.variance_epsilon)
    assert rstd.dtype == torch.float32 and rstd.shape == (5, 1) and y.dtype == dtype
    tol = 0.0 if dtype == torch.float32 else 1e-2
    assert _max_err(y, layer.forward_native(x.clone())) <= tol + 1e-6
    out, rstd2, x_sum = K.TORCH_NPU["npu_add_rms_norm"](residual, x, layer.weight.data, layer.variance_epsilon)
    ref_out, ref_residual = layer.forward_native(x.clone(), residual.clone())
    assert rstd2.shape == (5, 1) and out.dtype == dtype and x_sum.dtype == dtype
    assert _max_err(out, ref_out) <= tol + 1e-6
    assert _max_err(x_sum, ref_residual) == 0.0


def test_gemma_rms_norm_forms_match_sglang_forward_native():
    from sglang.srt.layers.layernorm import GemmaRMSNorm

    torch.manual_seed(1)
    layer = _sglang_rmsnorm(GemmaRMSNorm, 16, torch.float32)
    layer.refresh_gemma_weight()
    x, residual = torch.randn(3, 16), torch.randn(3, 16)
    y, _ = K.TORCH_NPU["npu_gemma_rms_norm"](x, layer.weight, layer.variance_epsilon)
    assert _max_err(y, layer.forward_native(x.clone())) < 1e-6
    out, _, res = K.TORCH_NPU["npu_add_rms_norm"](residual, x, layer.gemma_weight.to(x.dtype), layer.variance_epsilon)
    ref_out, ref_res = layer.forward_native(x.clone(), residual.clone())
    assert _max_err(out, ref_out) < 1e-6 and _max_err(res, ref_res) < 1e-6


def test_norm_rejects_gamma_of_other_dtype():
    with pytest.raises(TypeError, match="gamma"):
        K.npu_rms_norm(torch.randn(2, 8, dtype=torch.bfloat16), torch.ones(8), 1e-6)


def test_swiglu_matches_silu_and_mul_forward_native_both_names():
    from sglang.srt.layers.activation import SiluAndMul

    torch.manual_seed(2)
    x = torch.randn(4, 3, 24, dtype=torch.bfloat16)
    ref = SiluAndMul().forward_native(x)
    assert K.TORCH_NPU["npu_swiglu"] is K.TORCH_OPS_NPU["npu_swiglu"]
    out = K.TORCH_OPS_NPU["npu_swiglu"](x)
    assert out.shape == (4, 3, 12) and out.dtype == torch.bfloat16
    assert _max_err(out, ref) <= 1e-2
    with pytest.raises(ValueError, match="odd"):
        K.npu_swiglu(torch.randn(2, 5))


def test_rotary_mul_matches_sglang_native_rotary():
    from sglang.srt.layers.rotary_embedding.utils import apply_rotary_pos_emb_native_eager

    torch.manual_seed(3)
    q, k = torch.randn(6, 4, 16), torch.randn(6, 2, 16)
    angles = torch.randn(6, 8)
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    ref_q, ref_k = apply_rotary_pos_emb_native_eager(q, k, cos, sin)
    c4, s4 = cos.unsqueeze(1).unsqueeze(0), sin.unsqueeze(1).unsqueeze(0)  # SGLang's apply_rotary_pos_emb_npu
    out_q = K.TORCH_NPU["npu_rotary_mul"](q.unsqueeze(0), c4, s4).squeeze(0)
    out_k = K.TORCH_NPU["npu_rotary_mul"](k.unsqueeze(0), c4, s4).squeeze(0)
    assert _max_err(out_q, ref_q) < 1e-6 and _max_err(out_k, ref_k) < 1e-6


@pytest.mark.parametrize("neox", [True, False])
def test_mrope_plain_rope_matches_rotary_embedding_forward_native(neox, monkeypatch):
    from sglang.srt.layers.rotary_embedding import RotaryEmbedding, base

    monkeypatch.setattr(base, "_is_cpu", True)  # this host has no platform: skip the vllm fallback kernel import
    torch.manual_seed(4)
    head, rot = 16, 8  # partial rotary: dims past rot pass through
    rope = RotaryEmbedding(head, rot, 64, 10000, neox, torch.float32)
    positions = torch.tensor([0, 5, 9, 63, 2])
    q, k = torch.randn(5, 3 * head), torch.randn(5, 1 * head)
    ref_q, ref_k = rope.forward_native(positions, q.clone(), k.clone())
    out_q, out_k = K.TORCH_NPU["npu_mrope"](positions, q, k, rope.cos_sin_cache, head, mrope_section=[0, 0, 0],
                                            rotary_mode="half" if neox else "interleave")
    assert _max_err(out_q, ref_q) < 1e-5 and _max_err(out_k, ref_k) < 1e-5
    with pytest.raises(ValueError, match="mrope_section"):
        K.npu_mrope(positions, q, k, rope.cos_sin_cache, head, mrope_section=[2, 1, 1])


# --------------------------------------------------------------------------- paged KV cache + attention


def _fp64_attention(q, k, v, scale, causal):
    """Plain loop reference: q [Lq, H, D], k/v [Lk, Hkv, *]; query i sits at position Lk - Lq + i."""
    lq, heads = q.shape[0], q.shape[1]
    group = heads // k.shape[1]
    out = torch.zeros(lq, heads, v.shape[2], dtype=torch.float64)
    for i in range(lq):
        visible = k.shape[0] - lq + i + 1 if causal else k.shape[0]
        for h in range(heads):
            scores = (k[:visible, h // group].double() @ q[i, h].double()) * scale
            out[i, h] = torch.softmax(scores, 0) @ v[:visible, h // group].double()
    return out


class _Pool:
    """A tiny paged pool like SGLang's NPUMHATokenToKVPool layer view, filled through the KV-write op."""

    def __init__(self, kv_lens, kv_heads=2, head_dim=8, v_dim=8, dtype=torch.float16, num_blocks=16):
        self.k = torch.zeros(num_blocks, PAGE, kv_heads, head_dim, dtype=dtype)
        self.v = torch.zeros(num_blocks, PAGE, kv_heads, v_dim, dtype=dtype)
        free = torch.randperm(num_blocks - 1) + 1  # block 0 is SGLang's padding block
        width = max(-(-n // PAGE) for n in kv_lens) + 1
        self.block_table = torch.zeros(len(kv_lens), width, dtype=torch.int32)
        self.tokens_k, self.tokens_v, start = [], [], 0
        for b, n in enumerate(kv_lens):
            used = -(-n // PAGE)
            self.block_table[b, :used] = free[start:start + used].int()
            start += used
            slots = torch.tensor([int(self.block_table[b, p // PAGE]) * PAGE + p % PAGE for p in range(n)],
                                 dtype=torch.int32)
            key, value = torch.randn(n, kv_heads, head_dim).to(dtype), torch.randn(n, kv_heads, v_dim).to(dtype)
            K.TORCH_NPU["_npu_reshape_and_cache"](key=key, value=value, key_cache=self.k, value_cache=self.v,
                                                  slot_indices=slots)
            self.tokens_k.append(key)
            self.tokens_v.append(value)


def test_reshape_and_cache_writes_in_place_at_slots():
    pool = _Pool([5, 3])
    k_ptr = pool.k.data_ptr()
    flat_k = pool.k.view(-1, *pool.k.shape[2:])
    for b, key in enumerate(pool.tokens_k):
        for p in range(key.shape[0]):
            slot = int(pool.block_table[b, p // PAGE]) * PAGE + p % PAGE
            assert torch.equal(flat_k[slot], key[p])
    assert pool.k.data_ptr() == k_ptr and int((flat_k.abs().sum((1, 2)) != 0).sum()) == 8
    with pytest.raises(ValueError, match="slot_indices"):
        K.npu_reshape_and_cache(pool.tokens_k[1], pool.tokens_v[1], pool.k, pool.v,
                                torch.tensor([0, 1, pool.k.shape[0] * PAGE], dtype=torch.int32))
    with pytest.raises(TypeError, match="slot_indices"):
        K.npu_reshape_and_cache(pool.tokens_k[1], pool.tokens_v[1], pool.k, pool.v, torch.arange(3))


def test_scatter_nd_update_writes_rows_in_place_as_sglang_fia_pool():
    buf = torch.zeros(10, 1, 2, 4, dtype=torch.bfloat16)  # FIA layer view [P*ps, 1, H, D]
    loc = torch.tensor([7, 2, 4])
    rows = torch.randn(3, 2, 4).to(torch.bfloat16)
    view = buf.view(-1, 2, 4)
    assert K.TORCH_NPU["npu_scatter_nd_update_"](view, loc.view(-1, 1), rows) is view
    assert torch.equal(buf[loc, 0], rows) and int((buf.abs().sum((1, 2, 3)) != 0).sum()) == 3
    with pytest.raises(ValueError, match="indices"):
        K.npu_scatter_nd_update_(view, torch.tensor([[1], [1], [3]]), rows)


def _sglang_norm_mask(dtype):
    upper = torch.ones(128, 128, dtype=torch.bool).triu_(1)
    value = torch.finfo(torch.float32).min if dtype == torch.float16 else 1
    return torch.zeros(128, 128).masked_fill_(upper, value).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_flash_attention_qlens_extend_with_prefix_matches_fp64(dtype):
    torch.manual_seed(5)
    kv_lens, q_lens, heads, kv_heads, d = [9, 4, 6], [3, 4, 1], 4, 2, 8  # GQA; cached prefixes 6, 0, 5
    pool = _Pool(kv_lens, kv_heads, d, d, dtype)
    query = torch.randn(sum(q_lens), heads * d).to(dtype)
    out = torch.empty(sum(q_lens), heads * d, dtype=dtype)
    scale = 1 / math.sqrt(d)
    K.TORCH_NPU["_npu_flash_attention_qlens"](
        query=query, key_cache=pool.k, value_cache=pool.v, mask=_sglang_norm_mask(dtype),
        block_table=pool.block_table, seq_len=torch.tensor(q_lens, dtype=torch.int32),
        context_lens=torch.tensor(kv_lens, dtype=torch.int32), scale_value=scale, num_heads=heads,
        num_kv_heads=kv_heads, out=out)
    ref = torch.cat([_fp64_attention(q.view(-1, heads, d), pool.tokens_k[b], pool.tokens_v[b], scale, True)
                     for b, q in enumerate(query.split(q_lens))])
    assert _max_err(out.view(-1, heads, d), ref) < (2e-3 if dtype == torch.float16 else 1.6e-2)


def test_flash_attention_qlens_is_strict():
    pool = _Pool([4], 2, 8, 8)
    args = dict(query=torch.randn(2, 32).half(), key_cache=pool.k, value_cache=pool.v,
                mask=_sglang_norm_mask(torch.float16), block_table=pool.block_table,
                seq_len=torch.tensor([2], dtype=torch.int32), context_lens=torch.tensor([4], dtype=torch.int32),
                scale_value=0.3, num_heads=4, num_kv_heads=2, out=torch.empty(2, 32).half())
    K.npu_flash_attention_qlens(**args)
    bad = [("mask", torch.zeros(128, 128).half(), ValueError), ("seq_len", torch.tensor([3], dtype=torch.int32),
           ValueError), ("context_lens", torch.tensor([1], dtype=torch.int32), ValueError),
           ("block_table", pool.block_table.long(), TypeError), ("num_kv_heads", 3, ValueError)]
    with pytest.raises(ValueError, match="block_table: row 0"):  # a KV length past the block-table row
        K.npu_flash_attention_qlens(**{**args, "context_lens": torch.tensor([4 * 40], dtype=torch.int32)})
    for name, value, error in bad:
        with pytest.raises(error, match=name if name != "num_kv_heads" else "num_heads"):
            K.npu_flash_attention_qlens(**{**args, name: value})


def test_paged_attention_decode_matches_fp64():
    torch.manual_seed(6)
    kv_lens, heads, kv_heads, d = [1, 7, 12], 4, 1, 8
    pool = _Pool(kv_lens, kv_heads, d, d, torch.bfloat16)
    query = torch.randn(3, heads, d).to(torch.bfloat16)
    out = torch.empty(3, heads, d, dtype=torch.bfloat16)
    K.TORCH_NPU["_npu_paged_attention"](query=query, key_cache=pool.k, value_cache=pool.v, num_heads=heads,
                                        num_kv_heads=kv_heads, scale_value=0.35, block_table=pool.block_table,
                                        context_lens=torch.tensor(kv_lens, dtype=torch.int32), out=out)
    ref = torch.cat([_fp64_attention(query[b:b + 1], pool.tokens_k[b], pool.tokens_v[b], 0.35, False)
                     for b in range(3)])
    assert _max_err(out, ref) < 1.6e-2
    with pytest.raises(ValueError, match="context_lens"):
        K.npu_paged_attention(query, pool.k, pool.v, kv_heads, heads, 0.35, pool.block_table,
                              torch.tensor([0, 7, 12], dtype=torch.int32), out)


def test_fused_infer_attention_score_paged_extend_and_decode_match_fp64():
    torch.manual_seed(7)
    kv_lens, q_lens, heads, kv_heads, d = [6, 5], [2, 5], 4, 2, 8
    pool = _Pool(kv_lens, kv_heads, d, d, torch.float16)
    k3, v3 = pool.k.view(-1, PAGE, kv_heads * d), pool.v.view(-1, PAGE, kv_heads * d)
    q = torch.randn(sum(q_lens), heads, d).half()
    fia_mask = torch.ones(2048, 2048, dtype=torch.bool).triu_(1)
    out, lse = K.TORCH_NPU["npu_fused_infer_attention_score"](
        query=q, key=k3, value=v3, block_table=pool.block_table, block_size=PAGE, atten_mask=fia_mask,
        input_layout="TND", actual_seq_lengths=[2, 7], actual_seq_lengths_kv=torch.tensor(kv_lens).int(),
        num_key_value_heads=kv_heads, num_heads=heads, scale=0.3, sparse_mode=3)
    ref = torch.cat([_fp64_attention(qb, pool.tokens_k[b], pool.tokens_v[b], 0.3, True)
                     for b, qb in enumerate(q.split(q_lens))])
    assert out.shape == q.shape and lse.shape == (1,) and _max_err(out, ref) < 2e-3
    qd = torch.randn(2, 1, heads, d).half()
    out_d, _ = K.TORCH_OPS_NPU["npu_fused_infer_attention_score"](
        qd, k3, v3, num_heads=heads, num_key_value_heads=kv_heads, input_layout="BSND", atten_mask=None,
        block_size=PAGE, block_table=pool.block_table, actual_seq_lengths_kv=kv_lens, scale=0.3)
    ref_d = torch.stack([_fp64_attention(qd[b], pool.tokens_k[b], pool.tokens_v[b], 0.3, False) for b in range(2)])
    assert out_d.shape == qd.shape and _max_err(out_d, ref_d) < 2e-3
    with pytest.raises(ValueError, match="sparse_mode"):
        K.npu_fused_infer_attention_score(qd, k3, v3, num_heads=heads, num_key_value_heads=kv_heads,
                                          input_layout="BSND", block_size=PAGE, block_table=pool.block_table,
                                          actual_seq_lengths_kv=kv_lens, scale=0.3, sparse_mode=3)


def test_format_cast_only_identity_nd():
    w = torch.randn(4, 4)
    assert K.TORCH_OPS_NPU["npu_format_cast"](w, 2) is w
    with pytest.raises(ValueError, match="acl_format"):
        K.npu_format_cast(w, 29)
