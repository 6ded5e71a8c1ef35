"""GDN tests that reach what the other GDN tests leave out (mutation testing):

* the exact strong-decay branch of the chunked path (in-chunk cumulative decay below
  ``-_DECAY_PRODUCT_RANGE``), against FLA's naive recurrence;
* the sgl-kernel-npu Triton prefill rung and its layout conversions (key-first states,
  ``h [1, NT, H, K, V]``), through a small emulator written from the entry's source, against
  FLA's naive recurrence, with K != V so a missed transpose cannot hide;
* forced backends (``backend=`` and ``SGLANG_ASCEND_HYBRID_GDN_BACKEND``) where ``auto``
  would pick another rung, so ignoring the setting fails;
* half-precision results within a small multiple of the measured error (a final state
  rounded to 16 bits, or an output a few percent off, fails).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from sglang_ascend_hybrid.emulators import gdn_npu_chunk, gdn_npu_recurrent
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.gdn import chunk_gated_delta_rule, chunk_with_states, contract, recurrent_gated_delta_rule
from sglang_ascend_hybrid.ops.gdn import torch_impl as gdn_torch
from sglang_ascend_hybrid.ops.gdn.contract import OP_NPU_CHUNK, OP_NPU_RECURRENT
from sglang_ascend_hybrid.ops.gdn.torch_impl import chunk_gdn_torch
from tests.ops.gdn.gdn_oracles import C, make_triton_chunk_emulator
from tests.ops.gdn.gdn_oracles import fla as _fla
from tests.support import gdn_inputs
from tests.support.call_counter import Counting as _Counting


def _inputs(lens, hk, ratio, K, V, *, dtype=torch.float32, seed=0, with_state=True, decay_offset=2.0,
            strong_heads=()):
    """Gates ``logsigmoid(randn + decay_offset)``; heads in ``strong_heads`` decay strongly
    (about -2.1 per token: a 64-token chunk reaches about -135)."""
    return gdn_inputs.packed(lens, seed=seed, hv=hk * ratio, hk=hk, k_dim=K, v_dim=V, dtype=dtype,
                             gate_shift=decay_offset, strong_heads=strong_heads, with_state=with_state,
                             state_scale=0.5).prefill()


# ------------------------------------------------------------------ strong decay (exact branch)

@pytest.mark.parametrize("with_state", [True, False])
@pytest.mark.parametrize("lens,strong", [([150], (0, 1)), ([70, 3, 130], (1,)), ([64, 64], (0,))])
def test_strong_decay_exact_branch_matches_fla(lens, strong, with_state):
    """Heads whose in-chunk cumulative decay falls far below -60 take the exact decay branch
    (exp of differences, causal mask by -inf); weakly decaying heads of the same group go
    through it too.  Output, final and per-chunk states against FLA."""
    hk, ratio, K, V = 1, 2, 16, 8
    q, k, v, g, beta, cu, h0 = _inputs(lens, hk, ratio, K, V, seed=len(lens), with_state=with_state,
                                       strong_heads=strong)
    first_chunk = g[0, :C].cumsum(0)
    assert float(first_chunk.min()) < -2 * gdn_torch._DECAY_PRODUCT_RANGE  # the exact branch is taken
    o, final, h = chunk_gdn_torch(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0, chunk_states=True)
    ref_o, ref_final, ref_h = _fla(q, k, v, g, beta, cu, h0, K ** -0.5, chunk_starts=True)
    torch.testing.assert_close(o, ref_o, atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(final, ref_final, atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(h, ref_h, atol=2e-5, rtol=2e-5)


def test_decay_just_inside_and_outside_the_product_range_agree_with_fla():
    """Gates putting a chunk's cumulative decay just above and just below the branch limit:
    both branches give FLA's result (the limit is a numerical switch, not a change of maths)."""
    K = V = 8
    for total in (-0.9 * gdn_torch._DECAY_PRODUCT_RANGE, -1.1 * gdn_torch._DECAY_PRODUCT_RANGE):
        q, k, v, _, beta, cu, h0 = _inputs([C], 1, 1, K, V, seed=3)
        g = torch.full((1, C, 1), total / C)
        o, final, _ = chunk_gdn_torch(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0)
        ref_o, ref_final, _ = _fla(q, k, v, g, beta, cu, h0, K ** -0.5)
        torch.testing.assert_close(o, ref_o, atol=2e-5, rtol=2e-5)
        torch.testing.assert_close(final, ref_final, atol=2e-5, rtol=2e-5)


def test_chunk_size_other_than_64_matches_fla():
    """``chunk_size`` is honoured: states at the start of every 16-token chunk."""
    q, k, v, g, beta, cu, h0 = _inputs([40, 9], 1, 1, 8, 8, seed=5)
    o, final, h = chunk_gdn_torch(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0, chunk_states=True,
                                  chunk_size=16)
    ref_o, ref_final, _ = _fla(q, k, v, g, beta, cu, h0, 8 ** -0.5)
    torch.testing.assert_close(o, ref_o, atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(final, ref_final, atol=2e-5, rtol=2e-5)
    assert h.shape == (3 + 1, 1, 8, 8)
    # the state at the start of sequence 0's second chunk = final state of its first 16 tokens
    _, mid, _ = _fla(q[:, :16], k[:, :16], v[:, :16], g[:, :16], beta[:, :16], torch.tensor([0, 16]), h0[:1],
                     8 ** -0.5)
    torch.testing.assert_close(h[1], mid[0], atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(h[3], h0[1], atol=0, rtol=0)  # sequence 1 starts from its initial state


# ------------------------------------------------------------------ the Triton prefill rung


@pytest.mark.parametrize("with_state", [True, False])
def test_triton_rung_serves_a_forced_call_with_fla_results(with_state):
    """``backend='triton'`` with npu_chunk and mega also installed (auto would take npu_chunk):
    only the Triton entry runs, and its key-first results come back value-first; K != V so a
    missing transpose of the initial state, the final state or ``h`` changes shapes or values."""
    hk, ratio, K, V = 1, 2, 16, 8
    q, k, v, g, beta, cu, h0 = _inputs([70, 5, 64], hk, ratio, K, V, dtype=torch.bfloat16, seed=12,
                                       with_state=with_state)
    if h0 is not None:  # a bf16 pool: an fp32 one takes no chunk states from the Triton path (bf16 h)
        h0 = h0.to(torch.bfloat16)
    triton = _Counting(make_triton_chunk_emulator())
    npu = _Counting(gdn_npu_chunk.make_npu_chunk_emulator(chip="A3"))
    with seam.install_device_facts(chip="A3"), \
            seam.install_emulators({contract.OP_TRITON: triton, OP_NPU_CHUNK: npu}):
        o, final, h = chunk_with_states(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0, scale=0.25,
                                        chunk_states=True, backend="triton")
    assert (triton.calls, npu.calls) == (1, 0)
    ref_o, ref_final, ref_h = _fla(q, k, v, g, beta, cu, None if h0 is None else h0.float(), 0.25,
                                   chunk_starts=True)
    assert o.dtype == torch.bfloat16 and final.dtype == torch.float32 and h.dtype == torch.float32
    assert final.shape == (3, 2, V, K) and h.shape == (2 + 1 + 1, 2, V, K)
    torch.testing.assert_close(o.float(), ref_o, atol=1e-2, rtol=1e-2)
    torch.testing.assert_close(final, ref_final, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(h, ref_h, atol=1e-2, rtol=1e-2)  # h travels in bf16 (the entry's k.dtype)


def test_triton_rung_is_what_auto_takes_without_the_npu_kernels():
    """Auto on a machine with only the Triton entry (fp16): that rung, with l2-normalisation done
    before it (the rung passes use_qk_l2norm_in_kernel=False), matching FLA."""
    q, k, v, g, beta, cu, h0 = _inputs([33, 66], 2, 1, 8, 8, dtype=torch.float16, seed=13)
    q, k = q * 3, k * 0.5  # not unit length: the op must normalise
    triton = _Counting(make_triton_chunk_emulator())
    with seam.install_emulators({contract.OP_TRITON: triton}):
        o, final = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0.half(),
                                          use_qk_l2norm=True)
    assert triton.calls == 1
    ref_o, ref_final, _ = _fla(q, k, v, g, beta, cu, h0.half(), 8 ** -0.5, l2=True)
    torch.testing.assert_close(o.float(), ref_o, atol=3e-3, rtol=3e-3)
    torch.testing.assert_close(final, ref_final, atol=3e-3, rtol=3e-3)


def test_triton_refusal_falls_to_torch_and_is_remembered():
    """A refusal text of the entry (its fp32 assertion) is a refusal: torch serves the call, and
    the rung is not tried again for that signature."""
    q, k, v, g, beta, cu, h0 = _inputs([10], 1, 1, 8, 8, dtype=torch.float16, seed=14)

    def refuses(*a, **kw):
        raise AssertionError("ChunkGatedDeltaRuleFunction does not support float32. Please use bfloat16.")

    kernel = _Counting(refuses)
    with seam.install_emulators({contract.OP_TRITON: kernel}):
        o1, f1 = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0)
        o2, f2 = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0)
    # called once: by the stride probe an fp32 state asks for (its refusal is the probe's verdict), never again
    assert kernel.calls + kernel.probe_calls == 1
    ref_o, ref_final, _ = chunk_gdn_torch(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0)
    assert torch.equal(o1, ref_o) and torch.equal(f1, ref_final) and torch.equal(o2, ref_o)


# ------------------------------------------------------------------ forced settings differ from auto

def _npu_world(dtype=torch.bfloat16):
    """Inputs the npu_chunk op serves on an A3 (bf16, bf16 state): auto takes it."""
    q, k, v, g, beta, cu, h0 = _inputs([20, 7], 2, 2, 16, 16, dtype=dtype, seed=21)
    return q, k, v, g, beta, cu, h0.to(dtype)


@pytest.mark.parametrize("how", ["argument", "environment"])
@pytest.mark.parametrize("forced", ["triton", "torch"])
def test_forced_prefill_backend_is_obeyed_where_auto_differs(how, forced, monkeypatch):
    q, k, v, g, beta, cu, h0 = _npu_world()
    triton = _Counting(make_triton_chunk_emulator())
    npu = _Counting(gdn_npu_chunk.make_npu_chunk_emulator(chip="A3"))
    ops = {contract.OP_TRITON: triton, OP_NPU_CHUNK: npu}
    with seam.install_device_facts(chip="A3"), seam.install_emulators(ops):
        chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0)
        assert (npu.calls, triton.calls) == (1, 0)  # auto: the npu_chunk op
        if how == "environment":
            monkeypatch.setenv("SGLANG_ASCEND_HYBRID_GDN_BACKEND", forced)
            o, final = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0)
        else:
            o, final = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0, backend=forced)
    assert npu.calls == 1 and triton.calls == (1 if forced == "triton" else 0)
    if forced == "torch":
        ref_o, ref_final, _ = chunk_gdn_torch(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0)
        assert torch.equal(o, ref_o) and torch.equal(final, ref_final)


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_forced_decode_backend_is_obeyed_where_auto_differs(how, monkeypatch):
    gen = torch.Generator().manual_seed(22)
    B, hk, hv, K = 3, 1, 2, 16
    pool = (torch.randn(4, hv, K, K, generator=gen) * 0.3).bfloat16()
    idx = torch.tensor([2, 0, 3])
    q, k = (torch.randn(1, B, hk, K, generator=gen).bfloat16() for _ in range(2))
    v = torch.randn(1, B, hv, K, generator=gen).bfloat16()
    g = F.logsigmoid(torch.randn(1, B, hv, generator=gen))
    beta = torch.rand(1, B, hv, generator=gen).bfloat16()
    kernel = _Counting(gdn_npu_recurrent.make_npu_recurrent_emulator())
    args = dict(state_indices=idx, use_qk_l2norm=True)
    with seam.install_emulators({OP_NPU_RECURRENT: kernel}):
        recurrent_gated_delta_rule(q, k, v, g, beta, state_pool=pool.clone(), **args)
        assert kernel.calls == 1  # auto: the recurrent op
        forced_pool = pool.clone()
        if how == "environment":
            monkeypatch.setenv("SGLANG_ASCEND_HYBRID_GDN_BACKEND", "torch")
            o = recurrent_gated_delta_rule(q, k, v, g, beta, state_pool=forced_pool, **args)
        else:
            o = recurrent_gated_delta_rule(q, k, v, g, beta, state_pool=forced_pool, backend="torch", **args)
    assert kernel.calls == 1
    ref_pool = pool.clone()
    monkeypatch.delenv("SGLANG_ASCEND_HYBRID_GDN_BACKEND", raising=False)
    ref = recurrent_gated_delta_rule(q, k, v, g, beta, state_pool=ref_pool, **args)  # no kernel: torch
    assert torch.equal(o, ref) and torch.equal(forced_pool, ref_pool)


def test_environment_backend_of_the_other_ladder_walks_auto(monkeypatch, caplog):
    """``SGLANG_ASCEND_HYBRID_GDN_BACKEND=npu_recurrent`` names a decode kernel: prefill walks its
    ladder (npu_chunk here) and says so once; an unknown name is a ValueError naming it."""
    import logging

    q, k, v, g, beta, cu, h0 = _npu_world()
    npu = _Counting(gdn_npu_chunk.make_npu_chunk_emulator(chip="A3"))
    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_GDN_BACKEND", "npu_recurrent")
    with seam.install_device_facts(chip="A3"), seam.install_emulators({OP_NPU_CHUNK: npu}), \
            caplog.at_level(logging.INFO):
        chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0)
    assert npu.calls == 1
    assert "SGLANG_ASCEND_HYBRID_GDN_BACKEND=npu_recurrent is not a GDN prefill kernel" in caplog.text
    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_GDN_BACKEND", "cuda")
    with pytest.raises(ValueError, match="SGLANG_ASCEND_HYBRID_GDN_BACKEND='cuda'"):
        chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0)


# ------------------------------------------------------------------ half precision, tight

def _rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


@pytest.mark.parametrize("dtype,o_bound", [(torch.float16, 2e-3), (torch.bfloat16, 1e-2)])
def test_half_precision_error_is_rounding_only(dtype, o_bound):
    """16-bit inputs (unit-length q / k, so no rounding inside the op): the output differs from
    FLA on the same inputs by its own rounding only (measured: 3e-4 fp16, 2.8e-3 bf16 relative),
    and the fp32 final state by float accumulation only (measured: ~1e-6): a state rounded
    to 16 bits (>= 1e-3) or an output a few percent off fails."""
    q, k, v, g, beta, cu, h0 = _inputs([3, 90, 64], 2, 2, 32, 32, dtype=dtype, seed=31)
    o, final = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0)
    ref_o, ref_final, _ = _fla(q, k, v, g, beta, cu, h0, 32 ** -0.5)
    assert o.dtype == dtype and final.dtype == torch.float32
    assert _rel(o, ref_o) < o_bound
    assert _rel(final, ref_final) < 2e-5
    assert _rel(final.to(dtype), ref_final) > 1e-4  # (the bound above sees 16-bit rounding)


# ------------------------------------------------------------------ decode slot checks at their edges

def _decode_args(indices, slots=4):
    gen = torch.Generator().manual_seed(51)
    B = len(indices)
    return (torch.randn(1, B, 1, 8, generator=gen), torch.randn(1, B, 1, 8, generator=gen),
            torch.randn(1, B, 2, 8, generator=gen), -torch.rand(1, B, 2, generator=gen),
            torch.rand(1, B, 2, generator=gen)), torch.randn(slots, 2, 8, 8, generator=gen), torch.tensor(indices)


@pytest.mark.parametrize("indices,needle", [
    ([0, 4], r"state_indices=\[0, 4\]: expected slots in \[0, 4\) or -1 \(padding\)"),  # one past the end
    ([0, 0], r"state_indices=\[0, 0\]: expected each slot at most once per batch"),     # slot 0 twice
    ([3, -1, 3], r"state_indices=\[3, -1, 3\]: expected each slot at most once"),
])
def test_decode_slot_checks_at_their_edges_leave_the_pool(indices, needle):
    (q, k, v, g, beta), pool, idx = _decode_args(indices)
    before = pool.clone()
    with pytest.raises(ValueError, match=needle):
        recurrent_gated_delta_rule(q, k, v, g, beta, state_pool=pool, state_indices=idx)
    assert torch.equal(pool, before)


def test_decode_accepts_the_last_slot_and_padding_repeats():
    """Slot ``slots - 1`` is valid and -1 may repeat (padding rows): no error, the padded rows'
    outputs are zero and only the live slots change."""
    (q, k, v, g, beta), pool, idx = _decode_args([3, -1, -1, 0])
    before = pool.clone()
    o = recurrent_gated_delta_rule(q, k, v, g, beta, state_pool=pool, state_indices=idx)
    assert torch.count_nonzero(o[0, 1:3]) == 0 and torch.count_nonzero(o[0, 0]) > 0
    assert torch.equal(pool[1:3], before[1:3])
    assert not torch.equal(pool[3], before[3]) and not torch.equal(pool[0], before[0])


def test_long_index_lists_are_shortened_in_the_message():
    indices = list(range(20)) + [0]
    (q, k, v, g, beta), pool, idx = _decode_args(indices, slots=32)
    with pytest.raises(ValueError, match=r"state_indices=repeated slots \[0\]: expected each slot"):
        recurrent_gated_delta_rule(q, k, v, g, beta, state_pool=pool, state_indices=idx)
    (q, k, v, g, beta), pool, idx = _decode_args(list(range(19)) + [40], slots=32)
    with pytest.raises(ValueError, match=r"state_indices=\[0, 1, 2, 3, 4, 5, 6, 7\]\.\.\. \(bad entries \[40\]\)"):
        recurrent_gated_delta_rule(q, k, v, g, beta, state_pool=pool, state_indices=idx)
