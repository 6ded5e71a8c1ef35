"""The emulator of sgl-kernel-npu's Triton prefill entry ``fla.chunk.chunk_gated_delta_rule_npu``
(written from sgl-project/sgl-kernel-npu f425bdf1 ``python/sgl_kernel_npu/sgl_kernel_npu/fla/chunk.py``):
its own checks, the 64-token ``h`` of the Triton path, and the mega kernel it runs instead --
``GDN_USE_MEGA_GDN=1`` from ac3a564f (#542), by default in 3558cea0 (tag 2026.6.0) unless
``GDN_ATTN_BACKEND_TRITON=1``, for ``mega_gdn_supported`` shapes in ff984786 (tag 2026.05.01.post3)
-- read at every call, as the entry's ``os.getenv``."""

from __future__ import annotations

import pytest
import torch

from sglang_ascend_hybrid.emulators import gdn_mega, gdn_sets, gdn_triton_chunk
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.errors import EmulatorContractViolation
from sglang_ascend_hybrid.ops.gdn import contract as caps
from sglang_ascend_hybrid.ops.gdn.torch_impl import chunk_gdn_torch
from tests.ops.gdn.gdn_oracles import fla as _fla
from tests.ops.gdn.gdn_oracles import make_triton_chunk_emulator
from tests.ops.gdn.test_gdn_reference_branches import _inputs
from tests.support import gdn_inputs
from tests.support.call_counter import Counting

D = 128


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.delenv("GDN_USE_MEGA_GDN", raising=False)
    monkeypatch.delenv("GDN_ATTN_BACKEND_TRITON", raising=False)


def _args(hv=16, hk=8, lens=(150, 20), dtype=torch.bfloat16, seed=0):
    # the state read key first, fp32
    return gdn_inputs.packed(lens, seed=seed, hv=hv, hk=hk, k_dim=D, dtype=dtype, gate_shift=3.0).prefill()


def _entry(mega_variant=caps.MEGA_CURRENT, version="2026.6.1"):
    mega = Counting(gdn_mega.make_mega_emulator(variant=mega_variant))
    return gdn_triton_chunk.make_triton_chunk_emulator(mega=mega, version=version), mega


def _run(entry, q, k, v, g, beta, cu, h0):
    return entry(q, k, v, g, beta, scale=D ** -0.5, initial_state=h0, output_final_state=True, cu_seqlens=cu)


def test_triton_path_h_per_64_tokens_fp32_state_close_to_the_reference():
    q, k, v, g, beta, cu, h0 = _args()
    entry, mega = _entry()
    o, final, h = _run(entry, q, k, v, g, beta, cu, h0)
    assert mega.calls == 0
    assert h.shape == (1, 3 + 1, 16, D, D) and h.dtype == torch.bfloat16  # ceil(150/64) + ceil(20/64)
    assert torch.equal(h[0, 0], h0[0].bfloat16()) and torch.equal(h[0, 3], h0[1].bfloat16())
    assert final.dtype == torch.float32 and final.shape == (2, 16, D, D)
    ref_o, ref_final, ref_h = chunk_gdn_torch(q.float(), k.float(), v.float(), g, beta.float(), cu_seqlens=cu,
                                              initial_state=h0.transpose(-1, -2), scale=D ** -0.5,
                                              chunk_states=True)
    torch.testing.assert_close(o.float(), ref_o, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(final.transpose(-1, -2), ref_final, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(h[0].float().transpose(-1, -2), ref_h, atol=2e-2, rtol=2e-2)
    assert not torch.equal(final, final.bfloat16().float())  # the running state is not rounded


def test_use_mega_gdn_routes_to_the_mega_kernel_at_call_time(monkeypatch):
    q, k, v, g, beta, cu, h0 = _args()
    entry, mega = _entry()
    _run(entry, q, k, v, g, beta, cu, h0)
    assert mega.calls == 0
    monkeypatch.setenv("GDN_USE_MEGA_GDN", "1")  # after the entry was made: read at call time
    o, final, h = _run(entry, q, k, v, g, beta, cu, h0)
    assert mega.calls == 1
    assert h.shape == (1, 2 + 1, 16, D, D)  # per 128 tokens: ceil(150/128) + ceil(20/128)
    assert torch.equal(final, final.half().float())  # the kernel's fp16 state buffer
    ref = gdn_mega.make_mega_emulator()(q, k, v, g, beta, D ** -0.5, h0, True, cu)
    assert torch.equal(o, ref[1]) and torch.equal(final, ref[3])
    monkeypatch.setenv("GDN_USE_MEGA_GDN", "0")
    assert _run(entry, q, k, v, g, beta, cu, h0)[2].shape[1] == 4 and mega.calls == 1


def test_in_mega_mode_the_entry_refuses_with_the_mega_texts(monkeypatch):
    monkeypatch.setenv("GDN_USE_MEGA_GDN", "1")
    entry, _ = _entry()
    q, k, v, g, beta, cu, h0 = _args(hv=6, hk=2, lens=(10,))
    with pytest.raises(RuntimeError) as err:
        _run(entry, q, k, v, g, beta, cu, h0)
    assert str(err.value).startswith(caps.MEGA_PAIR_TEXT) and caps.MEGA_HINT in str(err.value)
    assert caps.is_triton_refusal(err.value) and caps.is_mega_refusal(err.value)
    monkeypatch.delenv("GDN_USE_MEGA_GDN")
    _run(entry, q, k, v, g, beta, cu, h0)  # the Triton path takes the pair


def test_on_an_ascend_950_build_mega_mode_raises_attribute_error(monkeypatch):
    entry = gdn_triton_chunk.make_triton_chunk_emulator(mega=gdn_sets.missing_torch_op("mega_chunk_gdn"))
    q, k, v, g, beta, cu, h0 = _args(lens=(10,))
    _run(entry, q, k, v, g, beta, cu, h0)
    monkeypatch.setenv("GDN_USE_MEGA_GDN", "1")
    with pytest.raises(AttributeError, match="mega_chunk_gdn"):
        _run(entry, q, k, v, g, beta, cu, h0)


@pytest.mark.parametrize("version,env,pair,expect", [
    ("2026.6.1", {}, (16, 8), False), ("2026.6.1", {"GDN_USE_MEGA_GDN": "1"}, (16, 8), True),
    ("2026.6.0", {}, (16, 8), True), ("2026.6.0", {"GDN_ATTN_BACKEND_TRITON": "1"}, (16, 8), False),
    ("2026.6.0", {"GDN_USE_MEGA_GDN": "1", "GDN_ATTN_BACKEND_TRITON": "1"}, (16, 8), False),
    ("2026.05.01", {}, (16, 8), True), ("2026.05.01", {}, (6, 2), True),  # mega_gdn_supported's wider table
    ("2026.05.01", {}, (12, 12), False), ("2026.05.01", {"GDN_ATTN_BACKEND_TRITON": "1"}, (16, 8), False),
    (None, {"GDN_USE_MEGA_GDN": "1"}, (16, 8), True),
    ("0.0.0+cpu", {}, (16, 8), True), ("2026.9.0.post4", {"GDN_ATTN_BACKEND_TRITON": "1"}, (16, 8), True),  # unknown
])
def test_when_each_release_runs_the_mega_kernel(version, env, pair, expect):
    mode = caps.triton_mega_mode(version or "2026.6.1")
    assert caps.triton_runs_mega(mode, env, *pair, D, D) is expect
    assert caps.triton_mega_mode("2026.05.01", mega_present=False) == "never"  # post1 / post2
    assert not caps.triton_runs_mega("supported", {}, 16, 8, 64, 64)  # head dim 128 only


def test_the_post3_entry_routes_pairs_its_kernel_then_refuses(monkeypatch):
    """ff984786: mega_gdn_supported admits (6, 2) (global 16 key heads at TP 8) while the compiled
    pair list does not: the kernel refuses with the post3 text (no hint)."""
    entry, mega = _entry(caps.MEGA_POST3, version="2026.05.01")
    q, k, v, g, beta, cu, h0 = _args(hv=6, hk=2, lens=(10,))
    with pytest.raises(RuntimeError) as err:
        _run(entry, q, k, v, g, beta, cu, h0)
    assert str(err.value) == caps.MEGA_PAIR_TEXT and mega.calls == 1
    q, k, v, g, beta, cu, h0 = _args(hv=12, hk=12, lens=(10,))
    _run(entry, q, k, v, g, beta, cu, h0)  # not admitted: Triton path
    assert mega.calls == 1


def test_the_entrys_own_checks_and_undefined_calls():
    entry, _ = _entry()
    q, k, v, g, beta, cu, h0 = _args(lens=(10,))
    with pytest.raises(AssertionError, match="does not support float32"):
        _run(entry, q.float(), k.float(), v.float(), g, beta, cu, h0)
    with pytest.raises(AssertionError, match="beta must be of shape"):
        _run(entry, q, k, v, g, beta[0], cu, h0)
    with pytest.raises(ValueError, match="batch size is expected to be 1"):
        _run(entry, q.expand(2, -1, -1, -1), k.expand(2, -1, -1, -1), v.expand(2, -1, -1, -1),
             g.expand(2, -1, -1), beta.expand(2, -1, -1), cu, h0)
    with pytest.raises(ValueError, match="number of initial states"):
        _run(entry, q, k, v, g, beta, cu, torch.cat([h0, h0]))
    with pytest.raises(EmulatorContractViolation, match="not \\[N, H, K, V\\]"):
        _run(entry, q, k, v, g, beta, cu, h0[:, :8])
    big = torch.zeros(1, 10, 8, 256).bfloat16()
    with pytest.raises(EmulatorContractViolation, match="cut"):
        entry(big, big, torch.zeros(1, 10, 16, 256).bfloat16(), g, beta, cu_seqlens=cu)
    for err in (AssertionError("ChunkGatedDeltaRuleFunction does not support float32."),
                ValueError("The batch size is expected to be 1 rather than 2")):
        assert caps.is_triton_refusal(err)


def _post3_table():
    """sgl-kernel-npu ff984786 fla/mega_chunk_gdn.py: 16 global key heads over TP in {1, 2, 4, 8},
    global value heads in {16, 32, 48, 64}: every per-rank (Hv, Hk) it admits."""
    return {(hv // tp, 16 // tp) for tp in (1, 2, 4, 8) for hv in (16, 32, 48, 64)}


def test_post3_python_pair_table_exactly():
    table = _post3_table()
    for hk in range(0, 20):
        for hv in range(0, 70):
            assert caps.post3_python_pair_supported(hv, hk) == ((hv, hk) in table), (hv, hk)
    assert (6, 2) in table and (6, 2) not in caps.MEGA_POST3.pairs  # admitted, then refused by the kernel


def test_mode_names_and_boundaries():
    # tags 2026.6.1 .. 2026.08.21 all report 2026.6.1; a wheel saying 2026.8.21 is not one the contracts know
    assert caps.triton_mega_mode("2026.6.1") == "opt_in" and caps.triton_mega_mode("2026.8.21") == "unknown"
    assert caps.triton_mega_mode("2026.6.0") == "default" and caps.triton_mega_mode("2026.6") == "default"
    assert caps.triton_mega_mode("2026.05.01") == "supported"
    assert caps.triton_mega_mode("2026.05.01", mega_present=False) == "never"
    assert caps.triton_mega_mode("") == "unknown" and caps.triton_mega_mode("0.0.0+cpu-stub") == "unknown"

    with seam.install_device_facts(sgl_kernel_npu_version=None):  # no sgl-kernel-npu metadata: current
        assert caps.triton_mega_mode() == "opt_in"
    with seam.install_device_facts(sgl_kernel_npu_version="2026.6.0"):
        assert caps.triton_mega_mode() == "default"
    # "default" runs the mega kernel for every pair, "supported" only for mega_gdn_supported's
    assert caps.triton_runs_mega("default", {}, 12, 12, 64, 64)
    assert not caps.triton_runs_mega("supported", {}, 12, 12, D, D)
    assert not caps.triton_runs_mega("never", {"GDN_USE_MEGA_GDN": "1"}, 16, 8, D, D)
    assert not caps.triton_runs_mega("opt_in", {"GDN_USE_MEGA_GDN": "true"}, 16, 8, D, D)  # only "1"


def test_triton_capability_and_refusal_tables():
    ok = dict(value_heads=16, key_heads=8, dtype=torch.bfloat16, head_dim_k=D, head_dim_v=D)
    assert caps.triton_supports(**ok) and caps.triton_supports(16, 8, torch.float16)
    for bad in (dict(dtype=torch.float32), dict(head_dim_k=256), dict(head_dim_v=256), dict(value_heads=12),
                dict(key_heads=0), dict(key_heads=-8)):
        assert not caps.triton_supports(**{**ok, **bad}), bad
    assert not caps.is_triton_refusal(RuntimeError("the entry does not support this"))  # not its exception type
    assert not caps.is_triton_refusal(ValueError("an unrelated error"))
    assert not caps.is_triton_refusal(AssertionError())  # the bare dtype assert: a bug, not a refusal
    assert caps.is_triton_refusal(RuntimeError(caps.MEGA_PAIR_TEXT))


def test_triton_emulator_agrees_with_fla():
    """The emulator itself (so the rung tests below compare against something right)."""
    q, k, v, g, beta, cu, h0 = _inputs([70, 5], 1, 2, 16, 8, dtype=torch.bfloat16, seed=11)
    o, final, h = make_triton_chunk_emulator()(q, k, v, g, beta, scale=0.3,
                                               initial_state=h0.transpose(-1, -2).contiguous(), cu_seqlens=cu)
    ref_o, ref_final, ref_h = _fla(q, k, v, g, beta, cu, h0, 0.3, chunk_starts=True)
    torch.testing.assert_close(o.float(), ref_o, atol=1e-2, rtol=1e-2)
    torch.testing.assert_close(final.transpose(-1, -2), ref_final, atol=1e-4, rtol=1e-4)
    assert h.shape == (1, 3, 2, 16, 8) and h.dtype == torch.bfloat16
    torch.testing.assert_close(h[0].float().transpose(-1, -2), ref_h, atol=1e-2, rtol=1e-2)
    with pytest.raises(EmulatorContractViolation):
        make_triton_chunk_emulator()(q, k, v, g, beta, initial_state=h0, cu_seqlens=cu)  # value-first
