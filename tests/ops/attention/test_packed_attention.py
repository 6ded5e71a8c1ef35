"""Numerics of packed attention with sequences empty on one side.

Checked against two independent oracles: a naive per-sequence, per-head softmax
in fp64 (any shape, any empties) and torch's CPU flash-attention kernel
(``_scaled_dot_product_flash_attention_for_cpu``, only where both sides are
non-empty: it crashes on an empty side).  Both the pure-torch reference path and
the device path (compaction + the op, served by the CPU emulator) are covered.
"""

from __future__ import annotations

import contextlib
import math
import random
from itertools import pairwise

import pytest
import torch

from sglang_ascend_hybrid.emulators.fused_infer_attention import emulators
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.attention.api import fused_infer_attention_varlen
from sglang_ascend_hybrid.ops.attention.cases import packed_case
from sglang_ascend_hybrid.ops.attention.naive import naive_packed_attention

# ---------------------------------------------------------------------------
# Oracles (independent of the code under test)
# ---------------------------------------------------------------------------


def sdpa_packed_attention(q, k, v, q_bounds, k_bounds, scale):
    """torch's CPU flash kernel per two-sided sequence.  Returns (out, lse, rows)
    where rows is the boolean mask of query rows it computed."""
    tq, nq, _ = q.shape
    group = nq // k.shape[1]
    out = torch.zeros(tq, nq, v.shape[-1], dtype=q.dtype)
    lse = torch.full((nq, tq), -math.inf)
    rows = torch.zeros(tq, dtype=torch.bool)
    for (qs, qe), (ks, ke) in zip(pairwise(q_bounds), pairwise(k_bounds)):
        if qe == qs or ke == ks:  # the CPU flash kernel SIGFPEs on an empty side
            continue
        qh = q[qs:qe].transpose(0, 1)[None]
        kh = k[ks:ke].repeat_interleave(group, dim=1).transpose(0, 1)[None]
        vh = v[ks:ke].repeat_interleave(group, dim=1).transpose(0, 1)[None]
        o, lse_h = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(qh, kh, vh, scale=scale)[:2]
        out[qs:qe] = o[0].transpose(0, 1)
        lse[:, qs:qe] = lse_h[0]
        rows[qs:qe] = True
    return out, lse, rows


def keyless_rows(q_bounds, k_bounds):
    """Mask of query rows whose sequence has no keys."""
    mask = torch.zeros(q_bounds[-1], dtype=torch.bool)
    for (qs, qe), (ks, ke) in zip(pairwise(q_bounds), pairwise(k_bounds)):
        if ke == ks:
            mask[qs:qe] = True
    return mask


# ---------------------------------------------------------------------------
# Paths and patterns
# ---------------------------------------------------------------------------

# (path, dtype): the reference path serves any dtype; the emulated device op
# takes fp16 / bf16 only (like the real op).
PATHS = [
    ("reference", torch.float32),
    ("reference", torch.bfloat16),
    ("device", torch.bfloat16),
    ("device", torch.float16),
]
TOL = {torch.float32: 2e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}

# name -> (q_lens, k_lens)
PATTERNS = {
    "no_empties": ([3, 5, 1, 4], [4, 2, 6, 1]),
    "both_empty_mixed_in": ([3, 0, 2, 0], [2, 0, 5, 0]),
    "kv_only_first": ([0, 3, 2], [4, 2, 3]),
    "kv_only_middle": ([3, 0, 2], [2, 5, 3]),
    "kv_only_last": ([3, 2, 0], [2, 4, 3]),
    "q_only_first": ([2, 3, 4], [0, 2, 3]),
    "q_only_middle": ([2, 3, 4], [3, 0, 3]),
    "q_only_last": ([2, 3, 4], [3, 2, 0]),
    "consecutive_mixed": ([2, 0, 0, 3, 0, 4, 1], [3, 4, 2, 0, 0, 0, 5]),
    "all_kv_only": ([0, 0, 0], [3, 1, 2]),
    "all_q_only": ([2, 1, 3], [0, 0, 0]),
    "all_both_empty": ([0, 0], [0, 0]),
    "all_one_sided": ([0, 3, 0, 2], [2, 0, 4, 0]),
    "single_q_only": ([5], [0]),
    "single_two_sided": ([1], [7]),
}


@contextlib.contextmanager
def path_context(path):
    if path == "device":
        with seam.install_emulators(emulators()):
            yield
    else:
        yield


def run(case, path, **kw):
    with path_context(path):
        return fused_infer_attention_varlen(*case.args(), **{**case.kwargs(), **kw})


def assert_close_to_naive(case, out, lse, dtype):
    ref_out, ref_lse = naive_packed_attention(case.q, case.k, case.v, case.q_bounds,
                                              case.k_bounds, case.scale)
    tol = TOL[dtype]
    assert out.dtype == case.q.dtype
    assert tuple(out.shape) == (case.q.shape[0], case.q.shape[1], case.v.shape[-1])
    assert lse.dtype == torch.float32
    assert tuple(lse.shape) == (case.q.shape[1], case.q.shape[0])
    torch.testing.assert_close(out.double(), ref_out, atol=tol, rtol=tol)
    # -inf exactly where the oracle has -inf, close elsewhere.
    assert torch.equal(torch.isneginf(lse), torch.isneginf(ref_lse))
    finite = torch.isfinite(ref_lse)
    assert torch.isfinite(lse[finite]).all()
    torch.testing.assert_close(lse[finite].double(), ref_lse[finite], atol=1e-4, rtol=1e-4)
    # query rows without keys: exactly 0 / -inf
    keyless = keyless_rows(case.q_bounds, case.k_bounds)
    assert (out[keyless] == 0).all()
    assert torch.isneginf(lse[:, keyless]).all()


# ---------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("path,dtype", PATHS, ids=[f"{p}-{str(d)[6:]}" for p, d in PATHS])
@pytest.mark.parametrize("pattern", sorted(PATTERNS))
def test_every_empty_pattern_matches_naive_fp64(pattern, path, dtype):
    q_lens, k_lens = PATTERNS[pattern]
    case = packed_case(q_lens, k_lens, num_heads=4, num_kv_heads=2, head_dim=16, dtype=dtype,
                       seed=len(pattern))
    out, lse = run(case, path)
    assert_close_to_naive(case, out, lse, dtype)


@pytest.mark.parametrize("path,dtype", PATHS, ids=[f"{p}-{str(d)[6:]}" for p, d in PATHS])
@pytest.mark.parametrize("pattern", ["no_empties", "consecutive_mixed", "all_one_sided",
                                     "q_only_first", "kv_only_last"])
def test_two_sided_rows_match_cpu_flash_kernel(pattern, path, dtype):
    q_lens, k_lens = PATTERNS[pattern]
    case = packed_case(q_lens, k_lens, num_heads=6, num_kv_heads=2, head_dim=32, dtype=dtype,
                       scale=0.11, seed=7)
    out, lse = run(case, path)
    flash_out, flash_lse, rows = sdpa_packed_attention(case.q, case.k, case.v, case.q_bounds,
                                                       case.k_bounds, case.scale)
    tol = 2e-5 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(out[rows].float(), flash_out[rows].float(), atol=tol, rtol=tol)
    torch.testing.assert_close(lse[:, rows], flash_lse[:, rows], atol=1e-4, rtol=1e-4)
    assert (out[~rows] == 0).all() and torch.isneginf(lse[:, ~rows]).all()


@pytest.mark.parametrize("heads", [(4, 4), (8, 2), (6, 1)])
@pytest.mark.parametrize("path,dtype", [("reference", torch.float32), ("device", torch.bfloat16)])
def test_gqa_random_batches(heads, path, dtype):
    rng = random.Random(sum(heads))
    for trial in range(3):
        n = rng.randint(1, 7)
        q_lens = [rng.choice([0, rng.randint(1, 9)]) for _ in range(n)]
        k_lens = [rng.choice([0, rng.randint(1, 9)]) for _ in range(n)]
        case = packed_case(q_lens, k_lens, num_heads=heads[0], num_kv_heads=heads[1],
                           head_dim=8, dtype=dtype, seed=trial)
        out, lse = run(case, path)
        assert_close_to_naive(case, out, lse, dtype)


@pytest.mark.parametrize("path,dtype", [("reference", torch.float32), ("device", torch.bfloat16)])
def test_custom_and_default_scale(path, dtype):
    case = packed_case([3, 0, 4], [5, 2, 0], head_dim=16, dtype=dtype, scale=0.7, seed=3)
    out, lse = run(case, path)
    assert_close_to_naive(case, out, lse, dtype)
    # softmax_scale=None means head_dim ** -0.5, and a different scale changes the result
    default = packed_case([3, 0, 4], [5, 2, 0], head_dim=16, dtype=dtype, seed=3)
    out_default = run(default, path, softmax_scale=None, return_softmax_lse=False)
    assert_close_to_naive(default, out_default, run(default, path)[1], dtype)
    assert not torch.allclose(out_default.float(), out.float(), atol=1e-2)


@pytest.mark.parametrize("path,dtype", PATHS, ids=[f"{p}-{str(d)[6:]}" for p, d in PATHS])
def test_without_lse_returns_only_the_output(path, dtype):
    case = packed_case([2, 0, 3], [0, 4, 2], dtype=dtype, seed=5)
    with_lse, _ = run(case, path, return_softmax_lse=True)
    only_out = run(case, path, return_softmax_lse=False)
    assert isinstance(only_out, torch.Tensor)
    assert torch.equal(only_out, with_lse)


def test_value_head_dim_may_differ_and_int64_boundaries():
    case = packed_case([3, 0, 2], [2, 3, 0], head_dim=8, v_head_dim=12,
                       index_dtype=torch.int64, seed=11)
    out, lse = run(case, "reference")
    assert_close_to_naive(case, out, lse, torch.float32)


@pytest.mark.parametrize("path,dtype", [("reference", torch.float32), ("device", torch.bfloat16)])
def test_all_empty_batches_are_fully_defined(path, dtype):
    # no tokens at all
    case = packed_case([0, 0, 0], [0, 0, 0], num_heads=4, num_kv_heads=2, dtype=dtype)
    out, lse = run(case, path)
    assert tuple(out.shape) == (0, 4, 16) and tuple(lse.shape) == (4, 0)
    # queries but no keys anywhere: every row 0 / -inf (upstream returned torch.empty)
    case = packed_case([3, 2], [0, 0], num_heads=4, num_kv_heads=2, dtype=dtype)
    out, lse = run(case, path)
    assert tuple(out.shape) == (5, 4, 16) and (out == 0).all()
    assert tuple(lse.shape) == (4, 5) and torch.isneginf(lse).all()
    # keys but no queries anywhere
    case = packed_case([0, 0], [3, 4], dtype=dtype)
    out, lse = run(case, path)
    assert tuple(out.shape) == (0, 4, 16) and tuple(lse.shape) == (4, 0)


@pytest.mark.parametrize("path,dtype", [("reference", torch.float32), ("device", torch.bfloat16)])
def test_non_contiguous_inputs(path, dtype):
    base = packed_case([3, 0, 4, 2], [2, 5, 0, 3], num_heads=4, num_kv_heads=4, head_dim=8,
                       dtype=dtype, seed=13)
    # strided views with the same values
    q = torch.empty(base.q.shape[0], 4, 16, dtype=dtype)[:, :, ::2].copy_(base.q)
    k = base.k.transpose(0, 1).contiguous().transpose(0, 1)
    assert not q.is_contiguous() and not k.is_contiguous()
    with path_context(path):
        out, lse = fused_infer_attention_varlen(q, k, base.v, base.cu_seqlens_q, base.cu_seqlens_k,
                                                **base.kwargs())
    assert_close_to_naive(base, out, lse, dtype)


def _merge_partials(acc, step):
    """Online-softmax merge of two partials over disjoint keys; -inf-safe."""
    if acc is None:
        return step
    (o_a, l_a), (o_b, l_b) = acc, step
    lse = torch.logaddexp(l_a, l_b)
    safe = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
    w_a = torch.exp(l_a - safe).transpose(0, 1).unsqueeze(-1)
    w_b = torch.exp(l_b - safe).transpose(0, 1).unsqueeze(-1)
    return o_a.double() * w_a + o_b.double() * w_b, lse


def split_keys_into_chunks(k_lens, num_chunks, rng):
    """Per chunk, the per-sequence key lengths (random split points, so some
    chunks are empty for some sequences)."""
    chunks = [[0] * len(k_lens) for _ in range(num_chunks)]
    for i, n in enumerate(k_lens):
        cuts = sorted(rng.randint(0, n) for _ in range(num_chunks - 1))
        for c, (a, b) in enumerate(pairwise([0, *cuts, n])):
            chunks[c][i] = b - a
    return chunks


@pytest.mark.parametrize("path,dtype", [("reference", torch.float32), ("device", torch.bfloat16)])
def test_ring_merge_of_key_chunks_equals_full_attention(path, dtype):
    rng = random.Random(2024)
    q_lens = [3, 0, 4, 2, 5, 1]
    k_lens = [6, 4, 0, 1, 7, 3]  # a KV-only sequence and a query-only one
    full = packed_case(q_lens, k_lens, num_heads=4, num_kv_heads=2, head_dim=16, dtype=dtype,
                       seed=99)
    full_out, full_lse = run(full, path)
    chunks = split_keys_into_chunks(k_lens, 3, rng)
    assert any(0 in c for c in chunks), "want some empty chunks"
    acc = None
    for c_idx, chunk_lens in enumerate(chunks):
        # this chunk's keys of each sequence, in packed order
        rows = []
        for i, (ks, ke) in enumerate(pairwise(full.k_bounds)):
            before = sum(chunks[c][i] for c in range(c_idx))
            rows.extend(range(ks + before, ks + before + chunk_lens[i]))
        index = torch.tensor(rows, dtype=torch.long)
        k_chunk, v_chunk = full.k.index_select(0, index), full.v.index_select(0, index)
        cu_k = [0]
        for n in chunk_lens:
            cu_k.append(cu_k[-1] + n)
        with path_context(path):
            step = fused_infer_attention_varlen(
                full.q, k_chunk, v_chunk, full.cu_seqlens_q, torch.tensor(cu_k, dtype=torch.int32),
                cu_seqlens_q_host=full.q_bounds, cu_seqlens_k_host=cu_k,
                softmax_scale=full.scale, return_softmax_lse=True)
        acc = _merge_partials(acc, step)
    merged_out, merged_lse = acc
    tol = 2e-5 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(merged_out.float(), full_out.float(), atol=tol, rtol=tol)
    assert torch.equal(torch.isneginf(merged_lse), torch.isneginf(full_lse))
    finite = torch.isfinite(full_lse)
    torch.testing.assert_close(merged_lse[finite], full_lse[finite], atol=1e-4, rtol=1e-4)
    # and the full result itself is right
    assert_close_to_naive(full, full_out, full_lse, dtype)


def test_naive_oracle_agrees_with_cpu_flash_kernel():
    """The two oracles agree with each other on two-sided sequences."""
    case = packed_case([4, 2], [3, 5], num_heads=4, num_kv_heads=2, head_dim=8, seed=1)
    n_out, n_lse = naive_packed_attention(case.q, case.k, case.v, case.q_bounds, case.k_bounds,
                                          case.scale)
    f_out, f_lse, rows = sdpa_packed_attention(case.q, case.k, case.v, case.q_bounds,
                                               case.k_bounds, case.scale)
    assert rows.all()
    torch.testing.assert_close(f_out.double(), n_out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(f_lse.double(), n_lse, atol=1e-5, rtol=1e-5)
