"""Range, not only precision: sgl-kernel-npu's mega wrapper casts q / k / v / beta and the initial
state to fp16 (``t.half()``, sgl-project/sgl-kernel-npu f425bdf1 ``fla/mega_chunk_gdn.py`` lines 79 and
133) and keeps the state and the output in fp16 buffers, so magnitudes beyond 65504 become inf / NaN
where the torch rung and an fp64 oracle stay finite.  The prefill ladder hands the mega kernel (and
the Triton entry in mega mode) only calls whose inputs and initial state fit fp16's range (one INFO
line, per call, not remembered), and a call whose outputs come back non-finite from finite inputs
goes to the next rung with the state untouched."""

from __future__ import annotations

import logging

import pytest
import torch

from sglang_ascend_hybrid.emulators import gdn_mega, gdn_sets, gdn_triton_chunk
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.gdn import chunk_gated_delta_rule, prefill
from sglang_ascend_hybrid.ops.gdn import contract as caps
from sglang_ascend_hybrid.ops.gdn.api import chunk_with_states
from sglang_ascend_hybrid.ops.gdn.contract import OP_MEGA, OP_TRITON
from sglang_ascend_hybrid.ops.ladder import ForcedRungUnavailable
from tests.support import gdn_inputs
from tests.support.call_counter import Counting

D = 128
HV, HK = 8, 2  # a native pair of the current mega table


pytestmark = pytest.mark.usefixtures("fresh_gdn")


def fp64_oracle(q, k, v, g, beta, cu, h0, scale):
    """The recurrence in fp64, value-first states: S = e^g S; u = beta (v - S k); S += u k^T; o = S (scale q)."""
    q, k, v, g, beta = (x[0].double() for x in (q, k, v, g, beta))
    r = v.shape[1] // q.shape[1]
    q, k = q.repeat_interleave(r, 1), k.repeat_interleave(r, 1)
    out = torch.zeros(v.shape, dtype=torch.float64)
    finals = []
    bounds = cu.tolist()
    for s in range(len(bounds) - 1):
        S = h0[s].double().clone()
        for t in range(bounds[s], bounds[s + 1]):
            S = S * g[t].exp()[:, None, None]
            u = beta[t][:, None] * (v[t] - torch.einsum("hvk,hk->hv", S, k[t]))
            S = S + u[:, :, None] * k[t][:, None, :]
            out[t] = torch.einsum("hvk,hk->hv", S, q[t] * scale)
        finals.append(S)
    return out[None], torch.stack(finals)


def _inputs(v_scale=1.0, state_scale=0.1, g_shift=2.0, lens=(12, 7), seed=0):
    return gdn_inputs.packed(lens, seed=seed, hv=HV, hk=HK, k_dim=D, dtype=torch.bfloat16, v_scale=v_scale,
                             gate_shift=g_shift, state_scale=state_scale, state_dtype=torch.bfloat16).prefill()


def _close_to_oracle(o, final, args, tol=2e-2):
    q, k, v, g, beta, cu, h0 = args
    ref_o, ref_final = fp64_oracle(q, k, v, g, beta, cu, h0, D ** -0.5)
    assert torch.isfinite(ref_o).all() and torch.isfinite(ref_final).all()
    assert torch.isfinite(o).all() and torch.isfinite(final).all()
    assert float((o.double() - ref_o).abs().max()) <= tol * float(ref_o.abs().max())
    assert float((final.double() - ref_final).abs().max()) <= tol * float(ref_final.abs().max())


CASES = {"v_1e5": dict(v_scale=1e5), "state_1e5": dict(state_scale=1e5)}


@pytest.mark.parametrize("case", list(CASES))
def test_out_of_fp16_range_inputs_never_reach_the_mega_kernel(caplog, case):
    args = _inputs(**CASES[case])
    q, k, v, g, beta, cu, h0 = args
    assert max(float(v.float().abs().max()), float(h0.float().abs().max())) > caps.MEGA_MAX_ABS
    mega = Counting(gdn_mega.make_mega_emulator())
    # what the mega kernel would give: inf / NaN (its wrapper's fp16 casts)
    bad = mega(q, k, v, g, beta, D ** -0.5, h0.float().transpose(-1, -2).contiguous(), True, cu.to(torch.int32))
    assert not (torch.isfinite(bad[1]).all() and torch.isfinite(bad[3]).all())
    mega.calls = 0
    h0_before = h0.clone()
    with seam.install_device_facts(chip="A3", sgl_kernel_npu_version="2026.6.1"), \
            seam.install_emulators({OP_MEGA: mega}), caplog.at_level(logging.INFO):
        o, final = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0)
        o2, final2 = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0)
        small = _inputs(seed=1)  # in range: the same signature still takes the mega kernel
        chunk_gated_delta_rule(*small[:5], cu_seqlens=small[5], initial_state=small[6])
    assert mega.calls == 1
    range_lines = [r for r in caplog.records if "exceed fp16's range" in r.getMessage()]
    assert len(range_lines) == 1 and range_lines[0].levelno == logging.INFO
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING or "refused" in r.getMessage()]
    ref_o, ref_final = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0, backend="torch")
    assert torch.equal(o, ref_o) and torch.equal(final, ref_final) and torch.equal(o2, o)
    assert torch.equal(h0, h0_before)
    _close_to_oracle(o, final, args)
    with seam.install_emulators({OP_MEGA: mega}), pytest.raises(ForcedRungUnavailable, match="fp16's range"):
        chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0, backend="mega")


def test_a_non_finite_input_never_reaches_the_mega_kernel():
    q, k, v, g, beta, cu, h0 = _inputs()
    v = v.clone()
    v[0, 3, 1, 5] = float("nan")
    mega = Counting(gdn_mega.make_mega_emulator())
    with seam.install_emulators({OP_MEGA: mega}):
        chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0)
    assert mega.calls == 0


def test_an_overflow_inside_the_kernel_sends_the_call_on_with_the_state_untouched(caplog):
    """Inputs within fp16's range, a state up to 6e4 and a growing gate (g = 0.5): the mega kernel's fp16
    state and output overflow; the torch rung and the fp64 oracle are finite.  The call goes on to the
    next rung, every time (value-dependent: not remembered), with one INFO line."""
    q, k, v, g, beta, cu, _ = _inputs(g_shift=None)
    h0 = ((torch.rand(2, HV, D, D, generator=torch.Generator().manual_seed(7)) * 2 - 1) * 6e4).bfloat16()
    args = (q, k, v, g, beta, cu, h0)
    assert float(h0.float().abs().max()) <= caps.MEGA_MAX_ABS
    mega = Counting(gdn_mega.make_mega_emulator())
    h0_before = h0.clone()
    with seam.install_device_facts(chip="A3", sgl_kernel_npu_version="2026.6.1"), \
            seam.install_emulators({OP_MEGA: mega}), caplog.at_level(logging.INFO):
        o, final = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0)
        chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0)
        with pytest.raises(ForcedRungUnavailable, match="declined this call"):
            chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0, backend="mega")
    assert mega.calls == 3
    declined = [r for r in caplog.records if "declined" in r.getMessage()]
    assert len(declined) == 1 and declined[0].levelno == logging.INFO and "non-finite" in declined[0].getMessage()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert torch.equal(h0, h0_before)
    ref_o, ref_final = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0, backend="torch")
    assert torch.equal(o, ref_o) and torch.equal(final, ref_final)
    _close_to_oracle(o, final, args)


def test_a_kernel_returning_nan_from_finite_inputs_is_declined():
    args = _inputs()
    q, k, v, g, beta, cu, h0 = args
    real = gdn_mega.make_mega_emulator()

    def nan_out(*a, **kw):
        out = list(real(*a, **kw))
        out[1] = out[1].clone()
        out[1][0, 0, 0, 0] = float("nan")
        return tuple(out)

    with seam.install_emulators({OP_MEGA: nan_out}):
        o, final = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0)
    ref_o, ref_final = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0, backend="torch")
    assert torch.equal(o, ref_o) and torch.equal(final, ref_final)


@pytest.mark.parametrize("case", list(CASES))
def test_the_triton_entry_in_mega_mode_gets_the_same_range_rule(monkeypatch, case):
    monkeypatch.setenv("GDN_USE_MEGA_GDN", "1")
    args = _inputs(**CASES[case])
    q, k, v, g, beta, cu, h0 = args
    mega = Counting(gdn_mega.make_mega_emulator())
    triton = Counting(gdn_triton_chunk.make_triton_chunk_emulator(mega=mega))
    with seam.install_device_facts(chip="A3", sgl_kernel_npu_version="2026.6.1"), \
            seam.install_emulators({OP_MEGA: mega, OP_TRITON: triton}):
        o, final, _ = chunk_with_states(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0, skip=("mega",))
        small = _inputs(seed=1)
        chunk_with_states(*small[:5], cu_seqlens=small[5], initial_state=small[6], skip=("mega",))
    assert triton.calls == 1 and mega.calls == 1  # only the in-range call
    _close_to_oracle(o, final, args)


def test_the_range_is_read_once_per_call_and_only_when_a_16_bit_kernel_is_next(monkeypatch):
    """The chunk op serves first: the mega rung's predicate (which reads values) is never asked."""
    args = _inputs()
    q, k, v, g, beta, cu, h0 = args
    reads = []
    real = prefill.ChunkCall.max_abs

    def counting(self):
        reads.append(1)
        return real(self)

    monkeypatch.setattr(prefill.ChunkCall, "max_abs", counting)
    with seam.install_device_facts(chip="A3"), seam.install_emulators(gdn_sets.emulators(chip="A3")):
        chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0)
    assert reads == []
    with seam.install_device_facts(chip="A3"), seam.install_emulators(gdn_sets.emulators(chip="A3", npu_chunk=False)):
        chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0)
    assert len(reads) == 1
    call = prefill.ChunkCall(q, k, v, g, beta, cu, h0, 1.0)
    assert real(call) == max(float(t.float().abs().max()) for t in (q, k, v, beta, h0))
    assert caps.fits_mega_range(65504.0) and not caps.fits_mega_range(65505.0)
    assert not caps.fits_mega_range(float("nan")) and not caps.fits_mega_range(float("inf"))


def test_a_call_with_no_tokens_and_no_state_has_nothing_out_of_range():
    q, k, v, g, beta, _, _ = _inputs(lens=(0,))
    mega = Counting(gdn_mega.make_mega_emulator())
    with seam.install_emulators({OP_MEGA: mega}):
        o, final = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=torch.tensor([0, 0]))
    assert o.shape == (1, 0, HV, D) and torch.equal(final, torch.zeros(1, HV, D, D))
    assert prefill.ChunkCall(q, k, v, g, beta, torch.tensor([0, 0]), None, 1.0).max_abs() == 0.0
