"""Derandomised fuzz of the public GDN ops against an independent fp64 token loop.

Valid inputs (empty sequences, g = -inf full resets, padding rows, repeated calls) on every rung
the emulated machine offers; malformed inputs give a ValueError naming the argument and leave the
state pool bit-identical."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang_ascend_hybrid.emulators import gdn_sets
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.gdn import chunk_gated_delta_rule, prefill, recurrent_gated_delta_rule
from sglang_ascend_hybrid.ops.gdn.contract import OP_NPU_RECURRENT

SETTINGS = settings(derandomize=True, max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
K = V = 16


def _fp64_loop(q, k, v, g, beta, bounds, h0, scale):
    """o_t = S_t^T (scale q_t) after S_t = e^{g_t} S_{t-1} + k_t (beta_t (v_t - S^T k_t))^T, value-first S."""
    q, k, v, g, beta = (x[0].double() for x in (q, k, v, g, beta))
    hv, hk = v.shape[1], q.shape[1]
    out = torch.zeros(q.shape[0], hv, V, dtype=torch.float64)
    finals = []
    for s in range(len(bounds) - 1):
        S = h0[s].double().clone() if h0 is not None else torch.zeros(hv, V, K, dtype=torch.float64)
        for t in range(bounds[s], bounds[s + 1]):
            for h in range(hv):
                kh = h // (hv // hk)
                S[h] = S[h] * math.exp(float(g[t, h]))
                u = float(beta[t, h]) * (v[t, h] - S[h] @ k[t, kh])
                S[h] = S[h] + torch.outer(u, k[t, kh])
                out[t, h] = S[h] @ (q[t, kh] * scale)
        finals.append(S)
    return out, torch.stack(finals)


@st.composite
def prefill_case(draw):
    hk = draw(st.sampled_from([1, 2]))
    hv = hk * draw(st.sampled_from([1, 3]))
    lens = draw(st.lists(st.integers(0, 70), min_size=1, max_size=3))
    T = sum(lens)
    seed = draw(st.integers(0, 2 ** 16))
    gen = torch.Generator().manual_seed(seed)
    q = torch.nn.functional.normalize(torch.randn(1, T, hk, K, generator=gen), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(1, T, hk, K, generator=gen), dim=-1)
    v = torch.randn(1, T, hv, V, generator=gen)
    g = torch.nn.functional.logsigmoid(torch.randn(1, T, hv, generator=gen) * 2 + 1)
    if T and draw(st.booleans()):
        g.view(-1)[draw(st.integers(0, T * hv - 1))] = float("-inf")
    if T and draw(st.booleans()):
        g.mul_(draw(st.sampled_from([20.0, 80.0])))  # strong decay: the exact-decay branch
    beta = torch.rand(1, T, hv, generator=gen)
    h0 = torch.randn(len(lens), hv, V, K, generator=gen) * 0.3 if draw(st.booleans()) else None
    return q, k, v, g, beta, [0] + list(torch.tensor(lens).cumsum(0).tolist()), h0


@SETTINGS
@given(case=prefill_case(), machine=st.sampled_from(["cpu", "A3-bf16"]))
def test_prefill_matches_the_fp64_loop_on_every_rung(case, machine):
    q, k, v, g, beta, bounds, h0 = case
    cu = torch.tensor(bounds)
    ref_o, ref_final = _fp64_loop(q, k, v, g, beta, bounds, h0, K ** -0.5)
    if machine == "cpu":
        o, final = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0)
        tol = 2e-4
    else:  # bf16 model and pool: the chunk op where its contract holds (no empty sequence), else torch
        prefill.forget_refusals()
        with seam.install_device_facts(chip="A3"), seam.install_emulators(gdn_sets.emulators(chip="A3")):
            o, final = chunk_gated_delta_rule(q.bfloat16(), k.bfloat16(), v.bfloat16(), g, beta.bfloat16(),
                                              cu_seqlens=cu, initial_state=None if h0 is None else h0.bfloat16())
        tol = 6e-2
    assert not torch.isnan(o).any() and not torch.isnan(final).any()
    scale_o = max(1.0, float(ref_o.abs().max())) if ref_o.numel() else 1.0
    if ref_o.numel():
        assert float((o[0].double() - ref_o).abs().max()) <= tol * scale_o
    scale_f = max(1.0, float(ref_final.abs().max()))
    assert float((final.double() - ref_final).abs().max()) <= tol * scale_f


@st.composite
def decode_case(draw):
    hk = draw(st.sampled_from([1, 2]))
    hv = hk * draw(st.sampled_from([1, 2]))
    B = draw(st.integers(0, 5))
    slots = draw(st.lists(st.integers(-1, 5), min_size=B, max_size=B).filter(
        lambda xs: len([x for x in xs if x >= 0]) == len({x for x in xs if x >= 0})))
    seed = draw(st.integers(0, 2 ** 16))
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(1, B, hk, K, generator=gen)
    k = torch.randn(1, B, hk, K, generator=gen)
    v = torch.randn(1, B, hv, V, generator=gen)
    g = torch.nn.functional.logsigmoid(torch.randn(1, B, hv, generator=gen))
    if B and draw(st.booleans()):
        g[0, 0, 0] = float("-inf")
    beta = torch.rand(1, B, hv, generator=gen)
    pool = torch.randn(6, hv, V, K, generator=gen) * 0.3
    return q, k, v, g, beta, torch.tensor(slots, dtype=torch.long), pool


@SETTINGS
@given(case=decode_case(), machine=st.sampled_from(["cpu", "A3-bf16"]), checks=st.booleans())
def test_decode_matches_the_fp64_loop_and_leaves_other_slots(case, machine, checks):
    q, k, v, g, beta, slots, pool = case
    B = slots.numel()
    qn = torch.nn.functional.normalize(q, dim=-1, eps=0)
    kn = torch.nn.functional.normalize(k, dim=-1, eps=0)
    expected_pool = pool.double().clone()
    ref_o = torch.zeros(B, v.shape[2], V, dtype=torch.float64)
    for b in range(B):
        s = int(slots[b])
        if s < 0:
            continue
        o, fin = _fp64_loop(qn[:, b:b + 1], kn[:, b:b + 1], v[:, b:b + 1], g[:, b:b + 1], beta[:, b:b + 1],
                            [0, 1], pool[s:s + 1], K ** -0.5)
        ref_o[b], expected_pool[s] = o[0], fin[0]
    if machine == "cpu":
        work = pool.clone()
        out = recurrent_gated_delta_rule(q, k, v, g, beta, state_pool=work, state_indices=slots, use_qk_l2norm=True,
                                         check_values=checks)
        tol = 2e-5
    else:
        work = pool.bfloat16()
        expected_pool = work.double().clone()
        for b in range(B):
            s = int(slots[b])
            if s >= 0:
                _, fin = _fp64_loop(qn[:, b:b + 1], kn[:, b:b + 1], v[:, b:b + 1], g[:, b:b + 1], beta[:, b:b + 1],
                                    [0, 1], work[s:s + 1].float(), K ** -0.5)
                expected_pool[s] = fin[0]
        with seam.install_device_facts(chip="A3"), seam.install_emulators(gdn_sets.emulators(chip="A3")):
            out = recurrent_gated_delta_rule(q.bfloat16(), k.bfloat16(), v.bfloat16(), g, beta.bfloat16(),
                                             state_pool=work, state_indices=slots, use_qk_l2norm=True,
                                             check_values=checks)
        tol = 6e-2
    assert out.shape == (1, B, v.shape[2], V)
    if B:
        assert float((out[0].double() - ref_o).abs().max()) <= tol * max(1.0, float(ref_o.abs().max()))
    assert float((work.double() - expected_pool).abs().max()) <= tol * max(1.0, float(expected_pool.abs().max()))
    untouched = [s for s in range(6) if s not in slots.tolist()]
    assert torch.equal(work[untouched].double(), expected_pool[untouched])  # bit-identical


# ----------------------------------------------------------------------------- malformed inputs


def _decode_inputs(B=3):
    gen = torch.Generator().manual_seed(1)
    q, k = torch.randn(1, B, 2, K, generator=gen), torch.randn(1, B, 2, K, generator=gen)
    v = torch.randn(1, B, 4, V, generator=gen)
    g, beta = -torch.rand(1, B, 4, generator=gen), torch.rand(1, B, 4, generator=gen)
    return q, k, v, g, beta, torch.randn(5, 4, V, K, generator=gen)


@pytest.mark.parametrize("machine", ["cpu", "A3"])
@pytest.mark.parametrize("slots,match", [
    ([0, 5, 1], r"state_indices=\[0, 5, 1\]: expected slots in \[0, 5\) or -1"),
    ([0, -2, 1], r"state_indices=\[0, -2, 1\]: expected slots in \[0, 5\) or -1"),
    ([2, 2, -1], r"state_indices=\[2, 2, -1\]: expected each slot at most once per batch"),
])
def test_bad_slots_raise_before_any_write(machine, slots, match):
    q, k, v, g, beta, pool = _decode_inputs()
    dtype = torch.bfloat16 if machine == "A3" else torch.float32
    pool = pool.to(dtype)
    before = pool.clone()
    with seam.install_device_facts(chip="A3"), seam.install_emulators(gdn_sets.emulators(chip="A3")):
        with pytest.raises(ValueError, match=match):
            recurrent_gated_delta_rule(q.to(dtype), k.to(dtype), v.to(dtype), g, beta.to(dtype), state_pool=pool,
                                       state_indices=torch.tensor(slots), use_qk_l2norm=True)
    assert torch.equal(pool, before)


@pytest.mark.parametrize("change,match", [
    (dict(k=lambda t: t.half()), r"k.dtype=torch.float16: expected the dtype of q"),
    (dict(q=lambda t: t.long()), r"q.dtype=torch.int64: expected a floating-point dtype"),
    (dict(g=lambda t: t[..., :3]), r"g=shape \(1, 3, 3\): expected \[1, 3, 4\]"),
    (dict(v=lambda t: t[..., :3, :]), r"v=shape .*: expected a value-head count that is a multiple"),
])
def test_malformed_decode_inputs_are_named(change, match):
    q, k, v, g, beta, pool = _decode_inputs()
    args = dict(q=q, k=k, v=v, g=g, beta=beta)
    for name, fn in change.items():
        args[name] = fn(args[name])
    before = pool.clone()
    with pytest.raises(ValueError, match=match):
        recurrent_gated_delta_rule(**args, state_pool=pool, state_indices=torch.tensor([0, 1, 2]))
    assert torch.equal(pool, before)


def test_malformed_prefill_inputs_are_named():
    q, k, v, g, beta, _ = _decode_inputs(B=6)
    with pytest.raises(ValueError, match=r"cu_seqlens=\[0, 4, 3, 6\]: expected non-decreasing offsets"):
        chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=torch.tensor([0, 4, 3, 6]))
    with pytest.raises(ValueError, match=r"k.dtype=torch.bfloat16: expected the dtype of q"):
        chunk_gated_delta_rule(q, k.bfloat16(), v, g, beta, cu_seqlens=torch.tensor([0, 6]))
    with pytest.raises(ValueError, match=r"initial_state=shape \(1, 4, 16, 16\): expected \[N, Hv, V, K\]"):
        chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=torch.tensor([0, 2, 6]),
                               initial_state=torch.zeros(1, 4, V, K))


def test_empty_batches_return_shaped_results_and_touch_nothing():
    q, k, v, g, beta, pool = _decode_inputs(B=0)
    before = pool.clone()
    out = recurrent_gated_delta_rule(q, k, v, g, beta, state_pool=pool, state_indices=torch.zeros(0, dtype=torch.long))
    assert out.shape == (1, 0, 4, V) and torch.equal(pool, before)
    o, final = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=torch.tensor([0, 0, 0]))
    assert o.shape == (1, 0, 4, V) and torch.equal(final, torch.zeros(2, 4, V, K))
    q3, k3, v3, g3, beta3, pool3 = _decode_inputs(B=3)
    out = recurrent_gated_delta_rule(q3, k3, v3, g3, beta3, state_pool=pool3, state_indices=torch.tensor([-1, -1, -1]),
                                     check_values=False)
    assert torch.equal(out, torch.zeros_like(out)) and torch.equal(pool3, _decode_inputs(B=3)[5])


def test_decode_without_value_checks_never_syncs():
    from tests.support.sync_counter import SyncCounter

    q, k, v, g, beta, pool = _decode_inputs()
    for ops, dtype in (({}, torch.float32), (gdn_sets.emulators(chip="A3"), torch.bfloat16)):
        work = pool.to(dtype)
        with seam.install_device_facts(chip="A3"), seam.install_emulators(
                {n: fn for n, fn in ops.items() if n != OP_NPU_RECURRENT}):
            with SyncCounter(device_of_interest="cpu") as counter:
                recurrent_gated_delta_rule(q.to(dtype), k.to(dtype), v.to(dtype), g, beta.to(dtype), state_pool=work,
                                           state_indices=torch.tensor([2, -1, 0]), use_qk_l2norm=True,
                                           check_values=False)
        assert counter.total == 0, counter.counts
    with SyncCounter(device_of_interest="cpu") as counter:
        recurrent_gated_delta_rule(q, k, v, g, beta, state_pool=pool.clone(), state_indices=torch.tensor([2, -1, 0]))
    assert counter.total == 1, counter.counts  # the documented check: one host read of state_indices
