"""The GDN integration hooks on the real upstream Ascend backend module (CPU, stubs + emulators)."""

from __future__ import annotations

import functools
import logging

import pytest
import torch
import torch.nn.functional as F
from fla.ops.gated_delta_rule.naive import naive_recurrent_gated_delta_rule

from sglang_ascend_hybrid.backends import gdn_hooks
from sglang_ascend_hybrid.emulators import gdn as emu
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.gdn import dispatch
from sglang_ascend_hybrid.ops.gdn.reference import chunk_gdn_torch, l2norm

D = 128


@pytest.fixture
def ascend_gdn(npu_stub_packages, monkeypatch):
    """The real upstream module, with its NPU helpers routed to CPU emulators."""
    from sglang.srt.hardware_backend.npu.attention import ascend_gdn_backend as mod

    def prepare_chunk_indices(cu_seqlens, chunk_size):
        rows = []
        b = cu_seqlens.tolist()
        for s in range(len(b) - 1):
            rows += [[s, c] for c in range((b[s + 1] - b[s] + chunk_size - 1) // chunk_size)]
        return torch.tensor(rows, dtype=cu_seqlens.dtype)

    monkeypatch.setattr(mod, "l2norm_fwd", l2norm)
    monkeypatch.setattr(mod, "prepare_chunk_indices", prepare_chunk_indices)
    dispatch.forget_refusals()
    yield mod
    dispatch.forget_refusals()


def _backend(mod, cu, track):
    from types import SimpleNamespace

    backend = object.__new__(mod.AscendGDNAttnBackend)  # the real class, without a model runner
    backend.actual_seq_lengths = torch.diff(cu).to(torch.int32)
    backend.forward_metadata = SimpleNamespace(has_mamba_track_mask=track)
    return backend


def _inputs(lens, hv, hk, seed=0):
    gen = torch.Generator().manual_seed(seed)
    T = sum(lens)
    q = torch.randn(T, hk, D, generator=gen).half()
    k = torch.randn(T, hk, D, generator=gen).half()
    v = torch.randn(T, hv, D, generator=gen).half()
    g = F.logsigmoid(torch.randn(1, T, hv, generator=gen) + 2.0)
    beta = torch.rand(1, T, hv, generator=gen).half()
    cu = torch.tensor([0] + lens, dtype=torch.int32).cumsum(0).to(torch.int32)
    pool = torch.randn(len(lens) + 2, hv, D, D, generator=gen) * 0.1
    return q, k, v, g, beta, cu, pool


def _fla_reference(q, k, v, g, beta, cu, h0):
    """FLA naive recurrence per sequence; keys repeated per value head; states key-first there."""
    hv = v.shape[1]
    qn, kn = (l2norm(x.float()).repeat_interleave(hv // x.shape[1], 1) for x in (q, k))
    outs, finals = [], []
    b = cu.tolist()
    for s in range(len(b) - 1):
        sl = slice(b[s], b[s + 1])
        o, ht = naive_recurrent_gated_delta_rule(qn[None, sl], kn[None, sl], v[None, sl].float(),
                                                 beta[:, sl].float(), g[:, sl], scale=D ** -0.5,
                                                 initial_state=h0[s:s + 1].transpose(-1, -2),
                                                 output_final_state=True)
        outs.append(o[0])
        finals.append(ht[0].transpose(-1, -2))
    return torch.cat(outs), torch.stack(finals)


def _hooked(mod):
    """What SGLang's HookRegistry installs for an AROUND hook: hook(original, self, *args)."""
    original = mod.AscendGDNAttnBackend.chunk_gdn

    @functools.wraps(original)
    def chunk_gdn(*args, **kwargs):
        return gdn_hooks.ascend_chunk_gdn(original, *args, **kwargs)

    return chunk_gdn


def test_upstream_raises_and_hooked_prefill_runs_6_2(ascend_gdn, monkeypatch, caplog):
    mod = ascend_gdn
    q, k, v, g, beta, cu, pool = _inputs([5, 70], 6, 2)
    refusing = emu.make_npu_chunk_emulator(refuse=lambda hv, hk: (hv, hk) == (6, 2))
    monkeypatch.setattr(torch.ops.npu, "chunk_gated_delta_rule", refusing, raising=False)
    idx = torch.tensor([3, 1])
    pool_before = pool.clone()
    backend = _backend(mod, cu, track=False)

    with pytest.raises(RuntimeError, match="161002"):  # upstream as shipped
        backend.chunk_gdn(q, k, v, g, beta, pool[idx], cu)

    monkeypatch.setattr(mod.AscendGDNAttnBackend, "chunk_gdn", _hooked(mod))
    mega_calls = []
    mega = emu.make_mega_emulator()
    with seam.install_emulators({emu.OP_MEGA: lambda *a: mega_calls.append(1) or mega(*a)}), \
            caplog.at_level(logging.INFO):
        o, final, h = backend.chunk_gdn(q, k, v, g, beta, pool[idx], cu)
        backend.chunk_gdn(q, k, v, g, beta, pool[idx], cu)
    assert len(mega_calls) == 2  # the (8, 2) pad plan, on both calls
    assert torch.equal(pool, pool_before)
    ref_o, ref_final = _fla_reference(q, k, v, g, beta, cu, pool[idx])
    assert o.shape == (75, 6, D) and o.dtype == torch.float16
    torch.testing.assert_close(o.float(), ref_o, atol=3e-3, rtol=3e-3)
    torch.testing.assert_close(final, ref_final, atol=3e-3, rtol=3e-3)
    assert h.shape == (1 + 2, 6, D, D)
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert text.count("refused") == 1
    assert "(NumValueHeads, NumKeyHeads)=(6, 2)" in text and "mega kernel via pad plan" in text


def test_hooked_prefill_with_state_tracking_returns_chunk_states(ascend_gdn, monkeypatch):
    mod = ascend_gdn
    q, k, v, g, beta, cu, pool = _inputs([3, 130], 6, 2, seed=1)
    refusing = emu.make_npu_chunk_emulator(refuse=lambda hv, hk: True)
    monkeypatch.setattr(torch.ops.npu, "chunk_gated_delta_rule", refusing, raising=False)
    monkeypatch.setattr(mod.AscendGDNAttnBackend, "chunk_gdn", _hooked(mod))
    backend = _backend(mod, cu, track=True)
    idx = torch.tensor([0, 2])
    with seam.install_emulators({emu.OP_MEGA: emu.make_mega_emulator()}):
        o, final, h = backend.chunk_gdn(q, k, v, g, beta, pool[idx], cu)
    ref_o, ref_final = _fla_reference(q, k, v, g, beta, cu, pool[idx])
    torch.testing.assert_close(o.float(), ref_o, atol=3e-3, rtol=3e-3)
    torch.testing.assert_close(final, ref_final, atol=3e-3, rtol=3e-3)
    _, _, ref_h = chunk_gdn_torch(l2norm(q)[None], l2norm(k)[None], v[None], g, beta, cu_seqlens=cu,
                                  initial_state=pool[idx], chunk_states=True)
    assert h.shape == ref_h.shape == (1 + 3, 6, D, D)
    torch.testing.assert_close(h.float(), ref_h, atol=3e-3, rtol=3e-3)


def test_hook_passes_through_what_upstream_serves(ascend_gdn, monkeypatch):
    mod = ascend_gdn
    q, k, v, g, beta, cu, pool = _inputs([9], 8, 2, seed=2)
    monkeypatch.setattr(torch.ops.npu, "chunk_gated_delta_rule", emu.make_npu_chunk_emulator(), raising=False)
    backend = _backend(mod, cu, track=True)
    expected = mod.AscendGDNAttnBackend.chunk_gdn(backend, q, k, v, g, beta, pool[:1], cu)
    monkeypatch.setattr(mod.AscendGDNAttnBackend, "chunk_gdn", _hooked(mod))
    got = backend.chunk_gdn(q, k, v, g, beta, pool[:1], cu)
    for a, b in zip(got, expected):
        assert torch.equal(a, b)


def test_real_errors_are_not_swallowed(ascend_gdn, monkeypatch):
    mod = ascend_gdn
    q, k, v, g, beta, cu, pool = _inputs([4], 8, 2, seed=3)

    def broken(*a, **kw):
        raise RuntimeError("device out of memory")

    monkeypatch.setattr(torch.ops.npu, "chunk_gated_delta_rule", broken, raising=False)
    monkeypatch.setattr(mod.AscendGDNAttnBackend, "chunk_gdn", _hooked(mod))
    with pytest.raises(RuntimeError, match="out of memory"):
        _backend(mod, cu, track=False).chunk_gdn(q, k, v, g, beta, pool[:1], cu)


def test_sgl_kernel_npu_entry_hook_falls_back_on_mega_refusal(caplog):
    dispatch.forget_refusals()
    gen = torch.Generator().manual_seed(4)
    T, hv, hk = 40, 6, 2
    q = torch.randn(1, T, hk, D, generator=gen).half()
    k = torch.randn(1, T, hk, D, generator=gen).half()
    v = torch.randn(1, T, hv, D, generator=gen).half()
    g = F.logsigmoid(torch.randn(1, T, hv, generator=gen) + 2.0)
    beta = torch.rand(1, T, hv, generator=gen).half()
    cu = torch.tensor([0, 15, 40])
    h0_kv = torch.randn(2, hv, D, D, generator=gen) * 0.1  # the entry's key-first layout
    mega = emu.make_mega_emulator()

    def original(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=True, cu_seqlens=None,
                 head_first=False, use_qk_l2norm_in_kernel=False):
        mega(l2norm(q), l2norm(k), v, g, beta, scale, initial_state, output_final_state, cu_seqlens)
        raise AssertionError("unreachable: (6, 2) is outside the mega table")

    with caplog.at_level(logging.INFO):
        o, final, h = gdn_hooks.sgl_chunk_gated_delta_rule_npu(
            original, q, k, v, g, beta, initial_state=h0_kv, output_final_state=True, cu_seqlens=cu,
            use_qk_l2norm_in_kernel=True)
    ref_o, ref_final = _fla_reference(q[0], k[0], v[0], g, beta, cu, h0_kv.transpose(-1, -2))
    torch.testing.assert_close(o[0].float(), ref_o, atol=3e-3, rtol=3e-3)
    torch.testing.assert_close(final.transpose(-1, -2), ref_final, atol=3e-3, rtol=3e-3)
    assert h.shape == (1, 1 + 1, hv, D, D)
    assert "unsupported mega_chunk_gdn (NumValueHeads, NumKeyHeads) pair" in caplog.text
    dispatch.forget_refusals()
