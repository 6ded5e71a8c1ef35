"""Hook behaviour the other hook tests do not pin down (mutation testing):

* sgl-kernel-npu's entry hook returns the entry's own layouts *by value*: key-first final
  states and per-chunk states ``h [1, NT, H, K, V]`` equal to FLA's states at every chunk start
  (with K == V a value-first h has the same shape: only values tell);
* ``GDN_ATTN_BACKEND_TRITON=1`` sends the Ascend chunk hook to the Triton entry even where the
  npu_chunk op would serve, and without it the op serves;
* the launch-defaults resolution hook's error path: lenient mode logs and lets SGLang's own
  step run, strict mode stops startup, a launch-config error always propagates.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from sglang_ascend_hybrid.emulators import gdn_npu_chunk, gdn_sets
from sglang_ascend_hybrid.integration import gdn_hooks
from sglang_ascend_hybrid.integration.launch import resolution
from sglang_ascend_hybrid.integration.launch.decision import LaunchConfigError
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.gdn import contract, prefill
from sglang_ascend_hybrid.ops.gdn.contract import OP_NPU_CHUNK
from sglang_ascend_hybrid.ops.gdn.prefill import entries
from tests.ops.gdn.gdn_oracles import fla, make_triton_chunk_emulator, normalize
from tests.support.call_counter import Counting as _Counting

MEGA_REFUSAL = "unsupported mega_chunk_gdn (NumValueHeads, NumKeyHeads) pair (6, 2)"


@pytest.fixture(autouse=True)
def _fresh_ladders():
    prefill.forget_refusals()
    yield
    prefill.forget_refusals()




def _fla_inputs(lens, hk, hv, K, V, seed, dtype=torch.float16):
    gen = torch.Generator().manual_seed(seed)
    T = sum(lens)
    q = torch.randn(1, T, hk, K, generator=gen).to(dtype)
    k = torch.randn(1, T, hk, K, generator=gen).to(dtype)
    v = torch.randn(1, T, hv, V, generator=gen).to(dtype)
    g = F.logsigmoid(torch.randn(1, T, hv, generator=gen) + 2.0)
    beta = torch.rand(1, T, hv, generator=gen).to(dtype)
    cu = torch.tensor([0] + lens).cumsum(0)
    h0_kf = torch.randn(len(lens), hv, K, V, generator=gen) * 0.3  # the entry's key-first layout
    return q, k, v, g, beta, cu, h0_kf


def _refusing_entry():
    calls = []

    def original(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=True, cu_seqlens=None,
                 head_first=False, use_qk_l2norm_in_kernel=False):
        calls.append(initial_state)
        raise RuntimeError(MEGA_REFUSAL)  # the mega kernel inside the entry (failure B)

    return original, calls


@pytest.mark.parametrize("K,V", [(16, 16), (16, 8)])
def test_entry_hook_fallback_returns_key_first_states_and_chunk_states_by_value(K, V):
    """The entry refuses (mega failure B); the hook's ladder result in the entry's layouts:
    o ``[1, T, H, V]``, final ``[N, H, K, V]`` fp32, h ``[1, NT, H, K, V]`` in k's dtype, each
    equal to FLA (h: the state at the start of every 64-token chunk)."""
    q, k, v, g, beta, cu, h0 = _fla_inputs([70, 9], 2, 6, K, V, seed=41)
    original, calls = _refusing_entry()
    o, final, h = gdn_hooks.sgl_chunk_gated_delta_rule_npu(
        original, q, k, v, g, beta, scale=0.2, initial_state=h0, output_final_state=True, cu_seqlens=cu,
        use_qk_l2norm_in_kernel=True)
    assert len(calls) == 1
    ref_o, ref_final, ref_h = fla(q, k, v, g, beta, cu, h0.transpose(-1, -2), 0.2, l2=True, chunk_starts=True)
    assert o.shape == (1, 79, 6, V) and o.dtype == torch.float16
    assert final.shape == (2, 6, K, V) and final.dtype == torch.float32
    assert h.shape == (1, 2 + 1, 6, K, V) and h.dtype == torch.float16
    torch.testing.assert_close(o.float(), ref_o, atol=3e-3, rtol=3e-3)
    torch.testing.assert_close(final, ref_final.transpose(-1, -2), atol=3e-3, rtol=3e-3)
    torch.testing.assert_close(h[0].float(), ref_h.transpose(-1, -2), atol=3e-3, rtol=3e-3)
    # the refusal is remembered: the next call goes straight to the ladder
    gdn_hooks.sgl_chunk_gated_delta_rule_npu(original, q, k, v, g, beta, scale=0.2, initial_state=h0,
                                             cu_seqlens=cu, use_qk_l2norm_in_kernel=True)
    assert len(calls) == 1


def test_entry_hook_packs_an_equal_length_batch_and_honours_output_final_state():
    """B=2 without cu_seqlens: two sequences; no final state when not asked for; no initial
    state: zeros.  Against FLA per sequence."""
    q, k, v, g, beta, _, _ = _fla_inputs([30, 30], 2, 6, 16, 16, seed=42)
    q, k = (q.float() * 0.5).half(), (k.float() * 0.2).half()  # |k| < 1: the raw delta rule stays stable
    qb, kb, vb, gb, bb = (x.reshape(2, 30, *x.shape[2:]) for x in (q, k, v, g, beta))
    original, _ = _refusing_entry()
    o, final, h = gdn_hooks.sgl_chunk_gated_delta_rule_npu(original, qb, kb, vb, gb, bb, output_final_state=False,
                                                           use_qk_l2norm_in_kernel=False)
    ref_o, _, ref_h = fla(normalize(q.float()), normalize(k.float()), v, g, beta, torch.tensor([0, 30, 60]),
                          None, 16 ** -0.5, chunk_starts=True)
    assert final is None
    assert o.shape == (2, 30, 6, 16)
    # q / k are taken as they are (no l2norm asked): not the normalised reference
    ref_raw, _, _ = fla(q, k, v, g, beta, torch.tensor([0, 30, 60]), None, 16 ** -0.5)
    torch.testing.assert_close(o.reshape(1, 60, 6, 16).float(), ref_raw, atol=3e-3, rtol=3e-3)
    assert not torch.allclose(ref_raw, ref_o, atol=1e-2)
    assert h.shape == (1, 2, 6, 16, 16) and torch.count_nonzero(h) == 0  # zero states at each chunk start


def test_entry_hook_passes_non_refusals_and_ladder_calls_through():
    """A real error of the entry propagates; inside the ladder the hook is a pass-through."""
    q, k, v, g, beta, cu, h0 = _fla_inputs([5], 1, 1, 8, 8, seed=43)

    def broken(*a, **kw):
        raise RuntimeError("device out of memory")

    with pytest.raises(RuntimeError, match="out of memory"):
        gdn_hooks.sgl_chunk_gated_delta_rule_npu(broken, q, k, v, g, beta, initial_state=h0, cu_seqlens=cu)
    sentinel = object()
    token = entries.IN_LADDER.set(True)
    try:
        got = gdn_hooks.sgl_chunk_gated_delta_rule_npu(lambda *a, **kw: sentinel, q, k, v, g, beta,
                                                       initial_state=h0, cu_seqlens=cu)
    finally:
        entries.IN_LADDER.reset(token)
    assert got is sentinel


# ------------------------------------------------------------------ GDN_ATTN_BACKEND_TRITON=1

def _ascend_inputs(seed=44):
    """What AscendGDNAttnBackend.chunk_gdn receives: q / k [T, Hk, K], v [T, Hv, V], g / beta
    [1, T, Hv], a gathered bf16 state [N, Hv, V, K] (a pool the npu_chunk op serves on A3)."""
    gen = torch.Generator().manual_seed(seed)
    lens, hk, hv, K = [40, 70], 2, 4, 16
    T = sum(lens)
    q = torch.randn(T, hk, K, generator=gen).bfloat16()
    k = torch.randn(T, hk, K, generator=gen).bfloat16()
    v = torch.randn(T, hv, K, generator=gen).bfloat16()
    g = F.logsigmoid(torch.randn(1, T, hv, generator=gen) + 2.0)
    beta = torch.rand(1, T, hv, generator=gen).bfloat16()
    cu = torch.tensor([0] + lens).cumsum(0).to(torch.int32)
    state = (torch.randn(2, hv, K, K, generator=gen) * 0.1).bfloat16()
    return q, k, v, g, beta, state, cu


@pytest.mark.parametrize("triton_env", ["1", "0", None])
def test_gdn_attn_backend_triton_sends_prefill_to_the_triton_entry(triton_env, monkeypatch):
    q, k, v, g, beta, state, cu = _ascend_inputs()
    if triton_env is None:
        monkeypatch.delenv("GDN_ATTN_BACKEND_TRITON", raising=False)
    else:
        monkeypatch.setenv("GDN_ATTN_BACKEND_TRITON", triton_env)
    triton = _Counting(make_triton_chunk_emulator())
    npu = _Counting(gdn_npu_chunk.make_npu_chunk_emulator(chip="A3"))
    backend = SimpleNamespace(forward_metadata=SimpleNamespace(has_mamba_track_mask=True))
    state_before = state.clone()
    with seam.install_device_facts(chip="A3"), \
            seam.install_emulators({contract.OP_TRITON: triton, OP_NPU_CHUNK: npu}):
        o, final, h = gdn_hooks.ascend_chunk_gdn(None, backend, q, k, v, g, beta, state, cu)
    assert (triton.calls, npu.calls) == ((1, 0) if triton_env == "1" else (0, 1))
    assert torch.equal(state, state_before)
    ref_o, ref_final, ref_h = fla(q[None], k[None], v[None], g, beta, cu.long(), state, 16 ** -0.5, l2=True,
                                  chunk_starts=True)
    # the Triton entry's final state is fp32, the npu_chunk op's is its (the pool's) bf16
    assert o.shape == (110, 4, 16) and h.dtype == torch.bfloat16
    assert final.dtype == (torch.float32 if triton_env == "1" else torch.bfloat16)
    torch.testing.assert_close(o.float(), ref_o[0], atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(final.float(), ref_final, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(h.float(), ref_h, atol=2e-2, rtol=2e-2)


def test_ascend_hook_without_tracking_returns_chunk_states_of_upstream_shape(monkeypatch):
    monkeypatch.delenv("GDN_ATTN_BACKEND_TRITON", raising=False)
    q, k, v, g, beta, state, cu = _ascend_inputs(seed=45)
    backend = SimpleNamespace(forward_metadata=SimpleNamespace(has_mamba_track_mask=False))
    o, final, h = gdn_hooks.ascend_chunk_gdn(None, backend, q, k, v, g, beta, state, cu)
    assert h.shape == (1 + 2, 4, 16, 16) and h.dtype == torch.bfloat16   # never read (test_gdn_hooks)
    ref_o, ref_final, _ = fla(q[None], k[None], v[None], g, beta, cu.long(), state, 16 ** -0.5, l2=True)
    torch.testing.assert_close(o.float(), ref_o[0], atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(final.float(), ref_final, atol=2e-2, rtol=2e-2)


# ------------------------------------------------------------------ launch-defaults hook error path

def _broken_apply(monkeypatch, exc):
    def apply(server_args):
        raise exc
    monkeypatch.setattr(resolution, "apply_launch_defaults", apply)


def test_launch_defaults_hook_lenient_logs_and_runs_upstream(monkeypatch, caplog):
    monkeypatch.delenv("SGLANG_ASCEND_HYBRID_STRICT", raising=False)
    _broken_apply(monkeypatch, KeyError("model_config"))
    seen = []
    args = object()
    with caplog.at_level(logging.WARNING):
        resolution.launch_defaults_hook(args, seen.append)
    assert seen == [args]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "launch defaults skipped (KeyError: 'model_config')" in warnings[0].getMessage()


def test_launch_defaults_hook_strict_stops_startup(monkeypatch):
    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_STRICT", "1")
    _broken_apply(monkeypatch, AttributeError("no attribute 'hf_config'"))
    seen = []
    with pytest.raises(RuntimeError, match=r"launch defaults could not be evaluated "
                                           r"\(AttributeError: no attribute 'hf_config'\)") as err:
        resolution.launch_defaults_hook(object(), seen.append)
    assert seen == []
    assert isinstance(err.value.__cause__, AttributeError)


@pytest.mark.parametrize("strict", ["1", "0"])
def test_launch_config_error_always_propagates(strict, monkeypatch):
    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_STRICT", strict)
    _broken_apply(monkeypatch, LaunchConfigError("--disable-radix-cache conflicts"))
    seen = []
    with pytest.raises(LaunchConfigError, match="conflicts"):
        resolution.launch_defaults_hook(object(), seen.append)
    assert seen == []


def test_launch_defaults_hook_runs_upstream_after_its_own_step(monkeypatch):
    order = []
    args = object()
    monkeypatch.setattr(resolution, "apply_launch_defaults", lambda a: order.append(("plugin", a)))
    resolution.launch_defaults_hook(args, lambda a: order.append(("upstream", a)))
    assert order == [("plugin", args), ("upstream", args)]


def test_entry_hook_hands_the_original_every_argument_as_given():
    """When the entry serves the call itself, it receives exactly the caller's arguments."""
    q, k, v, g, beta, cu, h0 = _fla_inputs([5, 3], 1, 2, 8, 8, seed=46)
    seen = []

    def original(*args, **kwargs):
        seen.append((args, kwargs))
        return "entry result"

    got = gdn_hooks.sgl_chunk_gated_delta_rule_npu(original, q, k, v, g, beta, scale=0.3, initial_state=h0,
                                                   output_final_state=False, cu_seqlens=cu,
                                                   use_qk_l2norm_in_kernel=True)
    assert got == "entry result"
    (args, kwargs), = seen
    assert all(a is b for a, b in zip(args, (q, k, v, g, beta))) and len(args) == 5
    assert kwargs == dict(scale=0.3, initial_state=h0, output_final_state=False, cu_seqlens=cu, head_first=False,
                          use_qk_l2norm_in_kernel=True)
    # an argument the hook does not know goes straight to the entry, even after a refusal was learnt
    original_refusing, _ = _refusing_entry()
    gdn_hooks.sgl_chunk_gated_delta_rule_npu(original_refusing, q, k, v, g, beta, initial_state=h0, cu_seqlens=cu)
    seen.clear()
    assert gdn_hooks.sgl_chunk_gated_delta_rule_npu(original, q, k, v, g, beta, initial_state=h0, cu_seqlens=cu,
                                                    chunk_size=64) == "entry result"
    assert seen[0][1]["chunk_size"] == 64 and seen[0][1]["output_final_state"] is True  # the entry's default
    assert all(a is b for a, b in zip(seen[0][0], (q, k, v, g, beta))) and len(seen[0][0]) == 5


def test_ascend_hook_without_forward_metadata_keeps_the_chunk_states(monkeypatch):
    """A backend object without ``forward_metadata`` (tracking unknown): h is produced, not zeros."""
    monkeypatch.delenv("GDN_ATTN_BACKEND_TRITON", raising=False)
    q, k, v, g, beta, state, cu = _ascend_inputs(seed=47)
    _, _, h = gdn_hooks.ascend_chunk_gdn(None, SimpleNamespace(), q, k, v, g, beta, state, cu)
    _, _, ref_h = fla(q[None], k[None], v[None], g, beta, cu.long(), state, 16 ** -0.5, l2=True, chunk_starts=True)
    torch.testing.assert_close(h.float(), ref_h, atol=2e-2, rtol=2e-2)
    assert torch.count_nonzero(h[0]) > 0


def test_ascend_hook_takes_the_gates_packed_or_batched(monkeypatch):
    """The prefill is served packed, as chunk_gdn hands q / k / v: g / beta ``[1, T, Hv]`` (SGLang's gating
    output) are viewed ``[T, Hv]``; ``[T, Hv]`` ones go as they are, with the same result."""
    monkeypatch.delenv("GDN_ATTN_BACKEND_TRITON", raising=False)
    q, k, v, g, beta, state, cu = _ascend_inputs(seed=48)
    backend = SimpleNamespace(forward_metadata=SimpleNamespace(has_mamba_track_mask=False))
    seen = []
    serve = gdn_hooks._serve_extend

    def spy(metadata, q, k, v, g, beta, *rest, **kw):
        seen.append((q, g, beta, kw))
        return serve(metadata, q, k, v, g, beta, *rest, **kw)

    monkeypatch.setattr(gdn_hooks, "_serve_extend", spy)
    batched = gdn_hooks.ascend_chunk_gdn(None, backend, q, k, v, g, beta, state, cu)
    T, Hv = g.shape[1], g.shape[2]
    assert seen[0][0] is q and seen[0][3] == {"packed": True}
    assert tuple(seen[0][1].shape) == (T, Hv) and tuple(seen[0][2].shape) == (T, Hv)
    g2, beta2 = g[0], beta[0]
    packed = gdn_hooks.ascend_chunk_gdn(None, backend, q, k, v, g2, beta2, state, cu)
    assert seen[1][1] is g2 and seen[1][2] is beta2
    for a, b in zip(batched[:2], packed[:2]):
        assert torch.equal(a, b)


@pytest.mark.parametrize("track", [False, True])
def test_a_prefill_without_initial_states_gives_states_in_ks_dtype(track):
    """No gathered state (every request starts from zeros): final and h come back in k's dtype whether the
    step's tracking asks for the chunk states (the ladder's) or not (upstream's shape, made by the hook)."""
    q, k, v, g, beta, _, cu = _ascend_inputs(seed=50)
    backend = SimpleNamespace(forward_metadata=SimpleNamespace(has_mamba_track_mask=track))
    with seam.install_device_facts(chip="A3"), seam.install_emulators(gdn_sets.emulators(chip="A3")):
        o, final, h = gdn_hooks.ascend_chunk_gdn(None, backend, q, k, v, g, beta, None, cu)
    hv, K = v.shape[1], k.shape[-1]
    assert tuple(o.shape) == tuple(v.shape) and tuple(final.shape) == (2, hv, K, K)
    assert h.dtype == k.dtype and tuple(h.shape) == (1 + 2, hv, K, K)   # ceil(40/64) + ceil(70/64) chunks
