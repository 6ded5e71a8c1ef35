"""The GDN integration hooks on the real upstream Ascend backend module (CPU, stubs + emulators)."""

from __future__ import annotations

import functools
import logging

import pytest
import torch
import torch.nn.functional as F
from fla.ops.gated_delta_rule.naive import naive_recurrent_gated_delta_rule

from sglang_ascend_hybrid.emulators import gdn_mega, gdn_npu_chunk, gdn_triton_chunk
from sglang_ascend_hybrid.integration import gdn_hooks
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.gdn import contract as caps
from sglang_ascend_hybrid.ops.gdn import prefill
from sglang_ascend_hybrid.ops.gdn.contract import OP_MEGA, OP_NPU_CHUNK
from sglang_ascend_hybrid.ops.gdn.prefill import chunk_stride_probe
from sglang_ascend_hybrid.ops.gdn.torch_impl import chunk_gdn_torch, l2norm
from tests.support import gdn_inputs
from tests.support.call_counter import Counting as _Counting
from tests.support.sync_counter import SyncCounter

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
    prefill.forget_refusals()
    yield mod
    prefill.forget_refusals()


def _backend(mod, cu, track):
    from types import SimpleNamespace

    backend = object.__new__(mod.AscendGDNAttnBackend)  # the real class, without a model runner
    backend.actual_seq_lengths = torch.diff(cu).to(torch.int32)
    backend.forward_metadata = SimpleNamespace(has_mamba_track_mask=track)
    return backend


def _inputs(lens, hv, hk, seed=0, dtype=torch.bfloat16, pool_dtype=torch.float32):
    """Inputs as the Ascend GDN backend hands them to chunk_gdn (bf16 model, pool of ``pool_dtype``)."""
    return gdn_inputs.packed(lens, seed=seed, hv=hv, hk=hk, k_dim=D, dtype=dtype, qk="raw", flat_qkv=True,
                             state_rows=len(lens) + 2, state_dtype=pool_dtype, cu_dtype=torch.int32).prefill()


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


# bf16 inputs and 16-bit or fp32 states: bf16 rounding of the inputs dominates the error.
TOL = dict(atol=2e-2, rtol=2e-2)


def test_qwen36_tp8_fp32_pool_upstream_fails_hook_keeps_fp32(ascend_gdn, monkeypatch, caplog):
    """Qwen3.6-27B at TP=8 with its config's fp32 SSM pool on an A3: upstream hands the chunk op an
    fp32 state (and 3-D beta / g), which its host refuses; the hook predicts that, keeps fp32 (no
    16-bit kernel may hold the state) and gives the reference result."""
    mod = ascend_gdn
    q, k, v, g, beta, cu, pool = _inputs([5, 70], 6, 2)
    npu_chunk = _Counting(gdn_npu_chunk.make_npu_chunk_emulator(chip="A3"))
    mega = _Counting(gdn_mega.make_mega_emulator())
    monkeypatch.setattr(torch.ops.npu, "chunk_gated_delta_rule", npu_chunk, raising=False)
    idx = torch.tensor([3, 1])
    pool_before = pool.clone()
    backend = _backend(mod, cu, track=False)
    with seam.install_device_facts(chip="A3"):
        with pytest.raises(RuntimeError) as err:  # upstream as shipped
            backend.chunk_gdn(q, k, v, g, beta, pool[idx], cu)
        assert caps.is_npu_chunk_refusal(err.value)
        npu_chunk.calls = 0
        monkeypatch.setattr(mod.AscendGDNAttnBackend, "chunk_gdn", _hooked(mod))
        with seam.install_emulators({OP_NPU_CHUNK: npu_chunk, OP_MEGA: mega}), \
                caplog.at_level(logging.INFO):
            o, final, h = backend.chunk_gdn(q, k, v, g, beta, pool[idx], cu)
    assert (npu_chunk.calls, mega.calls) == (0, 0)  # both predicted: they would lower the precision
    assert torch.equal(pool, pool_before)
    ref_o, ref_final = _fla_reference(q, k, v, g, beta, cu, pool[idx])
    assert o.shape == (75, 6, D) and o.dtype == torch.bfloat16 and final.dtype == torch.float32
    torch.testing.assert_close(o.float(), ref_o, **TOL)
    torch.testing.assert_close(final, ref_final, **TOL)
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "cannot use the npu_chunk kernel" in text and "Ascend 950" in text
    assert "runs on the torch kernel" in text


def test_bf16_pool_runs_6_2_on_the_npu_chunk_op(ascend_gdn, monkeypatch):
    mod = ascend_gdn
    q, k, v, g, beta, cu, pool = _inputs([5, 70], 6, 2, seed=4, pool_dtype=torch.bfloat16)
    npu_chunk = _Counting(gdn_npu_chunk.make_npu_chunk_emulator(chip="A2"))
    monkeypatch.setattr(mod.AscendGDNAttnBackend, "chunk_gdn", _hooked(mod))
    idx = torch.tensor([0, 2])
    with seam.install_device_facts(chip="A2"), seam.install_emulators({OP_NPU_CHUNK: npu_chunk}):
        o, final, h = _backend(mod, cu, track=True).chunk_gdn(q, k, v, g, beta, pool[idx], cu)
    assert npu_chunk.calls == 1
    ref_o, ref_final = _fla_reference(q, k, v, g, beta, cu, pool[idx].float())
    torch.testing.assert_close(o.float(), ref_o, **TOL)
    assert final.dtype == torch.bfloat16   # the op's state dtype, SGLang stores it in the pool as it is
    torch.testing.assert_close(final.float(), ref_final, **TOL)
    _, _, ref_h = chunk_gdn_torch(l2norm(q)[None], l2norm(k)[None], v[None], g, beta, cu_seqlens=cu,
                                  initial_state=pool[idx], chunk_states=True)
    assert h.shape == ref_h.shape == (1 + 2, 6, D, D)
    torch.testing.assert_close(h.float(), ref_h, **TOL)


def test_npu_chunk_refusal_goes_to_the_mega_pad_plan_once(ascend_gdn, monkeypatch, caplog):
    mod = ascend_gdn
    q, k, v, g, beta, cu, pool = _inputs([5, 70], 6, 2, seed=5, pool_dtype=torch.bfloat16)
    refusing = _Counting(gdn_npu_chunk.make_npu_chunk_emulator(refuse=lambda hv, hk: (hv, hk) == (6, 2)))
    mega = _Counting(gdn_mega.make_mega_emulator())
    monkeypatch.setattr(mod.AscendGDNAttnBackend, "chunk_gdn", _hooked(mod))
    idx = torch.tensor([3, 1])
    pool_before = pool.clone()
    backend = _backend(mod, cu, track=False)
    with seam.install_device_facts(chip="A3"), \
            seam.install_emulators({OP_NPU_CHUNK: refusing, OP_MEGA: mega}), caplog.at_level(logging.INFO):
        o, final, _ = backend.chunk_gdn(q, k, v, g, beta, pool[idx], cu)
        backend.chunk_gdn(q, k, v, g, beta, pool[idx], cu)
    assert (refusing.calls, mega.calls) == (1, 2)  # refused once, then remembered; (8, 2) pad plan
    assert torch.equal(pool, pool_before)
    ref_o, ref_final = _fla_reference(q, k, v, g, beta, cu, pool[idx].float())
    torch.testing.assert_close(o.float(), ref_o, **TOL)
    torch.testing.assert_close(final, ref_final, **TOL)
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert text.count("refused") == 1 and "nk and nv must be <= 64" in text
    assert "(NumValueHeads, NumKeyHeads)=(6, 2)" in text and "mega kernel via pad plan" in text


def test_unexpected_device_error_is_a_refusal_logged_as_warning(ascend_gdn, monkeypatch, caplog):
    mod = ascend_gdn
    q, k, v, g, beta, cu, pool = _inputs([4], 8, 2, seed=3, pool_dtype=torch.bfloat16)

    def odd(*a, **kw):
        raise RuntimeError("EZ9999: inner error, kernel launch failed")

    monkeypatch.setattr(mod.AscendGDNAttnBackend, "chunk_gdn", _hooked(mod))
    with seam.install_device_facts(chip="A3"), seam.install_emulators({OP_NPU_CHUNK: odd}), \
            caplog.at_level(logging.INFO):
        o, final, _ = _backend(mod, cu, track=False).chunk_gdn(q, k, v, g, beta, pool[:1], cu)
    ref_o, ref_final = _fla_reference(q, k, v, g, beta, cu, pool[:1].float())
    torch.testing.assert_close(o.float(), ref_o, **TOL)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "EZ9999: inner error" in warnings[0].getMessage()
    assert "npu_chunk" in warnings[0].getMessage()


def test_real_errors_are_not_swallowed(ascend_gdn, monkeypatch):
    mod = ascend_gdn
    q, k, v, g, beta, cu, pool = _inputs([4], 8, 2, seed=3, pool_dtype=torch.bfloat16)

    def broken(*a, **kw):
        raise RuntimeError("NPU out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(mod.AscendGDNAttnBackend, "chunk_gdn", _hooked(mod))
    with seam.install_device_facts(chip="A3"), seam.install_emulators({OP_NPU_CHUNK: broken}):
        with pytest.raises(RuntimeError, match="out of memory"):
            _backend(mod, cu, track=False).chunk_gdn(q, k, v, g, beta, pool[:1], cu)


@pytest.mark.parametrize("variant", caps.MEGA_VARIANTS, ids=lambda v: v.name)
def test_sgl_kernel_npu_entry_hook_falls_back_on_mega_refusal(caplog, variant):
    """Every released mega variant refuses (6, 2), post3 without the GDN_ATTN_BACKEND_TRITON hint:
    the entry hook recognises each text and serves the call."""
    prefill.forget_refusals()
    gen = torch.Generator().manual_seed(4)
    T, hv, hk = 40, 6, 2
    q = torch.randn(1, T, hk, D, generator=gen).half()
    k = torch.randn(1, T, hk, D, generator=gen).half()
    v = torch.randn(1, T, hv, D, generator=gen).half()
    g = F.logsigmoid(torch.randn(1, T, hv, generator=gen) + 2.0)
    beta = torch.rand(1, T, hv, generator=gen).half()
    cu = torch.tensor([0, 15, 40])
    h0_kv = torch.randn(2, hv, D, D, generator=gen) * 0.1  # the entry's key-first layout
    mega = gdn_mega.make_mega_emulator(variant=variant)

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
    assert ("GDN_ATTN_BACKEND_TRITON" in caplog.text) == variant.hint
    prefill.forget_refusals()


@pytest.mark.parametrize("pool_dtype", [torch.float32, torch.bfloat16])
def test_chunk_states_come_back_in_the_pools_dtype(ascend_gdn, monkeypatch, pool_dtype):
    """With radix-cache tracking on, SGLang copies h[...] into track slots: h is in the pool's
    dtype, and the state at the start of each sequence's first chunk is its initial state exactly
    (an fp32 pool's snapshot rounded through bf16 would not be)."""
    mod = ascend_gdn
    q, k, v, g, beta, cu, pool = _inputs([5, 70], 6, 2, pool_dtype=pool_dtype)
    monkeypatch.setattr(mod.AscendGDNAttnBackend, "chunk_gdn", _hooked(mod))
    idx = torch.tensor([3, 1])
    backend = _backend(mod, cu, track=True)
    with seam.install_device_facts(chip="A3"):
        o, final, h = backend.chunk_gdn(q, k, v, g, beta, pool[idx], cu)
    assert h.dtype == pool_dtype and h.shape == (1 + 2, 6, D, D)  # chunks: 1 of 5 tokens, 2 of 70
    assert torch.equal(h[0], pool[3]) and torch.equal(h[1], pool[1])
    _, _, h_off = _backend(mod, cu, track=False).chunk_gdn(q, k, v, g, beta, pool[idx], cu)
    assert h_off.dtype == pool_dtype and h_off.shape == h.shape  # upstream's shape; nobody reads it (below)


def test_sglang_reads_no_chunk_states_without_radix_cache_tracking():
    """Why the hook may hand back an unwritten h when ``has_mamba_track_mask`` is False: SGLang's own
    ``_track_mamba_state_extend`` (the only reader of h) touches nothing then, on every release."""
    from sglang.srt.layers.attention.hybrid_linear_attn_backend import MambaAttnBackendBase

    metadata = type("Metadata", (), {"has_mamba_track_mask": False})()
    assert MambaAttnBackendBase._track_mamba_state_extend(None, None, None, None, metadata) is None
    metadata.has_mamba_track_mask = True   # negative control: with tracking on it reads the metadata's indices
    with pytest.raises(AttributeError):
        MambaAttnBackendBase._track_mamba_state_extend(None, None, None, None, metadata)


def test_tracked_chunks_are_the_h_entries_sglang_copies():
    """``track_ssm_h_src`` indexes the chunk states laid end to end per sequence; the pairs name
    (sequence, chunk) and are read once per step (cached on the step's metadata)."""
    from types import SimpleNamespace

    cu = torch.tensor([0, 100, 400, 464])  # 2, 5 and 1 chunks: offsets 0, 2, 7
    src = torch.tensor([1, 6, 7])
    md = SimpleNamespace(track_ssm_h_src=src)
    pairs = gdn_hooks.tracked_chunks(md, cu)
    assert pairs == ((0, 1), (1, 4), (2, 0))
    src.tolist = None  # a second read on the host would fail: the cached pairs serve
    assert gdn_hooks.tracked_chunks(md, cu) is pairs
    md2 = SimpleNamespace(track_ssm_h_src=torch.tensor([8]))  # outside h: not the layout it reads
    assert gdn_hooks.tracked_chunks(md2, cu) is None
    assert gdn_hooks.tracked_chunks(SimpleNamespace(), cu) is None


def test_fp32_pool_tracking_on_the_triton_path_keeps_the_tracked_states_exact(ascend_gdn, monkeypatch):
    """GDN_ATTN_BACKEND_TRITON=1, fp32 pool, radix-cache tracking: the Triton entry serves (its chunk
    states are bf16), and the entries SGLang copies are the fp32 states, equal to the fp32 final
    state of a fresh prefill of the tracked prefix."""

    mod = ascend_gdn
    monkeypatch.setenv("GDN_ATTN_BACKEND_TRITON", "1")
    q, k, v, g, beta, cu, pool = _inputs([150, 200], 6, 2)  # 3 and 4 chunks
    monkeypatch.setattr(mod.AscendGDNAttnBackend, "chunk_gdn", _hooked(mod))
    idx = torch.tensor([3, 1])
    backend = _backend(mod, cu, track=True)
    backend.forward_metadata.track_ssm_h_src = torch.tensor([2, 3 + 2])  # chunk 2 of both
    triton = _Counting(gdn_triton_chunk.make_triton_chunk_emulator(mega=None, version="2026.6.1"))
    with seam.install_device_facts(chip="A3"), seam.install_emulators({caps.OP_TRITON: triton}):
        # the chunk-stride probe, as backend construction runs it before serving
        verdict = chunk_stride_probe.stride_verdict(6, 2, D, D, torch.bfloat16, "cpu", before_serving=True)
        assert verdict.verdict == chunk_stride_probe.STRIDE_64
        _, _, h = backend.chunk_gdn(q, k, v, g, beta, pool[idx], cu)
        prefix = _backend(mod, torch.tensor([0, 128, 256], dtype=torch.int32), track=False)
        sel = torch.cat([torch.arange(0, 128), torch.arange(150, 278)])
        _, fresh, _ = prefix.chunk_gdn(q[sel], k[sel], v[sel], g[:, sel], beta[:, sel], pool[idx],
                                       torch.tensor([0, 128, 256], dtype=torch.int32))
    assert triton.calls == 3  # the step, its tracked prefixes, the fresh prefill
    assert h.dtype == torch.float32
    assert torch.equal(h[2], fresh[0]) and torch.equal(h[5], fresh[1])
    assert not torch.equal(h[2], h[2].bfloat16().float())  # not a rounded state


@pytest.mark.parametrize("track", [False, True])
def test_one_host_read_of_the_offsets_per_step(ascend_gdn, monkeypatch, track):
    """Every GDN layer of a prefill step gets the same ``cu_seqlens``: the hook reads it on the host once
    for the step (checks, the op's lengths, h's chunk count, the tracked chunks), not per layer, and
    reads it again for a new step's offsets (a new tensor, or the same one written in place)."""
    mod = ascend_gdn
    q, k, v, g, beta, cu, pool = _inputs([5, 70], 6, 2, seed=6, pool_dtype=torch.bfloat16)
    monkeypatch.setattr(mod.AscendGDNAttnBackend, "chunk_gdn", _hooked(mod))
    backend = _backend(mod, cu, track=track)
    if track:
        backend.forward_metadata.track_ssm_h_src = torch.tensor([1])
    idx = torch.tensor([0, 2])
    with seam.install_device_facts(chip="A3"), \
            seam.install_emulators({OP_NPU_CHUNK: gdn_npu_chunk.make_npu_chunk_emulator(chip="A3")}):
        with SyncCounter(device_of_interest="cpu") as reads:
            outs = [backend.chunk_gdn(q, k, v, g, beta, pool[idx], cu) for _layer in range(3)]
        assert reads.total == 1, reads.counts
        assert all(torch.equal(o[0], outs[0][0]) for o in outs)
        cu.copy_(torch.tensor([0, 70, 75], dtype=cu.dtype))        # the next step, written in place
        backend.actual_seq_lengths = torch.diff(cu).to(torch.int32)
        with SyncCounter(device_of_interest="cpu") as reads:
            o, _, h = backend.chunk_gdn(q, k, v, g, beta, pool[idx], cu)
        assert reads.total == 1, reads.counts
    assert h.shape[0] == 2 + 1                                    # chunks of 70 and 5 tokens
    ref_o, _ = _fla_reference(q, k, v, g, beta, cu, pool[idx].float())
    torch.testing.assert_close(o.float(), ref_o, **TOL)
