"""The emulated NPU's fused norm / rotary op emulators against SGLang's own non-NPU forms of the same blocks.

The split+norm+rope ops run inside SGLang's real NPU branches (``forward_prepare_npu`` /
``forward_prepare_npu_prefill`` of Qwen3.5 and Qwen3-Next, on a stub layer, the emulator put where the
NPU import would have bound it) and are compared with the same layer's ``forward_prepare_native``
(``GemmaRMSNorm.forward_native`` + ``RotaryEmbedding`` / ``MRotaryEmbedding.forward_native``).
Tiny random inputs, fp32 (tight) and bf16 (the fused kernels keep fp32 between norm and rope while
the native path rounds to bf16 in between, so a few bf16 ulps).
"""

from __future__ import annotations

import importlib
import types

import pytest
import torch

from sglang_ascend_hybrid.testing.emulated_npu import kernels_norm_rope as ops

pytestmark = pytest.mark.base_release_only

NUM_HEADS, NUM_KV_HEADS, HEAD_DIM, NUM_TOKENS = 4, 2, 16, 5
TOLERANCE = {torch.float32: 2e-5, torch.bfloat16: 6e-2}
DTYPES = [torch.float32, torch.bfloat16]


def _max_err(actual: torch.Tensor, expected: torch.Tensor) -> float:
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    return (actual.double() - expected.double()).abs().max().item()


# ---------------------------------------------------------------------------
# stubs that run SGLang's own layer code without building a model
# ---------------------------------------------------------------------------


class _RopeStub:
    """SGLang's RotaryEmbedding / MRotaryEmbedding state and native methods, without their device probing."""

    def __init__(self, rotary_dim: int, mrope_section=None, interleaved: bool = False, is_neox_style: bool = True):
        from sglang.srt.layers.rotary_embedding.base import RotaryEmbedding
        from sglang.srt.layers.rotary_embedding.utils import apply_rotary_emb

        self._base_cls = RotaryEmbedding
        self.head_size, self.rotary_dim, self.is_neox_style = HEAD_DIM, rotary_dim, is_neox_style
        self.base, self.max_position_embeddings, self.position_start, self._force_native = 10000, 64, 0, False
        self._apply_rotary_emb_wrapped = apply_rotary_emb
        self.mrope_section, self.mrope_interleaved = mrope_section, interleaved
        self._compute_inv_freq = types.MethodType(RotaryEmbedding._compute_inv_freq, self)
        self.cos_sin_cache = RotaryEmbedding._compute_cos_sin_cache(self)
        self.position_cos = self.position_sin = None

    def get_cos_sin_with_position(self, positions):
        return self._base_cls.get_cos_sin_with_position(self, positions)

    def __call__(self, positions, query, key):
        from sglang.srt.layers.rotary_embedding.mrope import MRotaryEmbedding

        if positions.ndim == 2:
            return MRotaryEmbedding.forward_native(self, positions, query, key)
        return self._base_cls.forward_native(self, positions, query, key)


class _GemmaNormStub:
    """GemmaRMSNorm's parameters, called through ``GemmaRMSNorm.forward_native``."""

    def __init__(self, weight: torch.Tensor, eps: float = 1e-6):
        self.weight, self.variance_epsilon = weight, eps
        self.gemma_weight = weight + 1.0

    def __call__(self, x):
        from sglang.srt.layers.layernorm import GemmaRMSNorm

        return GemmaRMSNorm.forward_native(self, x)


def _attention_stub(layer_cls, rope: _RopeStub, dtype: torch.dtype) -> types.SimpleNamespace:
    gen = torch.Generator().manual_seed(1)
    stub = types.SimpleNamespace(
        num_heads=NUM_HEADS,
        num_kv_heads=NUM_KV_HEADS,
        head_dim=HEAD_DIM,
        q_size=NUM_HEADS * HEAD_DIM,
        kv_size=NUM_KV_HEADS * HEAD_DIM,
        attn_output_gate=True,
        partial_rotary_factor=rope.rotary_dim / HEAD_DIM,
        refreshes_rope_cos_sin=True,
        alt_stream=None,
        qkv_proj=lambda hidden: (hidden, None),
        q_norm=_GemmaNormStub((0.3 * torch.randn(HEAD_DIM, generator=gen)).to(dtype)),
        k_norm=_GemmaNormStub((0.3 * torch.randn(HEAD_DIM, generator=gen)).to(dtype)),
        rotary_emb=rope,
        attn=types.SimpleNamespace(layer_id=3),
        config=types.SimpleNamespace(full_attention_interval=4),
    )
    stub._apply_qk_norm = types.MethodType(layer_cls._apply_qk_norm, stub)
    return stub


def _qkv(dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    width = 2 * NUM_HEADS * HEAD_DIM + 2 * NUM_KV_HEADS * HEAD_DIM
    return torch.randn(NUM_TOKENS, width, generator=torch.Generator().manual_seed(seed)).mul(2.0).to(dtype)


QWEN3_5 = ("sglang.srt.models.qwen3_5", "Qwen3_5AttentionDecoderLayer")
QWEN3_NEXT = ("sglang.srt.models.qwen3_next", "Qwen3HybridAttentionDecoderLayer")


def _assert_prepare_matches(npu_out, native_out, dtype) -> float:
    q, k, v, gate = npu_out
    q_ref, k_ref, v_ref, gate_ref = native_out
    assert torch.equal(v, v_ref.contiguous()), "v must be copied exactly"
    assert torch.equal(gate, gate_ref.reshape(gate.shape)), "gate must be copied exactly"
    err = max(_max_err(q, q_ref.reshape(q.shape)), _max_err(k, k_ref.reshape(k.shape)))
    assert err <= TOLERANCE[dtype], err
    return err


# ---------------------------------------------------------------------------
# split_qkvgate_gemma_rmsnorm_rope: Qwen3.5 and Qwen3-Next decode (forward_prepare_npu)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("model", [QWEN3_5, QWEN3_NEXT], ids=["qwen3_5", "qwen3_next"])
def test_split_qkvgate_gemma_rmsnorm_rope_matches_native_prepare(model, dtype, monkeypatch):
    module_name, class_name = model
    module = importlib.import_module(module_name)
    layer_cls = getattr(module, class_name)
    monkeypatch.setattr(
        module,
        "split_qkvgate_gemma_rmsnorm_rope",
        ops.OPS["sgl_kernel_npu.norm.split_qkv_rmsnorm_rope:split_qkvgate_gemma_rmsnorm_rope"],
        raising=False,
    )
    stub = _attention_stub(layer_cls, _RopeStub(rotary_dim=HEAD_DIM // 2), dtype)
    positions = torch.tensor([0, 7, 3, 12, 30])
    qkv = _qkv(dtype)
    npu_out = layer_cls.forward_prepare_npu(stub, positions, qkv, None)
    native_out = layer_cls.forward_prepare_native(stub, positions, qkv)
    _assert_prepare_matches(npu_out, native_out, dtype)
    assert all(t.dtype == dtype for t in npu_out)


def test_split_qkvgate_reads_sin_cos_rows_by_token():
    """A wrong cos/sin row must change q: the test can fail."""
    rope = _RopeStub(rotary_dim=HEAD_DIM // 2)
    rope.get_cos_sin_with_position(torch.tensor([0, 7, 3, 12, 30]))
    args = dict(q_hidden_size=NUM_HEADS * HEAD_DIM, kv_hidden_size=NUM_KV_HEADS * HEAD_DIM, head_dim=HEAD_DIM,
                rope_dim=HEAD_DIM // 2, eps=1e-6, q_weight=torch.zeros(HEAD_DIM), k_weight=torch.zeros(HEAD_DIM))
    qkv = _qkv(torch.float32)
    q, *_ = ops.split_qkvgate_gemma_rmsnorm_rope(qkv, rope.position_sin, rope.position_cos, **args)
    q_shifted, *_ = ops.split_qkvgate_gemma_rmsnorm_rope(
        qkv, rope.position_sin.roll(1, 0), rope.position_cos.roll(1, 0), **args
    )
    assert not torch.allclose(q[1:], q_shifted[1:])


def test_split_qkvgate_rejects_what_the_kernel_would_misread():
    rope = _RopeStub(rotary_dim=8)
    rope.get_cos_sin_with_position(torch.arange(NUM_TOKENS))
    qkv = _qkv(torch.float32)
    kwargs = dict(eps=1e-6, q_weight=torch.zeros(HEAD_DIM), k_weight=torch.zeros(HEAD_DIM))
    sin, cos = rope.position_sin, rope.position_cos
    with pytest.raises(ValueError, match="input"):
        ops.split_qkvgate_gemma_rmsnorm_rope(qkv[:, :-1], sin, cos, 64, 32, HEAD_DIM, 8, **kwargs)
    with pytest.raises(ValueError, match="head_dim"):
        ops.split_qkvgate_gemma_rmsnorm_rope(qkv, sin, cos, 64, 32, 12, 8, **kwargs)
    with pytest.raises(ValueError, match="sin"):
        ops.split_qkvgate_gemma_rmsnorm_rope(qkv, sin[:2], cos, 64, 32, HEAD_DIM, 8, **kwargs)


# ---------------------------------------------------------------------------
# triton_split_qkv_rmsnorm_mrope: Qwen3.5 prefill (forward_prepare_npu_prefill), SGLang 0.5.23
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("interleaved", [True, False], ids=["interleaved", "sectioned"])
@pytest.mark.parametrize("positions_2d", [True, False], ids=["mrope_positions", "text_positions"])
def test_triton_split_qkv_rmsnorm_mrope_matches_native_prepare(interleaved, positions_2d, dtype, monkeypatch):
    import sglang.srt.models.qwen3_5 as qwen3_5

    layer_cls = qwen3_5.Qwen3_5AttentionDecoderLayer
    if not hasattr(layer_cls, "forward_prepare_npu_prefill"):
        pytest.skip("this SGLang release has no Qwen3.5 NPU prefill branch")
    monkeypatch.setattr(
        qwen3_5,
        "triton_split_qkv_rmsnorm_mrope",
        ops.OPS["sgl_kernel_npu.norm.split_qkv_rmsnorm_mrope:triton_split_qkv_rmsnorm_mrope"],
        raising=False,
    )
    rope = _RopeStub(rotary_dim=HEAD_DIM // 2, mrope_section=[2, 1, 1], interleaved=interleaved)
    stub = _attention_stub(layer_cls, rope, dtype)
    stub.forward_prepare_native = types.MethodType(layer_cls.forward_prepare_native, stub)
    text = torch.tensor([0, 7, 3, 12, 30])
    positions = torch.stack([text, text.flip(0), (text * 2) % 50]) if positions_2d else text
    qkv = _qkv(dtype, seed=2)
    npu_out = layer_cls.forward_prepare_npu_prefill(stub, positions, qkv)
    native_out = layer_cls.forward_prepare_native(stub, positions, qkv)
    _assert_prepare_matches(npu_out, native_out, dtype)


def test_triton_split_qkv_rmsnorm_mrope_without_gate_returns_empty_gate():
    rope = _RopeStub(rotary_dim=HEAD_DIM, mrope_section=[4, 2, 2])
    width = NUM_HEADS * HEAD_DIM + 2 * NUM_KV_HEADS * HEAD_DIM
    qkv = torch.randn(NUM_TOKENS, width)
    cos_sin = rope.cos_sin_cache[torch.arange(NUM_TOKENS).expand(3, -1)]
    q, k, v, gate = ops.triton_split_qkv_rmsnorm_mrope(
        qkv, torch.ones(HEAD_DIM), torch.ones(HEAD_DIM), cos_sin, NUM_HEADS, NUM_KV_HEADS, HEAD_DIM, 1e-6,
        [4, 2, 2], False,
    )
    assert gate.shape == (NUM_TOKENS, 0) and q.shape == (NUM_TOKENS, NUM_HEADS * HEAD_DIM)
    q_ref, k_ref = rope(torch.arange(NUM_TOKENS), *(
        _GemmaNormStub(torch.zeros(HEAD_DIM))(t.reshape(-1, HEAD_DIM)).reshape(t.shape)
        for t in qkv.split([NUM_HEADS * HEAD_DIM, NUM_KV_HEADS * HEAD_DIM, NUM_KV_HEADS * HEAD_DIM], dim=-1)[:2]
    ))
    assert _max_err(q, q_ref) <= 2e-5 and _max_err(k, k_ref) <= 2e-5
    with pytest.raises(ValueError, match="cos_sin"):
        ops.triton_split_qkv_rmsnorm_mrope(
            qkv, torch.ones(HEAD_DIM), torch.ones(HEAD_DIM), cos_sin[0], NUM_HEADS, NUM_KV_HEADS, HEAD_DIM,
            1e-6, [4, 2, 2], False,
        )


# ---------------------------------------------------------------------------
# fused_rope_qk_mqa: RotaryEmbedding.forward_npu (LFM2 3-D q/k; bf16 q/k with an fp32 cache)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("is_neox_style", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("rotary_dim", [HEAD_DIM, HEAD_DIM // 2], ids=["full", "partial"])
def test_fused_rope_qk_mqa_matches_forward_native(rotary_dim, is_neox_style, dtype):
    rope = _RopeStub(rotary_dim=rotary_dim, is_neox_style=is_neox_style)  # float32 cache, as SGLang keeps it
    gen = torch.Generator().manual_seed(3)
    query = torch.randn(NUM_TOKENS, NUM_HEADS, HEAD_DIM, generator=gen).to(dtype)
    key = torch.randn(NUM_TOKENS, NUM_KV_HEADS, HEAD_DIM, generator=gen).to(dtype)
    positions = torch.tensor([0, 7, 3, 12, 30])
    cos_sin = rope.cos_sin_cache.index_select(0, positions)
    out_q, out_k = ops.OPS["sgl_kernel_npu.norm.fused_rope_qk_mqa:fused_rope_qk_mqa"](
        query, key, cos_sin, rotary_dim, is_neox_style
    )
    ref_q, ref_k = rope(positions, query, key)
    # forward_native casts cos/sin to bf16 first; the kernel multiplies bf16 by the fp32 cache
    tolerance = 2e-5 if dtype == torch.float32 else 3e-2
    assert max(_max_err(out_q, ref_q), _max_err(out_k, ref_k)) <= tolerance
    assert torch.equal(out_q[..., rotary_dim:], query[..., rotary_dim:])


def test_fused_rope_qk_mqa_rejects_2d_query_like_the_wrapper():
    cos_sin = _RopeStub(rotary_dim=HEAD_DIM).cos_sin_cache[:NUM_TOKENS]
    query = torch.randn(NUM_TOKENS, NUM_HEADS * HEAD_DIM, dtype=torch.bfloat16)
    key = torch.randn(NUM_TOKENS, NUM_KV_HEADS * HEAD_DIM, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="query"):
        ops.fused_rope_qk_mqa(query, key, cos_sin, HEAD_DIM, True)


# ---------------------------------------------------------------------------
# Gemma RMSNorm entries: npu_gemma_rms_norm (0.5.23) and add_gemma_rms_norm (0.5.20 - 0.5.22)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_npu_gemma_rms_norm_matches_forward_native(dtype):
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(NUM_TOKENS, 32, generator=gen).mul(3).to(dtype)
    weight = torch.randn(32, generator=gen).mul(0.3).to(dtype)
    y, rstd = ops.OPS["sgl_kernel_npu.norm.gemma_rmsnorm:npu_gemma_rms_norm"](x, weight, 1e-6)
    assert rstd.dtype == torch.float32 and rstd.shape == (NUM_TOKENS, 1)
    ref = _GemmaNormStub(weight)(x)
    assert _max_err(y, ref) <= (1e-5 if dtype == torch.float32 else 0.0)
    expected_rstd = torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + 1e-6)
    assert _max_err(rstd.double(), expected_rstd) <= 1e-5


def test_npu_gemma_rms_norm_is_strict():
    x = torch.randn(4, 32, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="weight"):
        ops.npu_gemma_rms_norm(x, torch.zeros(32), 1e-6)
    with pytest.raises(ValueError, match="input"):
        ops.npu_gemma_rms_norm(x.t(), torch.zeros(4, dtype=torch.bfloat16), 1e-6)
    with pytest.raises(ValueError, match="empty"):
        ops.npu_gemma_rms_norm(x[:0], torch.zeros(32, dtype=torch.bfloat16), 1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
def test_add_gemma_rms_norm_matches_forward_native(dtype):
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(NUM_TOKENS, 32, generator=gen).to(dtype)
    residual = torch.randn(NUM_TOKENS, 32, generator=gen).to(dtype)
    weight = torch.randn(32, generator=gen).mul(0.3).to(dtype)
    norm_out, add_out = ops.OPS["sgl_kernel_npu.norm.add_rmsnorm_bias:add_gemma_rms_norm"](x, weight, residual, 1e-6)
    from sglang.srt.layers.layernorm import GemmaRMSNorm

    ref_out, ref_residual = GemmaRMSNorm.forward_native(_GemmaNormStub(weight, 1e-6), x, residual)
    assert torch.equal(add_out, ref_residual)
    assert _max_err(norm_out, ref_out) <= (1e-5 if dtype == torch.float32 else 0.0)
    with pytest.raises(ValueError, match="residual"):
        ops.add_gemma_rms_norm(x, weight, None, 1e-6)


# ---------------------------------------------------------------------------
# fused_sigmoid_mul: Qwen3.5 attention output gate (0.5.21 - 0.5.23)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_sigmoid_mul_matches_sigmoid_gate(dtype):
    gen = torch.Generator().manual_seed(6)
    attn = torch.randn(NUM_TOKENS, 64, generator=gen).to(dtype)
    gate = torch.randn(NUM_TOKENS, 64, generator=gen).mul(3).to(dtype)
    before = attn.clone()
    out = ops.OPS["sgl_kernel_npu.activation.fused_sigmoid_mul:fused_sigmoid_mul"](attn, gate)
    expected = (attn.double() * torch.sigmoid(gate.double())).to(dtype)
    assert out.dtype == dtype and out.is_contiguous() and torch.equal(attn, before)
    assert _max_err(out, expected) <= (1e-6 if dtype == torch.float32 else 0.0)
    with pytest.raises(ValueError, match="same shape"):
        ops.fused_sigmoid_mul(attn, gate[:, :32])


@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_sigmoid_mul_broadcast_gates_each_row(dtype):
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(NUM_TOKENS, 48, generator=gen).to(dtype)
    gate = torch.randn(NUM_TOKENS, 1, generator=gen).mul(3).to(dtype)
    op = ops.OPS["sgl_kernel_npu.activation.fused_sigmoid_mul:fused_sigmoid_mul_broadcast"]
    expected = (x.float() * torch.sigmoid(gate.float())).to(dtype)
    for g in (gate, gate[:, 0], torch.cat([gate, gate])):  # (N, 1), (N,), a 2-D gate with extra rows
        out = op(x, g)
        assert out.dtype == dtype and out.shape == x.shape and torch.equal(out, expected)
    with pytest.raises(ValueError, match="2-D"):
        op(x[0], gate[0])
    with pytest.raises(ValueError, match="one column|shape"):
        op(x, torch.cat([gate, gate], dim=1))
    with pytest.raises(ValueError, match="gate must be"):
        op(x, gate[1:, 0])
    with pytest.raises(ValueError, match="out of bounds"):
        op(x, gate[1:])
    with pytest.raises(ValueError, match="row-major"):
        op(x.t().contiguous().t(), gate)


@pytest.mark.parametrize("dtype", DTYPES)
def test_l1_norm_renormalises_each_row_into_fp32(dtype):
    gen = torch.Generator().manual_seed(8)
    weights = torch.rand(NUM_TOKENS, 4, generator=gen).add(0.1).to(dtype)
    out = ops.OPS["sgl_kernel_npu.norm.l1_norm:l1_norm"](weights)
    assert out.dtype == torch.float32 and out.shape == weights.shape
    expected = (weights / weights.float().sum(-1, keepdim=True).to(dtype)).float()
    assert torch.equal(out, expected)
    assert torch.allclose(out.sum(-1), torch.ones(NUM_TOKENS), atol=1e-2 if dtype != torch.float32 else 1e-6)
    with pytest.raises(ValueError, match="wrong rows"):
        ops.l1_norm(torch.rand(NUM_TOKENS, 5)[:, :4])  # SGLang's topk_weights[:, :-1] slice
    with pytest.raises(ValueError, match="power of two"):
        ops.l1_norm(torch.rand(NUM_TOKENS, 3))


def test_ops_keys_name_the_import_paths():
    assert set(ops.OPS) == {
        "sgl_kernel_npu.norm.split_qkv_rmsnorm_mrope:triton_split_qkv_rmsnorm_mrope",
        "sgl_kernel_npu.norm.split_qkv_rmsnorm_rope:split_qkvgate_gemma_rmsnorm_rope",
        "sgl_kernel_npu.norm.split_qkv_rmsnorm_rope:split_qkv_rmsnorm_rope",
        "sgl_kernel_npu.activation.fused_sigmoid_mul:fused_sigmoid_mul",
        "sgl_kernel_npu.activation.fused_sigmoid_mul:fused_sigmoid_mul_broadcast",
        "sgl_kernel_npu.norm.l1_norm:l1_norm",
        "sgl_kernel_npu.norm.gemma_rmsnorm:npu_gemma_rms_norm",
        "sgl_kernel_npu.norm.add_rmsnorm_bias:add_gemma_rms_norm",
        "sgl_kernel_npu.norm.fused_rope_qk_mqa:fused_rope_qk_mqa",
    }


# ---------------------------------------------------------------------------
# split_qkv_rmsnorm_rope: the Llama-family NPU prepare (a full-attention STANDALONE draft model)
# ---------------------------------------------------------------------------


def _rope_fp64(x, pos, rope_dim, neox):
    """Rope of ``x`` [T, heads, D] at positions ``pos`` in fp64, written from the formula."""
    half = rope_dim // 2
    inv = 10000.0 ** (-torch.arange(half, dtype=torch.float64) * 2 / rope_dim)
    ang = pos.double()[:, None, None] * inv
    cos, sin = ang.cos(), ang.sin()
    out = x.double().clone()
    if neox:
        a, b = x[..., :half].double(), x[..., half:rope_dim].double()
        out[..., :half], out[..., half:rope_dim] = a * cos - b * sin, b * cos + a * sin
    else:
        a, b = x[..., 0:rope_dim:2].double(), x[..., 1:rope_dim:2].double()
        out[..., 0:rope_dim:2], out[..., 1:rope_dim:2] = a * cos - b * sin, b * cos + a * sin
    return out, cos, sin


@pytest.mark.parametrize("neox", [True, False])
@pytest.mark.parametrize("rope_dim", [16, 8])
def test_split_qkv_rmsnorm_rope_without_norms_is_split_and_rope(neox, rope_dim):
    torch.manual_seed(0)
    T, heads, kv_heads, D = 5, 4, 2, 16
    qkv = torch.randn(T, (heads + 2 * kv_heads) * D)
    pos = torch.tensor([0, 3, 7, 1, 30])
    q_ref, cos, sin = _rope_fp64(qkv[:, :heads * D].view(T, heads, D), pos, rope_dim, neox)
    k_ref, _, _ = _rope_fp64(qkv[:, heads * D:(heads + kv_heads) * D].view(T, kv_heads, D), pos, rope_dim, neox)
    # SGLang's rotary_emb.position_sin / position_cos: (T, 1, 1, rope_dim), the half repeated
    sin_rows = torch.cat((sin, sin), dim=-1).float().view(T, 1, 1, rope_dim)
    cos_rows = torch.cat((cos, cos), dim=-1).float().view(T, 1, 1, rope_dim)
    fn = ops.OPS["sgl_kernel_npu.norm.split_qkv_rmsnorm_rope:split_qkv_rmsnorm_rope"]
    q, k, v = fn(qkv, sin_rows, cos_rows, heads * D, kv_heads * D, D, is_neox_style=neox)
    assert (q.double() - q_ref.view(T, -1)).abs().max() < 1e-5
    assert (k.double() - k_ref.view(T, -1)).abs().max() < 1e-5
    assert torch.equal(v, qkv[:, (heads + kv_heads) * D:])


def test_split_qkv_rmsnorm_rope_norms_and_refusals():
    torch.manual_seed(1)
    T, D = 3, 8
    qkv = torch.randn(T, 4 * D)
    w = torch.rand(D) + 0.5
    zeros, ones = torch.zeros(T, 1, 1, D), torch.ones(T, 1, 1, D)  # sin 0, cos 1: rope is the identity
    q, k, _ = ops.split_qkv_rmsnorm_rope(qkv, zeros, ones, 2 * D, D, D, eps=1e-6, q_weight=w, k_weight=w)
    x = qkv[:, :2 * D].view(T, 2, D).double()
    want = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()
    assert (q.double() - want.view(T, -1)).abs().max() < 1e-5
    with pytest.raises(ValueError, match="power of two"):
        ops.split_qkv_rmsnorm_rope(torch.randn(T, 24), zeros[..., :6], ones[..., :6], 12, 6, 6)
    with pytest.raises(ValueError, match="q_bias / k_bias"):
        ops.split_qkv_rmsnorm_rope(qkv, zeros, ones, 2 * D, D, D, eps=1e-6, q_weight=w, k_weight=w, q_bias=w)
