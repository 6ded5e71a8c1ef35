"""Edges of the CPU emulators the other emulator tests leave open: whole refusal / violation texts (the
ops' contract), the dtypes of what they return, and paths nothing else reaches (racing slots of the
unmerged ``causal_conv1d_fn_v2``, a batched non-varlen call of the Triton chunk entry, the default
``softmax_lse_flag`` of the fused-infer-attention op, a zero query row of the recurrent op)."""

from __future__ import annotations

import pytest
import torch

from sglang_ascend_hybrid.emulators import (
    causal_conv1d,
    fused_infer_attention,
    gdn_decode,
    gdn_mega,
    gdn_npu_chunk,
    gdn_npu_recurrent,
    gdn_triton_chunk,
)
from sglang_ascend_hybrid.ops.attention.cases import packed_case
from sglang_ascend_hybrid.ops.errors import EmulatorContractViolation
from tests.emulators.test_causal_conv1d import _case as _conv_case
from tests.emulators.test_causal_conv1d import _varlen
from tests.emulators.test_gdn_decode import SLOTS
from tests.emulators.test_gdn_decode import _inputs as _decode_inputs
from tests.emulators.test_gdn_npu_chunk import _chunk_args
from tests.ops.gdn.verify.test_gdn_verify import DK, NK, NV, _case
from tests.support import gdn_inputs

HINT = "Try running the alternative backend by setting GDN_ATTN_BACKEND_TRITON=1."
UB_OP = " (undefined behaviour on the real op, which does not check it)"
UB_KERNEL = " (undefined behaviour on the real kernel, which does not check it)"


# --------------------------------------------------------------------------- causal_conv1d_fn_v2 (unmerged branch)


def test_fn_v2_racing_slot_leaves_both_sequences_and_the_slot_nan_and_the_others_exact():
    """Sequences 0 and 2 share slot 1: their outputs and the slot are NaN; sequence 1 (slot 4) is what a
    call with it alone computes."""
    gen, pool, weight = _conv_case(3, dim=8, slots=6)
    x, qsl = _varlen(gen, [2, 3, 1], 8)
    xt, wt = x.t().contiguous(), weight.t().contiguous()
    before = pool.clone()
    out = causal_conv1d.emulate_causal_conv1d_fn_v2(xt, wt, None, qsl, torch.tensor([1, 4, 1]),
                                                    torch.tensor([True, True, True]), pool, "silu")
    alone_pool = before.clone()
    alone = causal_conv1d.emulate_causal_conv1d_fn_v2(xt[:, 2:5].contiguous(), wt, None,
                                                      torch.tensor([0, 3], dtype=torch.int32), torch.tensor([4]),
                                                      torch.tensor([True]), alone_pool, "silu")
    assert out.dtype == torch.float16 and out.shape == (8, 6)
    assert torch.isnan(out[:, 0:2]).all() and torch.isnan(out[:, 5:6]).all()
    assert torch.equal(out[:, 2:5], alone) and not torch.isnan(alone).any()
    assert torch.isnan(pool[1]).all()
    assert torch.equal(pool[4], alone_pool[4])
    assert torch.equal(pool[[0, 2, 3, 5]], before[[0, 2, 3, 5]])


# --------------------------------------------------------------------------- npu_fused_infer_attention_score


def _fia_case():
    return packed_case([3, 2], [2, 4], num_heads=4, num_kv_heads=2, head_dim=128, dtype=torch.bfloat16,
                       scale=0.25)


def test_fia_softmax_lse_flag_defaults_to_false():
    case = _fia_case()
    out, lse = fused_infer_attention.npu_fused_infer_attention_score(
        case.q, case.k, case.v, num_heads=4, num_key_value_heads=2, scale=0.25, input_layout="TND",
        actual_seq_lengths=[3, 5], actual_seq_lengths_kv=[2, 6])
    assert out.shape == (5, 4, 128) and out.dtype == torch.bfloat16
    assert lse.shape == (1,) and lse.dtype == torch.float32 and torch.equal(lse, torch.zeros(1))


def test_fia_missing_kv_lengths_text_names_actual_seq_lengths_kv():
    case = _fia_case()
    with pytest.raises(RuntimeError) as err:
        fused_infer_attention.npu_fused_infer_attention_score(
            case.q, case.k, case.v, num_heads=4, num_key_value_heads=2, scale=0.25, input_layout="TND",
            actual_seq_lengths=[3, 5], actual_seq_lengths_kv=None)
    assert str(err.value) == ("npu_fused_infer_attention_score: input_layout TND requires actual_seq_lengths_kv, "
                              "got None")


# --------------------------------------------------------------------------- Triton GDN decode


def _decode(x, indices, cu, scale=None):
    kernel = gdn_decode.make_triton_decode_emulator("optimized", layout="value_first")
    return kernel(x["A_log"], x["a"], x["dt_bias"], 1.0, 20.0, x["q"], x["k"], x["v"], x["b"], x["pool"],
                  torch.tensor(indices, dtype=torch.int32), scale=scale, use_qk_l2norm_in_kernel=True,
                  cu_seqlens=torch.tensor(cu, dtype=torch.int32))


def test_decode_index_past_the_pool_names_the_integer_slot_count():
    x = _decode_inputs(1)
    with pytest.raises(EmulatorContractViolation) as err:
        _decode(x, [SLOTS], [0, 1])
    assert str(err.value) == (f"triton GDN decode: initial_state_indices[0]={SLOTS} is out of bounds for {SLOTS} "
                              f"slots{UB_KERNEL}")


@pytest.mark.parametrize("scale", [0.0, -0.5])
def test_decode_non_positive_scale_is_the_wrappers_assert(scale):
    x = _decode_inputs(1)
    before = x["pool"].clone()
    with pytest.raises(AssertionError) as err:
        _decode(x, [0], [0, 1], scale=scale)
    assert str(err.value) == "scale must be positive"
    assert torch.equal(x["pool"], before)


# --------------------------------------------------------------------------- mega GDN prefill


def _mega_inputs(T=4, hv=8, hk=4, dtype=torch.half):
    x = gdn_inputs.packed([T], seed=5, hv=hv, hk=hk, k_dim=128, dtype=dtype, with_state=False)
    return x.q, x.k, x.v, x.g, x.beta


def _mega_text(q, k, v, g, beta):
    with pytest.raises(RuntimeError) as err:
        gdn_mega.make_mega_emulator()(q, k, v, g, beta, None, None, True, None)
    return str(err.value)


def test_mega_beta_rank_text():
    q, k, v, g, beta = _mega_inputs()
    assert _mega_text(q, k, v, g, beta[0]) == f"beta must have shape [B, T, H] {HINT}"


def test_mega_q_k_shape_text():
    q, k, v, g, beta = _mega_inputs()
    assert _mega_text(q, k[:, :, :2].contiguous(), v, g, beta) == f"q and k must have the same shape {HINT}"


def test_mega_beta_sequence_length_alone_is_refused():
    q, k, v, g, beta = _mega_inputs()
    assert _mega_text(q, k, v, g, beta[:, :-1].contiguous()) == f"g/beta sequence lengths must match q {HINT}"
    assert _mega_text(q, k, v, g[:, :-1].contiguous(), beta) == f"g/beta sequence lengths must match q {HINT}"


def test_mega_gate_heads_text():
    q, k, v, g, beta = _mega_inputs()
    assert (_mega_text(q, k, v, g[..., :-1].contiguous(), beta)
            == f"g/beta must use the same NumValueHeads as v {HINT}")


def test_mega_h_is_returned_in_ks_dtype():
    q, k, v, g, beta = _mega_inputs(dtype=torch.bfloat16)
    h0 = torch.randn(1, 8, 128, 128, generator=torch.Generator().manual_seed(7)) * 0.1
    out = gdn_mega.make_mega_emulator()(q, k, v, g, beta, None, h0, True, None)
    h = out[5]
    assert h.dtype == torch.bfloat16 and h.shape == (1, 1, 8, 128, 128)
    assert torch.equal(h[0, 0], h0[0].half().bfloat16())  # the entering state, through the wrapper's fp16 cast
    assert out[4].dtype == torch.bfloat16 and out[3].dtype == torch.float32


# --------------------------------------------------------------------------- torch.ops.npu.chunk_gated_delta_rule


def test_npu_chunk_value_token_count_text():
    (q, k, v), kw = _chunk_args()
    with pytest.raises(RuntimeError) as err:
        gdn_npu_chunk.make_npu_chunk_emulator()(q, k, v[:-1], **kw)
    assert str(err.value) == "value shape must match (T, Nv, Dv)"


# --------------------------------------------------------------------------- torch.ops.npu.recurrent_gated_delta_rule


def _recurrent(c, **changes):
    args = dict(mix_qkv=c["mix"], recurrent_state=c["pool"].clone(), beta=c["beta"].bfloat16(), scale=DK ** -0.5,
                actual_seq_lengths=c["lengths"], ssm_state_indices=c["idx"], nk=NK, nv=NV,
                intermediate_state=c["inter"].clone(), cache_indices=c["cache"], num_accepted_tokens=c["nat"],
                g=c["g"])
    args.update(changes)
    return gdn_npu_recurrent.make_npu_recurrent_emulator()(**args), args


def _non_contiguous(t):
    return t.transpose(0, 1).contiguous().transpose(0, 1)


@pytest.mark.parametrize("change,text", [
    (lambda c: dict(intermediate_state=c["inter"].float()),
     "intermediate_state is torch.float32; the kernel is bf16-only and reads the bytes as bf16"),
    (lambda c: dict(mix_qkv=_non_contiguous(c["mix"])), "mix_qkv is not contiguous (used in place by raw offsets)"),
    (lambda c: dict(intermediate_state=_non_contiguous(c["inter"])),
     "intermediate_state is not contiguous: the host writes into a contiguous copy, the caller's tensor is "
     "never updated"),
    (lambda c: dict(actual_seq_lengths=c["lengths"].long()),
     "actual_seq_lengths is torch.int64; the kernel reads int32 without a cast"),
])
def test_recurrent_violation_texts(change, text):
    c = _case(2, 2)
    with pytest.raises(EmulatorContractViolation) as err:
        _recurrent(c, **change(c))
    assert str(err.value) == f"recurrent_gated_delta_rule: {text}{UB_OP}"


def test_recurrent_zero_query_gives_zero_output_not_nan():
    """``q * rsqrt(sum q^2 + 1e-6)``: an all-zero q row stays zero (the epsilon keeps the rsqrt finite)."""
    c = _case(2, 2, seed=3)
    mix = c["mix"].clone()
    mix[0, 1, :NK * DK] = 0
    out, args = _recurrent(c, mix_qkv=mix)
    assert out.dtype == torch.bfloat16 and out.shape == (2, 2, NV, 16)
    assert torch.equal(out[0, 1], torch.zeros_like(out[0, 1]))
    assert torch.isfinite(out.float()).all() and torch.isfinite(args["intermediate_state"].float()).all()


# --------------------------------------------------------------------------- Triton chunk entry


def _triton_entry():
    return gdn_triton_chunk.make_triton_chunk_emulator(environ={})


def test_triton_batched_call_without_cu_seqlens_is_one_sequence_per_batch_row():
    """B = 2 rows of T = 5 tokens without cu_seqlens: the same as the packed call with cu = [0, 5, 10]."""
    B, T, Hv, Hk, K = 2, 5, 2, 1, 16
    x = gdn_inputs.packed([T] * B, seed=9, hv=Hv, hk=Hk, k_dim=K, dtype=torch.bfloat16)
    h0 = x.state.transpose(-1, -2).contiguous()  # key first
    batched = [t.reshape(B, T, *t.shape[2:]) for t in (x.q, x.k, x.v, x.g, x.beta)]
    o, final, h = _triton_entry()(*batched, scale=0.3, initial_state=h0, output_final_state=True)
    ref_o, ref_final, ref_h = _triton_entry()(x.q, x.k, x.v, x.g, x.beta, scale=0.3, initial_state=h0,
                                              output_final_state=True, cu_seqlens=x.cu_seqlens)
    assert o.dtype == torch.bfloat16 and o.shape == (B, T, Hv, K)  # fla's shapes: o [B, T, H, V], h [B, NT, ...]
    assert h.shape == (B, 1, Hv, K, K)
    assert final.shape == (B, Hv, K, K) and final.dtype == torch.float32
    assert torch.equal(o.reshape(B * T, Hv, K), ref_o.reshape(B * T, Hv, K))
    assert torch.equal(final, ref_final)
    assert torch.equal(h.reshape(-1, Hv, K, K), ref_h.reshape(-1, Hv, K, K))
    assert not torch.equal(final[0], final[1])  # two sequences, each from its own state


def test_triton_sixteen_sequences_are_printed_in_the_violation():
    lens = [0] + [1] * 15  # 16 sequences, the first empty
    x = gdn_inputs.packed(lens, seed=2, hv=2, hk=1, k_dim=16, dtype=torch.bfloat16, with_state=False)
    with pytest.raises(EmulatorContractViolation) as err:
        _triton_entry()(x.q, x.k, x.v, x.g, x.beta, cu_seqlens=x.cu_seqlens)
    bounds = [0, 0, *range(1, 16)]
    assert str(err.value) == (
        f"chunk_gated_delta_rule_npu: cu_seqlens {bounds}: sequence 0 is empty and sequence 1 after it is not; "
        "prepare_chunk_indices numbers chunks by the non-empty sequences before them, so the chunk-indexed "
        f"stages never compute the later sequences and their o / final state / h come from unwritten buffers{UB_OP}")
