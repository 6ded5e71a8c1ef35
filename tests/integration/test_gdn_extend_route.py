"""The GDN prefill hooks of the older Ascend route (``AscendGDNAttnBackend.forward_extend`` ->
``GDNKernelDispatcher.extend`` -> ``TritonGDNKernel.extend``): the step's tracking is published by
the forward_extend hook, and the extend hook serves the value-first pool in its own layout and
dtype.  The hooks are called here as SGLang's HookRegistry calls an AROUND hook; the whole-model
runs of ``tests/e2e`` drive them through the real upstream classes on the releases that take
this route."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from fla.ops.gated_delta_rule.naive import naive_recurrent_gated_delta_rule

from sglang_ascend_hybrid.integration import gdn_hooks
from sglang_ascend_hybrid.ops.gdn import contract
from sglang_ascend_hybrid.ops.gdn.torch_impl import l2norm
from tests.support import gdn_inputs

K, V = 32, 48  # unequal head dims: a state in the wrong layout cannot even be added to the right one


def _inputs(lens, hv=4, hk=2, seed=0, dtype=torch.bfloat16, pool_dtype=torch.float32, slots=6):
    """What TritonGDNKernel.extend receives on NPU: q / k / v [1, T, H, D] (not normalised), g / beta
    [1, T, Hv], the value-first pool [slots, Hv, V, K], the requests' slots and query_start_loc."""
    x = gdn_inputs.packed(lens, seed=seed, hv=hv, hk=hk, k_dim=K, v_dim=V, dtype=dtype, qk="raw", state_rows=slots,
                          state_dtype=pool_dtype, cu_dtype=torch.int32)
    return x.q, x.k, x.v, x.g, x.beta, x.state, x.cu_seqlens


def _reference(q, k, v, g, beta, cu, h0_vf):
    """FLA's naive recurrence per sequence in fp32 (keys repeated per value head); ``h0_vf`` and the
    returned final states value first [N, Hv, V, K]."""
    hv = v.shape[2]
    qn, kn = (l2norm(x[0].float()).repeat_interleave(hv // x.shape[2], 1) for x in (q, k))
    outs, finals = [], []
    b = cu.tolist()
    for s in range(len(b) - 1):
        sl = slice(b[s], b[s + 1])
        o, ht = naive_recurrent_gated_delta_rule(qn[None, sl], kn[None, sl], v[0, None, sl].float(),
                                                 beta[:, sl].float(), g[:, sl], scale=K ** -0.5,
                                                 initial_state=h0_vf[s:s + 1].float().transpose(-1, -2),
                                                 output_final_state=True)
        outs.append(o[0])
        finals.append(ht[0].transpose(-1, -2))
    return torch.cat(outs), torch.stack(finals)


def _never(*args, **kwargs):
    raise AssertionError("the original TritonGDNKernel.extend must not run inside forward_extend")


def _extend_inside_forward_extend(metadata, *args, **kwargs):
    """forward_extend's hook around a body that calls TritonGDNKernel.extend's hook."""
    def forward_extend(self):
        return gdn_hooks.triton_gdn_extend(_never, object(), *args, **kwargs)

    backend = SimpleNamespace(forward_metadata=metadata)
    return gdn_hooks.ascend_gdn_forward_extend(forward_extend, backend)



def test_outside_forward_extend_the_original_runs_with_the_same_arguments():
    q, k, v, g, beta, pool, cu = _inputs([5, 7])
    idx = torch.tensor([2, 0])
    seen = {}

    def original(self, *args, **kwargs):
        seen.update(self=self, args=args, kwargs=kwargs)
        return "original"

    me = object()
    assert gdn_hooks.triton_gdn_extend(original, me, q, k, v, g, beta, ssm_states=pool, cache_indices=idx,
                                       query_start_loc=cu) == "original"
    assert seen["self"] is me and all(a is b for a, b in zip(seen["args"], (q, k, v, g, beta)))
    assert seen["kwargs"]["ssm_states"] is pool and seen["kwargs"]["cache_indices"] is idx
    assert seen["kwargs"]["query_start_loc"] is cu and seen["kwargs"]["inplace_update"] is True


@pytest.mark.parametrize("pool_dtype", [torch.float32, torch.bfloat16])
def test_inside_forward_extend_the_ladder_serves_the_value_first_pool_in_its_dtype(pool_dtype):
    """o and the final states equal FLA's naive recurrence on the value-first pool rows; final is
    value first [N, Hv, V, K]; h is [1, NT, Hv, V, K] in the pool's dtype, each sequence's first
    chunk state its pool row exactly, and the tracked chunk state the final state of a fresh
    prefill of that prefix (an fp32 pool's snapshot not rounded through bf16)."""
    q, k, v, g, beta, pool, cu = _inputs([70, 150], pool_dtype=pool_dtype)  # 2 and 3 chunks
    idx = torch.tensor([4, 1])
    md = SimpleNamespace(has_mamba_track_mask=True, track_ssm_h_src=torch.tensor([0, 2 + 2]))
    o, final, h = _extend_inside_forward_extend(md, q, k, v, g, beta, ssm_states=pool, cache_indices=idx,
                                                query_start_loc=cu)
    ref_o, ref_final = _reference(q, k, v, g, beta, cu, pool[idx])
    assert o.shape == (1, 220, 4, V) and final.shape == (2, 4, V, K)
    torch.testing.assert_close(o[0].float(), ref_o, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(final.float(), ref_final, atol=5e-3, rtol=5e-3)
    assert h.dtype == pool_dtype and h.shape == (1, 2 + 3, 4, V, K)
    assert torch.equal(h[0, 0], pool[4]) and torch.equal(h[0, 2], pool[1])
    sel = torch.arange(70, 70 + 128)  # sequence 1's first two chunks
    fresh_md = SimpleNamespace(has_mamba_track_mask=False)
    _, fresh, _ = _extend_inside_forward_extend(
        fresh_md, q[:, sel], k[:, sel], v[:, sel], g[:, sel], beta[:, sel], ssm_states=pool,
        cache_indices=idx[1:], query_start_loc=torch.tensor([0, 128], dtype=torch.int32))
    torch.testing.assert_close(h[0, 4].float(), fresh[0].to(pool_dtype).float(), atol=1e-6, rtol=0)


def test_a_step_that_tracks_nothing_gets_no_chunk_states():
    q, k, v, g, beta, pool, cu = _inputs([20, 9])
    md = SimpleNamespace(has_mamba_track_mask=False)
    o, final, h = _extend_inside_forward_extend(md, q, k, v, g, beta, ssm_states=pool,
                                                cache_indices=torch.tensor([0, 3]), query_start_loc=cu)
    assert h is None and final.shape == (2, 4, V, K) and final.dtype == torch.float32


def test_the_pool_is_not_written():
    """forward_extend writes the final states into the pool itself; the hook returns new tensors."""
    q, k, v, g, beta, pool, cu = _inputs([20, 9])
    before = pool.clone()
    _extend_inside_forward_extend(SimpleNamespace(has_mamba_track_mask=True, track_ssm_h_src=torch.tensor([0])),
                                  q, k, v, g, beta, ssm_states=pool, cache_indices=torch.tensor([0, 3]),
                                  query_start_loc=cu)
    assert torch.equal(pool, before)


def test_forward_extend_publishes_its_step_for_its_duration_only():
    md = SimpleNamespace(has_mamba_track_mask=True)
    seen = []

    def forward_extend(self, layer, batch, *, flag):
        seen.append((gdn_hooks._EXTEND_STEP.get(), layer, batch, flag))
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        gdn_hooks.ascend_gdn_forward_extend(forward_extend, SimpleNamespace(forward_metadata=md), "L", "B", flag=3)
    assert seen == [(md, "L", "B", 3)]
    assert gdn_hooks._EXTEND_STEP.get() is None


def test_multi_item_scoring_inside_forward_extend_is_left_to_the_original():
    """``inplace_update=False`` (GDN multi-item scoring), which SGLang's NPU branch refuses itself,
    and keyword arguments the hook does not know go to the original unchanged."""
    q, k, v, g, beta, pool, cu = _inputs([5, 7])
    idx = torch.tensor([2, 0])
    calls = []

    def original(self, *args, **kwargs):
        calls.append(kwargs)
        return "original"

    def forward_extend(self, **extra):
        return gdn_hooks.triton_gdn_extend(original, object(), q, k, v, g, beta, ssm_states=pool, cache_indices=idx,
                                           query_start_loc=cu, **extra)

    md = SimpleNamespace(has_mamba_track_mask=False)
    backend = SimpleNamespace(forward_metadata=md)
    assert gdn_hooks.ascend_gdn_forward_extend(forward_extend, backend, inplace_update=False) == "original"
    assert gdn_hooks.ascend_gdn_forward_extend(forward_extend, backend, new_flag=1) == "original"
    assert calls[0]["inplace_update"] is False and calls[1]["new_flag"] == 1


def test_triton_path_on_an_fp32_pool_keeps_the_tracked_states_exact(monkeypatch):
    """GDN_ATTN_BACKEND_TRITON=1 with an fp32 pool: sgl-kernel-npu's Triton entry serves (its chunk
    states are bf16) and the entries SGLang copies are the fp32 final states of a fresh prefill of
    each tracked prefix, bit for bit."""
    from sglang_ascend_hybrid.emulators import gdn_triton_chunk
    from sglang_ascend_hybrid.ops import seam
    from sglang_ascend_hybrid.ops.gdn.prefill import chunk_stride_probe
    from tests.support.call_counter import Counting

    monkeypatch.setenv("GDN_ATTN_BACKEND_TRITON", "1")
    q, k, v, g, beta, pool, cu = _inputs([150, 200])  # 3 and 4 chunks
    idx = torch.tensor([3, 1])
    md = SimpleNamespace(has_mamba_track_mask=True, track_ssm_h_src=torch.tensor([2, 3 + 2]))
    triton = Counting(gdn_triton_chunk.make_triton_chunk_emulator(mega=None, version="2026.6.1"))
    with seam.install_device_facts(chip="A3"), seam.install_emulators({contract.OP_TRITON: triton}):
        verdict = chunk_stride_probe.stride_verdict(4, 2, K, V, torch.bfloat16, "cpu", before_serving=True)
        assert verdict.verdict == chunk_stride_probe.STRIDE_64
        _, _, h = _extend_inside_forward_extend(md, q, k, v, g, beta, ssm_states=pool, cache_indices=idx,
                                                query_start_loc=cu)
        sel = torch.cat([torch.arange(0, 128), torch.arange(150, 278)])
        _, fresh, _ = _extend_inside_forward_extend(
            SimpleNamespace(has_mamba_track_mask=False), q[:, sel], k[:, sel], v[:, sel], g[:, sel], beta[:, sel],
            ssm_states=pool, cache_indices=idx, query_start_loc=torch.tensor([0, 128, 256], dtype=torch.int32))
    assert triton.calls == 3  # the step, its tracked prefixes, the fresh prefill
    assert h.dtype == torch.float32
    assert torch.equal(h[0, 2], fresh[0]) and torch.equal(h[0, 5], fresh[1])
    assert not torch.equal(h[0, 2], h[0, 2].bfloat16().float())  # not a rounded state
