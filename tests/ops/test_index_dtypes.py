"""Every plugin op's index tensors (slots, offsets, lengths) must have an integer dtype: a bool
mask is refused with the argument named and nothing written (a bool tensor used as indices reads
True as row 1 and False as row 0)."""

from __future__ import annotations

import pytest
import torch

from sglang_ascend_hybrid.integration.conv_state_layout import cuda_layout_view
from sglang_ascend_hybrid.ops.attention import api as pa
from sglang_ascend_hybrid.ops.conv import api as conv
from sglang_ascend_hybrid.ops.gdn import api, decode
from sglang_ascend_hybrid.ops.gdn import verify as gv
from sglang_ascend_hybrid.ops.index_dtype import INDEX_DTYPES, check_index_dtype, is_index_dtype

HK, K, HV, V = 2, 16, 4, 16


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _recurrent(idx_dtype):
    g = _gen(1)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    pool = r(4, HV, V, K)
    idx = torch.tensor([1, 0], dtype=idx_dtype)
    run = lambda: api.recurrent_gated_delta_rule(  # noqa: E731
        r(1, 2, HK, K), r(1, 2, HK, K), r(1, 2, HV, V), -r(1, 2, HV).abs(), torch.sigmoid(r(1, 2, HV)),
        state_pool=pool, state_indices=idx)
    return run, [pool]


def _chunk(idx_dtype):
    g = _gen(2)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    cu = torch.tensor([0, 3], dtype=idx_dtype) if idx_dtype != torch.bool else torch.tensor([False, True])
    run = lambda: api.chunk_gated_delta_rule(  # noqa: E731
        r(1, 3, HK, K), r(1, 3, HK, K), r(1, 3, HV, V), -r(1, 3, HV).abs(), torch.sigmoid(r(1, 3, HV)),
        cu_seqlens=cu)
    return run, []


def _serving_decode(idx_dtype):
    g = _gen(3)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    pool = r(4, HV, V, K)
    call = decode.DecodeCall(r(1, 2, HK, K), r(1, 2, HK, K), r(1, 2, HV, V), r(2, HV), r(2, HV), r(HV), r(HV),
                                  pool, torch.tensor([1, 0], dtype=idx_dtype), torch.arange(3, dtype=torch.int32))
    return (lambda: decode.run_decode(call, backend="torch")), [pool]


def _verify(field):
    def build(idx_dtype):
        g = _gen(4)
        B, S = 2, 2
        mix = torch.randn(B, S, 2 * HK * K + HV * V, generator=g)
        pool = torch.randn(4, HV, V, K, generator=g)
        inter = torch.zeros((B + 1) * S, HV, V, K)
        args = dict(lengths=torch.tensor([S, S], dtype=torch.int32),
                    idx=torch.arange(B * S, dtype=torch.int32).view(B, S),
                    cache=torch.tensor([1, 0], dtype=torch.int32), nat=torch.tensor([1, 1], dtype=torch.int32))
        args[field] = args[field].to(idx_dtype)
        call = gv.VerifyCall(mix, pool, torch.randn(B, S, HV, generator=g), None, K ** -0.5, args["lengths"],
                             args["idx"], HK, HV, intermediate_state=inter, cache_indices=args["cache"],
                             num_accepted_tokens=args["nat"])
        return (lambda: gv.recurrent_verify(call, backend="torch")), [pool, inter]
    return build


def _conv_fn(field):
    def build(idx_dtype):
        g = _gen(5)
        pool = torch.randn(4, 2, 8, generator=g)   # window-major [slots, W - 1, dim]
        args = dict(query_start_loc=torch.tensor([0, 2, 3], dtype=torch.int32),
                    cache_indices=torch.tensor([1, 0], dtype=torch.int32))
        args[field] = args[field].to(idx_dtype)
        run = lambda: conv.causal_conv1d_fn(  # noqa: E731
            torch.randn(8, 3, generator=g), torch.randn(8, 3, generator=g), None,
            query_start_loc=args["query_start_loc"], cache_indices=args["cache_indices"],
            conv_states=cuda_layout_view(pool))
        return run, [pool]
    return build


def _conv_update(idx_dtype):
    g = _gen(6)
    pool = torch.randn(4, 2, 8, generator=g)
    run = lambda: conv.causal_conv1d_update(  # noqa: E731
        torch.randn(2, 8, generator=g), cuda_layout_view(pool), torch.randn(8, 3, generator=g),
        conv_state_indices=torch.tensor([1, 0], dtype=idx_dtype))
    return run, [pool]


def _packed(idx_dtype):
    g = _gen(7)
    q = torch.randn(3, 2, 8, generator=g)
    cu = torch.tensor([0, 1, 3], dtype=idx_dtype)
    return (lambda: pa.fused_infer_attention_varlen(q, q.clone(), q.clone(), cu, torch.tensor([0, 1, 3]))), []


CASES = {
    "recurrent_gated_delta_rule state_indices": (_recurrent, "state_indices"),
    "chunk_gated_delta_rule cu_seqlens": (_chunk, "cu_seqlens"),
    "serving decode cache_indices": (_serving_decode, "cache_indices"),
    "verify ssm_state_indices": (_verify("idx"), "ssm_state_indices"),
    "verify cache_indices": (_verify("cache"), "cache_indices"),
    "verify num_accepted_tokens": (_verify("nat"), "num_accepted_tokens"),
    "verify actual_seq_lengths": (_verify("lengths"), "actual_seq_lengths"),
    "causal_conv1d_fn cache_indices": (_conv_fn("cache_indices"), "cache_indices"),
    "causal_conv1d_fn query_start_loc": (_conv_fn("query_start_loc"), "query_start_loc"),
    "causal_conv1d_update conv_state_indices": (_conv_update, "conv_state_indices"),
    "fused_infer_attention_varlen cu_seqlens_q": (_packed, "cu_seqlens_q"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bool_index_tensor_is_refused_with_the_argument_named_and_nothing_written(case):
    build, name = CASES[case]
    run, written = build(torch.bool)
    before = [t.clone() for t in written]
    with pytest.raises(ValueError, match=rf"\b{name}(\.dtype)?=[^:]*torch\.bool: expected .*int"):
        run()
    for t, b in zip(written, before):
        assert torch.equal(t, b)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_same_call_with_int32_indices_runs(case):
    """The control: only the dtype makes the calls above fail."""
    build, _ = CASES[case]
    run, _ = build(torch.int32)
    run()


def test_the_rule():
    assert all(is_index_dtype(d) for d in INDEX_DTYPES)
    for d in (torch.bool, torch.float32, torch.bfloat16, torch.complex64):
        assert not is_index_dtype(d)
    check_index_dtype("slots", torch.tensor([1]))


@pytest.mark.parametrize("value,why", [(1.0, "indices are whole numbers"), (True, "a bool mask is not an index")])
def test_index_dtype_message_names_the_accepted_dtypes_and_why(value, why):
    t = torch.tensor([value])
    with pytest.raises(ValueError) as err:
        check_index_dtype("slots", t, op="demo")
    assert str(err.value) == (f"demo: slots.dtype={t.dtype}: expected an integer index dtype "
                              f"(int8, uint8, int16, int32, int64); {why}")
