"""Property test: random packed boundaries (any mix of empty sides), random GQA
shapes, paths and scales, checked against the naive fp64 oracle."""

from __future__ import annotations

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang_ascend_hybrid.emulators.fused_infer_attention import emulators
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.attention.api import fused_infer_attention_varlen
from sglang_ascend_hybrid.ops.attention.cases import packed_case
from tests.ops.attention.test_packed_attention import assert_close_to_naive

MAX_EXAMPLES = 150
MIN_CASES = 120

lengths = st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), min_size=1, max_size=6)
heads = st.sampled_from([(1, 1), (2, 1), (4, 2), (3, 3), (6, 2)])
paths = st.sampled_from([("reference", torch.float32), ("device", torch.bfloat16),
                         ("device", torch.float16)])


def test_random_boundaries_match_naive_fp64():
    ran = {"cases": 0, "one_sided": 0}

    @settings(max_examples=MAX_EXAMPLES, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(lens=lengths, heads=heads, path=paths, host=st.booleans(),
           scale=st.one_of(st.none(), st.floats(0.05, 1.5)), seed=st.integers(0, 2**16))
    def check(lens, heads, path, host, scale, seed):
        ran["cases"] += 1
        q_lens, k_lens = [a for a, _ in lens], [b for _, b in lens]
        ran["one_sided"] += any((a == 0) != (b == 0) for a, b in lens)
        kind, dtype = path
        case = packed_case(q_lens, k_lens, num_heads=heads[0], num_kv_heads=heads[1],
                           head_dim=8, dtype=dtype, scale=scale, seed=seed)
        ops = emulators() if kind == "device" else {}
        with seam.install_emulators(ops):
            out, lse = fused_infer_attention_varlen(
                *case.args(), **case.kwargs(host=host))
        assert_close_to_naive(case, out, lse, dtype)

    check()
    print(f"hypothesis ran {ran['cases']} cases ({ran['one_sided']} with one-sided sequences)")
    assert ran["cases"] >= MIN_CASES
    assert ran["one_sided"] >= MIN_CASES // 3
