"""GDN edges found by mutation testing: each test names the property a surviving
mutant broke without any other test noticing."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from sglang_ascend_hybrid.emulators import gdn_mega
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.gdn import chunk_gated_delta_rule
from sglang_ascend_hybrid.ops.gdn import contract as caps
from sglang_ascend_hybrid.ops.gdn import verify as gv
from sglang_ascend_hybrid.ops.gdn.contract import OP_MEGA
from sglang_ascend_hybrid.ops.gdn.torch_impl import _unit_lower_inverse, chunk_gdn_torch


@pytest.mark.parametrize("C", [16, 32, 64, 128, 48])
def test_blocked_unit_lower_inverse_equals_the_triangular_solve(C):
    """Entries of size 1 (strongly aligned keys, beta near 1, no decay), where every factor of
    the nilpotent product ``(I - D)(I + D^2)(I + D^4)(I + D^8)`` and every merge level matters."""
    gen = torch.Generator().manual_seed(C)
    a = torch.randn(3, 2, C, C, generator=gen, dtype=torch.float64).tril(-1) * 0.5
    got = _unit_lower_inverse(a.clone())
    lower = a.clone()
    lower.diagonal(dim1=-2, dim2=-1).fill_(1.0)
    want = torch.linalg.solve_triangular(lower, torch.eye(C, dtype=torch.float64).expand_as(lower), upper=False,
                                         unitriangular=True)
    torch.testing.assert_close(got, want, atol=1e-9, rtol=1e-9)


def test_fp64_state_pool_is_never_handed_to_a_16_bit_kernel():
    """A pool dtype outside the precision table (fp64) counts as fp32-or-better: the mega kernel
    (fp16 states) is not used and torch serves the call exactly."""
    gen = torch.Generator().manual_seed(3)
    T, H, D = 20, 2, 128
    q = F.normalize(torch.randn(1, T, H, D, generator=gen), dim=-1).half()
    k = F.normalize(torch.randn(1, T, H, D, generator=gen), dim=-1).half()
    v = torch.randn(1, T, H, D, generator=gen).half()
    g = F.logsigmoid(torch.randn(1, T, H, generator=gen) + 2)
    beta = torch.rand(1, T, H, generator=gen).half()
    cu = torch.tensor([0, T])
    h0 = torch.randn(1, H, D, D, generator=gen, dtype=torch.float64) * 0.1
    mega = gdn_mega.make_mega_emulator()
    calls = []
    with seam.install_emulators({OP_MEGA: lambda *a, **kw: calls.append(1) or mega(*a, **kw)}):
        o, final = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0)
    assert calls == []
    ref_o, ref_final, _ = chunk_gdn_torch(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0)
    assert torch.equal(o, ref_o) and torch.equal(final, ref_final)


def test_mega_entry_follows_the_version_asked():
    for variant in caps.MEGA_VARIANTS:
        for version in ("2026.05.01", "2026.6.1", "2026.9.0"):
            assert caps.mega_entry(version) is caps.mega_variant(version)
    assert caps.mega_entry("2026.05.01") is not caps.mega_entry("2026.6.1")


@pytest.mark.parametrize("heads,ok", [
    ((1, 1), True), ((64, 64), True), ((64, 1), True), ((6, 2), True),
    ((0, 1), False), ((1, 0), False), ((65, 1), False), ((2, 65), False), ((6, 4), False), ((3, 2), False),
])
def test_npu_chunk_op_head_limits(heads, ok):
    """SKN-747 limits the plan CLI reports: 1..64 heads each, value heads a multiple of key heads."""
    assert caps.npu_op_supports(*heads, 128, 128, caps.NPU_CHUNK_INPUT_DTYPE) is ok


@pytest.mark.parametrize("dims,dtype,ok", [
    ((128, 128), None, True), ((1, 1), None, True), ((129, 128), None, False), ((128, 129), None, False),
    ((0, 128), None, False), ((128, 0), None, False), ((128, 128), torch.float16, False),
])
def test_npu_chunk_op_head_dim_and_dtype_limits(dims, dtype, ok):
    assert caps.npu_op_supports(4, 2, *dims, dtype or caps.NPU_CHUNK_INPUT_DTYPE) is ok


# ------------------------------------------------------------------ verify: argument names in errors

NK, NV, DK, DV = 1, 2, 8, 8


def _verify_call(B=2, S=2, **over):
    gen = torch.Generator().manual_seed(5)
    mix = torch.randn(B, S, 2 * NK * DK + NV * DV, generator=gen)
    pool = torch.randn(B + 2, NV, DV, DK, generator=gen) * 0.3
    args = dict(mix_qkv=mix, recurrent_state=pool, beta=torch.randn(B, S, NV, generator=gen),
                g=F.logsigmoid(torch.randn(B, S, NV, generator=gen)), scale=DK ** -0.5,
                actual_seq_lengths=torch.full((B,), S, dtype=torch.int32),
                ssm_state_indices=torch.arange(B * S, dtype=torch.int32).view(B, S), nk=NK, nv=NV,
                intermediate_state=torch.zeros(B * S + S, NV, DV, DK), cache_indices=torch.arange(B, dtype=torch.int32),
                num_accepted_tokens=torch.ones(B, dtype=torch.int32))
    args.update(over)
    return gv.VerifyCall(**args)


@pytest.mark.parametrize("name,value,needle", [
    ("actual_seq_lengths", torch.tensor([2.0, 2.0]), r"actual_seq_lengths=\(2,\) torch.float32: expected an integer"),
    ("cache_indices", torch.tensor([0], dtype=torch.int32), r"cache_indices=\(1,\) torch.int32: expected an integer"),
    ("num_accepted_tokens", torch.ones(3, dtype=torch.int32), r"num_accepted_tokens=\(3,\) torch.int32"),
])
def test_verify_shape_errors_name_the_argument(name, value, needle):
    with pytest.raises(ValueError, match=needle):
        gv.recurrent_verify(_verify_call(**{name: value}))


def test_verify_value_error_names_actual_seq_lengths():
    call = _verify_call(actual_seq_lengths=torch.tensor([2, 3], dtype=torch.int32))
    with pytest.raises(ValueError, match=r"actual_seq_lengths=\[2, 3\]: expected entries in \[0, S=2\]"):
        gv.recurrent_verify(call)


def test_verify_padding_rows_gather_in_bounds_without_value_checks():
    """Graph mode (no value checks): a padded request carries index -1 and one past the pool's
    rows; the initial-state gathers stay in bounds (clamped) and the padded rows are not written."""
    call = _verify_call(B=2, S=2, cache_indices=torch.tensor([1, -1], dtype=torch.int32),
                        ssm_state_indices=torch.tensor([[0, 1], [-1, -1]], dtype=torch.int32),
                        actual_seq_lengths=torch.tensor([2, 0], dtype=torch.int32))
    no_scratch = _verify_call(B=2, S=2, intermediate_state=None, cache_indices=None,
                              ssm_state_indices=torch.tensor([[1, 1], [9, 9]], dtype=torch.int32),
                              actual_seq_lengths=torch.tensor([1, 0], dtype=torch.int32),
                              num_accepted_tokens=None)
    for c in (call, no_scratch):
        target = c.intermediate_state if c.intermediate_state is not None else c.recurrent_state
        before = target.clone()
        o = gv.recurrent_verify(c, check_values=False)
        assert torch.isfinite(o).all()
        assert torch.count_nonzero(o[1]) == 0
        changed = (target != before).flatten(1).any(1).nonzero().flatten().tolist()
        assert changed == ([0, 1] if c is call else [1])


@pytest.mark.parametrize("bad", ["q", "g", "beta"])
def test_integer_inputs_are_refused_naming_the_dtype(bad):
    args = dict(q=torch.zeros(1, 4, 1, 8), k=torch.zeros(1, 4, 1, 8), v=torch.zeros(1, 4, 2, 8),
                g=torch.zeros(1, 4, 2), beta=torch.zeros(1, 4, 2))
    args[bad] = args[bad].to(torch.int32)
    if bad == "q":
        args["k"] = args["k"].to(torch.int32)
        args["v"] = args["v"].to(torch.int32)
    with pytest.raises(ValueError, match=rf"^{bad}\.dtype=torch\.int32: expected a floating-point dtype$"):
        chunk_gated_delta_rule(args["q"], args["k"], args["v"], args["g"], args["beta"],
                               cu_seqlens=torch.tensor([0, 4]))
