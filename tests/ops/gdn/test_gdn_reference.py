"""The torch GDN paths against FLA's naive recurrent reference (an independent oracle)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from fla.ops.gated_delta_rule.naive import naive_recurrent_gated_delta_rule

from sglang_ascend_hybrid.ops.gdn import chunk_gated_delta_rule, chunk_with_states, recurrent_gated_delta_rule
from sglang_ascend_hybrid.ops.gdn.torch_impl import chunk_gdn_torch
from tests.support import gdn_inputs


def _inputs(lens, hk, ratio, K, V, dtype, seed, with_state):
    # raw q, k scaled by 1/sqrt(K): keeps the un-normalised delta rule stable
    return gdn_inputs.packed(lens, seed=seed, hv=hk * ratio, hk=hk, k_dim=K, v_dim=V, dtype=dtype, qk="key_scaled",
                             with_state=with_state, state_scale=0.5).prefill()


def _fla(q, k, v, g, beta, cu, h0, scale, l2):
    """Loop sequences, repeat keys per value head, FLA layouts (state key-first)."""
    hv = v.shape[2]
    q, k = q.float(), k.float()
    if l2:
        q = q / torch.sqrt(q.pow(2).sum(-1, keepdim=True) + 1e-6)
        k = k / torch.sqrt(k.pow(2).sum(-1, keepdim=True) + 1e-6)
    q = q.repeat_interleave(hv // q.shape[2], dim=2)
    k = k.repeat_interleave(hv // k.shape[2], dim=2)
    outs, finals = [], []
    bounds = cu.tolist()
    for s in range(len(bounds) - 1):
        a, b = bounds[s], bounds[s + 1]
        init = None if h0 is None else h0[s:s + 1].transpose(-1, -2)
        o, ht = naive_recurrent_gated_delta_rule(q[:, a:b], k[:, a:b], v[:, a:b].float(), beta[:, a:b].float(),
                                                 g[:, a:b].float(), scale=scale, initial_state=init,
                                                 output_final_state=True)
        outs.append(o)
        finals.append(ht.transpose(-1, -2))
    return torch.cat(outs, dim=1), torch.cat(finals)


CASES = [
    # lens, hk, ratio, with_state, l2
    ([1, 70, 64, 129, 5], 2, 1, True, True),
    ([37], 1, 2, False, False),
    ([1, 1, 200], 2, 3, True, False),
    ([65, 3, 128], 1, 4, False, True),
    ([130, 0, 7], 3, 2, True, True),
]


@pytest.mark.parametrize("lens,hk,ratio,with_state,l2", CASES)
def test_chunk_fp32_matches_fla(lens, hk, ratio, with_state, l2):
    q, k, v, g, beta, cu, h0 = _inputs(lens, hk, ratio, 32, 16, torch.float32, 1, with_state)
    o, final = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0, use_qk_l2norm=l2)
    ref_o, ref_final = _fla(q, k, v, g, beta, cu, h0, 32 ** -0.5, l2)
    assert o.dtype == torch.float32 and final.dtype == torch.float32
    assert o.shape == (1, sum(lens), hk * ratio, 16) and final.shape == (len(lens), hk * ratio, 16, 32)
    torch.testing.assert_close(o, ref_o, atol=2e-4, rtol=1e-4)
    torch.testing.assert_close(final, ref_final, atol=2e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype,tol", [(torch.float16, 2e-3), (torch.bfloat16, 1e-2)])  # measured: 4e-4, 3e-3
@pytest.mark.parametrize("ratio", [1, 2, 3, 4])
def test_chunk_half_precision_matches_fla(dtype, tol, ratio):
    lens = [3, 90, 64]
    q, k, v, g, beta, cu, h0 = _inputs(lens, 2, ratio, 32, 32, dtype, 7 + ratio, True)
    o, final = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0, use_qk_l2norm=True)
    ref_o, ref_final = _fla(q, k, v, g, beta, cu, h0, 32 ** -0.5, True)
    assert o.dtype == dtype
    torch.testing.assert_close(o.float(), ref_o, atol=tol, rtol=tol)
    torch.testing.assert_close(final, ref_final, atol=tol, rtol=tol)


def test_chunk_handles_large_head_dim_and_custom_scale():
    q, k, v, g, beta, cu, h0 = _inputs([100, 29], 2, 2, 128, 128, torch.float32, 3, True)
    o, final = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0, scale=0.05,
                                      use_qk_l2norm=True)
    ref_o, ref_final = _fla(q, k, v, g, beta, cu, h0, 0.05, True)
    torch.testing.assert_close(o, ref_o, atol=3e-4, rtol=1e-4)
    torch.testing.assert_close(final, ref_final, atol=3e-4, rtol=1e-4)


@pytest.mark.parametrize("lens,pairs_per_group", [
    ([130, 64, 1], None),
    # groups of 3 chunks: a chunk position's sequences straddle groups (pieces not starting at slot 0)
    ([130, 130, 130, 130, 64], 6),
])
def test_chunk_states_are_states_at_64_token_boundaries(monkeypatch, lens, pairs_per_group):
    if pairs_per_group is not None:
        import sglang_ascend_hybrid.ops.gdn.torch_impl as ref_mod

        monkeypatch.setattr(ref_mod, "_CPU_BLOCK_HEAD_CHUNKS", pairs_per_group)
    q, k, v, g, beta, cu, h0 = _inputs(lens, 1, 2, 16, 16, torch.float32, 4, True)
    _, _, h = chunk_with_states(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0, use_qk_l2norm=True,
                                chunk_states=True)
    expected = []
    bounds = cu.tolist()
    for s in range(len(lens)):
        for start in range(bounds[s], bounds[s + 1], 64):
            if start == bounds[s]:
                expected.append(h0[s])
                continue
            sub_cu = torch.tensor([0, start - bounds[s]])
            sl = slice(bounds[s], start)
            _, fin = _fla(q[:, sl], k[:, sl], v[:, sl], g[:, sl], beta[:, sl], sub_cu, h0[s:s + 1],
                          16 ** -0.5, True)
            expected.append(fin[0])
    assert h.shape == (len(expected), 2, 16, 16)
    torch.testing.assert_close(h, torch.stack(expected), atol=2e-4, rtol=1e-4)


def test_chunk_never_writes_initial_state_and_can_skip_final_state():
    q, k, v, g, beta, cu, h0 = _inputs([10, 20], 1, 1, 8, 8, torch.float32, 5, True)
    before = h0.clone()
    o, final = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0, output_final_state=False)
    assert final is None
    assert torch.equal(h0, before)


def test_decode_step_matches_fla_and_updates_only_its_slots():
    gen = torch.Generator().manual_seed(11)
    B, hk, ratio, K, V = 4, 2, 3, 16, 8
    hv = hk * ratio
    pool = torch.randn(6, hv, V, K, generator=gen)
    idx = torch.tensor([4, -1, 0, 2])
    q = torch.randn(1, B, hk, K, generator=gen)
    k = torch.randn(1, B, hk, K, generator=gen)
    v = torch.randn(1, B, hv, V, generator=gen)
    g = F.logsigmoid(torch.randn(1, B, hv, generator=gen))
    beta = torch.rand(1, B, hv, generator=gen)
    before = pool.clone()
    o = recurrent_gated_delta_rule(q, k, v, g, beta, state_pool=pool, state_indices=idx, use_qk_l2norm=True)
    for b, slot in enumerate(idx.tolist()):
        if slot < 0:
            assert torch.equal(o[0, b], torch.zeros(hv, V))
            continue
        ref_o, ref_s = _fla(q[:, b:b + 1], k[:, b:b + 1], v[:, b:b + 1], g[:, b:b + 1], beta[:, b:b + 1],
                            torch.tensor([0, 1]), before[slot:slot + 1], K ** -0.5, True)
        torch.testing.assert_close(o[0, b], ref_o[0, 0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(pool[slot], ref_s[0], atol=1e-5, rtol=1e-5)
    for untouched in (1, 3, 5):
        assert torch.equal(pool[untouched], before[untouched])


@pytest.mark.parametrize("kwargs,needle", [
    (dict(q=torch.zeros(2, 4, 1, 8)), "q="),
    (dict(v=torch.zeros(1, 4, 3, 8)), "v="),
    (dict(g=torch.zeros(1, 4)), "g="),
    (dict(cu_seqlens=torch.tensor([0, 5])), "cu_seqlens="),
    (dict(initial_state=torch.zeros(1, 2, 8, 8)), "initial_state="),
    (dict(backend="cuda"), "backend="),
])
def test_bad_input_names_the_argument(kwargs, needle):
    args = dict(q=torch.zeros(1, 4, 2, 8), k=torch.zeros(1, 4, 2, 8), v=torch.zeros(1, 4, 4, 8),
                g=torch.zeros(1, 4, 4), beta=torch.zeros(1, 4, 4), cu_seqlens=torch.tensor([0, 4]))
    args.update(kwargs)
    if "q" in kwargs:
        args["k"] = kwargs["q"]
    with pytest.raises(ValueError, match=needle):
        chunk_gated_delta_rule(args.pop("q"), args.pop("k"), args.pop("v"), args.pop("g"), args.pop("beta"),
                               **args)


def test_env_var_forces_torch_and_rejects_unknown(monkeypatch):
    q, k, v, g, beta, cu, h0 = _inputs([9], 1, 1, 8, 8, torch.float32, 6, False)
    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_GDN_BACKEND", "torch")
    o, _ = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu)
    ref, _, _ = chunk_gdn_torch(q, k, v, g, beta, cu_seqlens=cu)
    assert torch.equal(o, ref)
    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_GDN_BACKEND", "fastest")
    with pytest.raises(ValueError, match="SGLANG_ASCEND_HYBRID_GDN_BACKEND"):
        chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu)


@pytest.mark.parametrize("change,needle", [
    (dict(state_pool=torch.zeros(4, 4, 8, 9)), "state_pool="),
    (dict(state_indices=torch.tensor([0, 9])), "state_indices="),
    (dict(state_indices=torch.tensor([0, -2])), "state_indices="),
    (dict(state_indices=torch.tensor([0.0, 1.0])), "state_indices="),
    (dict(k=torch.zeros(1, 2, 2, 7)), "k="),
])
def test_decode_bad_input_names_the_argument_and_leaves_the_pool(change, needle):
    args = dict(q=torch.randn(1, 2, 2, 8), k=torch.randn(1, 2, 2, 8), v=torch.randn(1, 2, 4, 8),
                g=-torch.rand(1, 2, 4), beta=torch.rand(1, 2, 4), state_pool=torch.randn(4, 4, 8, 8),
                state_indices=torch.tensor([0, 2]))
    args.update(change)
    before = args["state_pool"].clone()
    with pytest.raises(ValueError, match=needle):
        recurrent_gated_delta_rule(args.pop("q"), args.pop("k"), args.pop("v"), args.pop("g"), args.pop("beta"),
                                   **args)
    assert torch.equal(args["state_pool"], before)
