"""Empty sequences in a prefill batch: sgl-kernel-npu's Triton entry numbers chunks by the
non-empty sequences before them (``prepare_chunk_indices``, SKN f425bdf1 ``fla/utils.py`` ~155-164),
so an empty sequence followed by a non-empty one leaves the later sequences uncomputed; its emulator
refuses such cu_seqlens, and the ladder hands the rungs fed by cu_seqlens (triton, mega) only the
non-empty sequences, putting the empty ones' results back."""

from __future__ import annotations

import pytest
import torch

from sglang_ascend_hybrid.emulators import gdn_mega, gdn_triton_chunk
from sglang_ascend_hybrid.emulators.gdn_triton_chunk import empty_sequence_before_tokens, make_triton_chunk_emulator
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.errors import EmulatorContractViolation
from sglang_ascend_hybrid.ops.gdn import prefill
from sglang_ascend_hybrid.ops.gdn.api import chunk_with_states
from sglang_ascend_hybrid.ops.gdn.contract import OP_MEGA, OP_TRITON
from tests.support import gdn_inputs
from tests.support.call_counter import Counting

pytestmark = pytest.mark.usefixtures("fresh_gdn")

C = 64


def _bf16(lens, seed, *, hv, hk, d, pool_dtype=torch.bfloat16):
    return gdn_inputs.packed(lens, seed=seed, hv=hv, hk=hk, k_dim=d, dtype=torch.bfloat16,
                             state_dtype=pool_dtype).prefill()


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.delenv("GDN_USE_MEGA_GDN", raising=False)
    monkeypatch.delenv("GDN_ATTN_BACKEND_TRITON", raising=False)


def oracle64(q, k, v, g, beta, cu, h0, scale):
    """The token recurrence in fp64, value-first states: (o [T, Hv, V], final [N, Hv, V, K], the state
    at the start of every 64-token chunk, sequence-major)."""
    T, Hk, K = q.shape[1:]
    Hv, V = v.shape[2], v.shape[3]
    qd = q[0].double().repeat_interleave(Hv // Hk, 1)
    kd = k[0].double().repeat_interleave(Hv // Hk, 1)
    vd, gd, bd = v[0].double(), g[0].double(), beta[0].double()
    bounds = [int(x) for x in cu.tolist()]
    o = torch.zeros(T, Hv, V, dtype=torch.float64)
    finals, starts = [], []
    for s in range(len(bounds) - 1):
        S = torch.zeros(Hv, V, K, dtype=torch.float64) if h0 is None else h0[s].double().clone()
        for t in range(bounds[s], bounds[s + 1]):
            if (t - bounds[s]) % C == 0:
                starts.append(S.clone())
            S = S * gd[t].exp()[:, None, None]
            u = bd[t][:, None] * (vd[t] - torch.einsum("hvk,hk->hv", S, kd[t]))
            S = S + u[:, :, None] * kd[t][:, None, :]
            o[t] = torch.einsum("hvk,hk->hv", S, qd[t] * scale)
        finals.append(S)
    h = torch.stack(starts) if starts else torch.zeros(0, Hv, V, K, dtype=torch.float64)
    return o, torch.stack(finals), h


def _close(got, want, tol=3e-2):
    got, want = got.double(), want.double()
    assert got.shape == want.shape, (got.shape, want.shape)
    err = float((got - want).abs().max()) if got.numel() else 0.0
    assert err <= tol * max(1.0, float(want.abs().max()) if want.numel() else 0.0), err


# ---------------------------------------------------------------- the emulator's rule


@pytest.mark.parametrize("bounds,want", [
    ([0, 1, 1, 131], (1, 2)),      # lens [1, 0, 130]: the 130-token sequence is never computed
    ([0, 0, 5], (0, 1)),           # a leading empty sequence shifts every later one
    ([0, 5, 5, 5, 82], (1, 3)),    # the first empty one and the first non-empty one after it
    ([0, 5, 82, 82], None),        # trailing empty sequences are numbered last: harmless
    ([0, 5, 82, 82, 82], None),
    ([0, 0, 0], None),
    ([0, 5, 82], None),
])
def test_empty_sequence_before_tokens(bounds, want):
    assert empty_sequence_before_tokens(bounds) == want


@pytest.mark.parametrize("lens", [(1, 0, 130), (0, 5), (5, 0, 77)])
def test_the_triton_path_refuses_an_empty_sequence_before_tokens(lens):
    q, k, v, g, beta, cu, h0 = _bf16(lens, 0, hv=4, hk=2, d=32)
    entry = make_triton_chunk_emulator(mega=None, version="2026.6.1")
    with pytest.raises(EmulatorContractViolation, match=r"prepare_chunk_indices.*unwritten"):
        entry(q, k, v, g, beta, initial_state=h0.float().transpose(-1, -2).contiguous(), cu_seqlens=cu)


def test_a_trailing_empty_sequence_is_served_and_keeps_its_initial_state():
    q, k, v, g, beta, cu, h0 = _bf16((5, 77, 0), 0, hv=4, hk=2, d=32)
    kf = h0.float().transpose(-1, -2).contiguous()
    o, final, h = make_triton_chunk_emulator(mega=None, version="2026.6.1")(q, k, v, g, beta, initial_state=kf,
                                                                           cu_seqlens=cu)
    assert torch.equal(final[2], kf[2]) and h.shape[1] == 1 + 2
    ref_o, ref_final, ref_h = oracle64(q, k, v, g, beta, cu, h0, 32 ** -0.5)
    _close(o[0], ref_o)
    _close(final.transpose(-1, -2), ref_final)


def test_the_mega_mode_of_the_entry_is_not_the_triton_rule(monkeypatch):
    """With GDN_USE_MEGA_GDN=1 the entry returns before ``chunk_local_cumsum`` (SKN f425bdf1 fla/chunk.py
    ``chunk_gated_delta_rule_fwd``): the Triton rule does not apply there, the mega kernel's own does
    (chunk_h: an empty sequence anywhere is undefined)."""
    monkeypatch.setenv("GDN_USE_MEGA_GDN", "1")
    q, k, v, g, beta, cu, h0 = _bf16((5, 0, 77), 0, hv=16, hk=8, d=128)
    mega = Counting(gdn_mega.make_mega_emulator())
    entry = make_triton_chunk_emulator(mega=mega, version="2026.6.1")
    with pytest.raises(EmulatorContractViolation, match="run_mega_chunk_gdn: sequence"):
        entry(q, k, v, g, beta, initial_state=h0.float().transpose(-1, -2).contiguous(), cu_seqlens=cu)
    assert mega.calls == 1


# ---------------------------------------------------------------- the ladder


def _lengths(bounds):
    return [b - a for a, b in zip(bounds, bounds[1:])]


def _machine():
    mega = Counting(gdn_mega.make_mega_emulator())
    triton = Counting(gdn_triton_chunk.make_triton_chunk_emulator(mega=mega, version="2026.6.1"))
    return {OP_MEGA: mega, OP_TRITON: triton}, mega, triton


def _ladder(ops, args, backend, **kw):
    q, k, v, g, beta, cu, h0 = args
    with seam.install_device_facts(chip="A3", sgl_kernel_npu_version="2026.6.1"), seam.install_emulators(ops):
        return chunk_with_states(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0, backend=backend, **kw)


@pytest.mark.parametrize("with_state", [True, False])
def test_triton_rung_with_an_empty_sequence_matches_torch_and_the_fp64_oracle(with_state):
    """lens (5, 0, 77), cu_seqlens [0, 5, 5, 82], the Triton rung forced: the entry sees [0, 5, 82]
    (it would raise on the original), and o / final / h equal the torch rung's and the oracle's."""
    q, k, v, g, beta, cu, h0 = _bf16((5, 0, 77), 1, hv=4, hk=2, d=32)
    h0 = h0 if with_state else None
    assert cu.tolist() == [0, 5, 5, 82]
    args = (q, k, v, g, beta, cu, h0)
    ops, mega, triton = _machine()
    seen = []
    real = ops[OP_TRITON]
    ops[OP_TRITON] = lambda *a, **kw: (seen.append(kw["cu_seqlens"].tolist()), real(*a, **kw))[1]
    o, final, h = _ladder(ops, args, "triton", chunk_states=True)
    assert [0, 5, 82] in seen and all(0 not in _lengths(c) for c in seen), seen  # (and the stride probe's)
    assert mega.calls == 0
    t_o, t_final, t_h = chunk_with_states(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0, chunk_states=True,
                                          backend="torch")
    ref_o, ref_final, ref_h = oracle64(q, k, v, g, beta, cu, h0, 32 ** -0.5)
    assert o.shape == t_o.shape and final.shape == t_final.shape and h.shape == t_h.shape == (1 + 2, 4, 32, 32)
    assert final.dtype == t_final.dtype == torch.float32
    # the empty sequence: exactly what the torch rung returns (its initial state, or zeros)
    assert torch.equal(final[1], t_final[1])
    assert torch.equal(final[1], torch.zeros_like(final[1]) if h0 is None else h0[1].float())
    for got, want in ((o[0], t_o[0]), (final, t_final), (h, t_h)):
        _close(got, want)
    for got, want in ((o[0], ref_o), (final, ref_final), (h, ref_h)):
        _close(got, want)


def test_the_sequences_named_for_exact_chunk_states_are_renumbered():
    """An fp32 pool's named chunk states are recomputed on the non-empty sequences' numbering:
    sequence 2 of (5, 0, 150) is sequence 1 of the call the entry sees."""
    q, k, v, g, beta, cu, h0 = _bf16((5, 0, 150), 2, hv=4, hk=2, d=32, pool_dtype=torch.float32)
    ops, _, triton = _machine()
    o, final, h = _ladder(ops, (q, k, v, g, beta, cu, h0), "triton", chunk_states=True, exact_chunks=((2, 2),))
    assert triton.calls >= 2  # the full call and the recomputation of the named state
    _, _, t_h = chunk_with_states(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0, chunk_states=True,
                                  backend="torch")
    _, _, ref_h = oracle64(q, k, v, g, beta, cu, h0, 32 ** -0.5)
    assert h.shape == (1 + 3, 4, 32, 32)
    torch.testing.assert_close(h[1 + 2], t_h[1 + 2], atol=1e-4, rtol=1e-4)  # fp32, not the entry's bf16
    _close(h[1 + 2], ref_h[1 + 2], tol=1e-4)


@pytest.mark.parametrize("backend", ["triton", "mega"])
def test_only_empty_sequences_call_no_kernel(backend):
    q, k, v, g, beta, cu, h0 = _bf16((0, 0), 0, hv=16, hk=8, d=128)
    ops, mega, triton = _machine()
    o, final, h = _ladder(ops, (q, k, v, g, beta, cu, h0), backend)
    assert triton.calls == 0 and mega.calls == 0
    t_o, t_final, _ = chunk_with_states(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0, backend="torch")
    assert o.shape == t_o.shape == (1, 0, 16, 128) and o.dtype == t_o.dtype and h is None
    assert torch.equal(final, t_final) and torch.equal(final, h0.float())


def test_only_empty_sequences_with_chunk_states_give_no_chunk_state():
    q, k, v, g, beta, cu, h0 = _bf16((0, 0), 0, hv=4, hk=2, d=32)
    ops, mega, triton = _machine()
    o, final, h = _ladder(ops, (q, k, v, g, beta, cu, None), "triton", chunk_states=True)
    assert triton.calls == 0 and mega.calls == 0
    assert h.shape == (0, 4, 32, 32) and h.dtype == torch.float32
    assert torch.equal(final, torch.zeros(2, 4, 32, 32))


def test_the_mega_rung_never_sees_an_empty_sequence():
    """The mega kernel's chunk_h writes an empty sequence's initial state into another sequence's h row
    (past h's end when it is the last) and leaves a cross-core flag unmatched (SKN f425bdf1
    csrc/mega_chunk_gdn/op_kernel/chunk_h.cpp ~519-560): the rung hands it the non-empty ones."""
    q, k, v, g, beta, cu, h0 = _bf16((5, 0, 77, 0), 3, hv=16, hk=8, d=128)
    ops, mega, _ = _machine()
    seen = []
    real = ops[OP_MEGA]
    ops[OP_MEGA] = lambda *a: (seen.append(a[-1].tolist()), real(*a))[1]
    o, final, _ = _ladder(ops, (q, k, v, g, beta, cu, h0), "mega")
    assert seen == [[0, 5, 82]], seen
    t_o, t_final, _ = chunk_with_states(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0, backend="torch")
    assert torch.equal(final[[1, 3]], h0[[1, 3]].float())
    _close(o[0], t_o[0])
    _close(final, t_final)


def test_a_call_without_empty_sequences_is_handed_over_as_it_is():
    call = prefill.ChunkCall(*_bf16((5, 7), 0, hv=4, hk=2, d=32)[:6], None, 0.5)
    seen = []
    prefill.without_empty_sequences(lambda c: seen.append(c) or (None, None, None))(call)
    assert seen == [call]


def test_the_torch_path_keeps_chunk_states_of_a_call_with_only_empty_sequences():
    q, k, v, g, beta, cu, h0 = _bf16((0, 0), 0, hv=4, hk=2, d=32)
    o, final, h = chunk_with_states(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0, backend="torch",
                                    chunk_states=True)
    assert o.shape == (1, 0, 4, 32) and h.shape == (0, 4, 32, 32) and torch.equal(final, h0.float())
