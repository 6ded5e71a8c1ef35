"""The Triton entry hook serves sgl-kernel-npu PR #744's indexed-pool keywords on its ladder when the
entry refuses the heads (failure B), instead of handing them past the ladder to the refusing entry."""

from __future__ import annotations

import pytest
import torch

from sglang_ascend_hybrid.integration import gdn_hooks
from tests.integration.test_gdn_hooks_edges import MEGA_REFUSAL, _fla_inputs
from tests.ops.gdn.gdn_oracles import fla

K = V = 16


def _refusing(calls):
    def original(q, k, v, g, beta, **kwargs):
        calls.append(kwargs)
        raise RuntimeError(MEGA_REFUSAL)

    return original


@pytest.mark.parametrize("inplace", [True, False])
def test_pool_keywords_are_served_by_the_ladder_with_the_entrys_pool_semantics(inplace):
    q, k, v, g, beta, cu, _ = _fla_inputs([20, 7, 9, 4], 2, 6, K, V, seed=5)
    pool = torch.randn(5, 6, K, V, generator=torch.Generator().manual_seed(9)) * 0.3  # key first, the entry's
    before = pool.clone()
    indices = torch.tensor([4, -1, 0, 5])  # negative / out-of-range slots: zero initial state, never written back
    calls = []
    o, final, h = gdn_hooks.sgl_chunk_gated_delta_rule_npu(
        _refusing(calls), q, k, v, g, beta, initial_state=pool, cu_seqlens=cu, use_qk_l2norm_in_kernel=True,
        initial_state_indices=indices, inplace_final_state=inplace)
    assert len(calls) == 1 and calls[0]["initial_state_indices"] is indices  # the entry was tried first, as given
    h0 = torch.stack([before[4], torch.zeros(6, K, V), before[0], torch.zeros(6, K, V)])
    ref_o, ref_final, _ = fla(q, k, v, g, beta, cu, h0.transpose(-1, -2), K ** -0.5, l2=True)
    torch.testing.assert_close(o.float(), ref_o, atol=3e-3, rtol=3e-3)
    torch.testing.assert_close(final, ref_final.transpose(-1, -2), atol=3e-3, rtol=3e-3)
    untouched = [1, 2, 3] if inplace else [0, 1, 2, 3, 4]
    assert torch.equal(pool[untouched], before[untouched])
    if inplace:
        torch.testing.assert_close(pool[4], final[0])
        torch.testing.assert_close(pool[0], final[2])
        assert not torch.equal(pool[4], before[4])


def test_an_unknown_keyword_reaches_the_entry_and_a_refusal_then_names_it():
    q, k, v, g, beta, cu, h0 = _fla_inputs([5, 3], 1, 2, K, V, seed=6)
    calls = []
    with pytest.raises(RuntimeError, match="does not know the keyword argument.*chunk_size"):
        gdn_hooks.sgl_chunk_gated_delta_rule_npu(_refusing(calls), q, k, v, g, beta, initial_state=h0, cu_seqlens=cu,
                                                 chunk_size=64)
    assert calls[0]["chunk_size"] == 64


@pytest.mark.parametrize("kwargs,match", [
    (dict(inplace_final_state=True), r"^chunk_gated_delta_rule_npu: initial_state_indices=None: expected the pool's "
                                     r"slots with inplace_final_state=True \(both or neither\)$"),
    (dict(initial_state_indices=torch.tensor([0, 1])), r"^chunk_gated_delta_rule_npu: inplace_final_state=None: "
                                                       r"expected True or False with initial_state_indices \("),
    (dict(initial_state=None, initial_state_indices=torch.tensor([0, 1]), inplace_final_state=True),
     r"^chunk_gated_delta_rule_npu: initial_state=None: expected the state pool \[slots, H, K, V\] with "
     r"initial_state_indices$"),
])
def test_incomplete_pool_keywords_are_refused_naming_the_argument(kwargs, match):
    q, k, v, g, beta, cu, h0 = _fla_inputs([5, 3], 1, 2, K, V, seed=7)
    with pytest.raises(ValueError, match=match):
        gdn_hooks.sgl_chunk_gated_delta_rule_npu(_refusing([]), q, k, v, g, beta, **{"initial_state": h0,
                                                 "cu_seqlens": cu, **kwargs})


@pytest.mark.parametrize("head_first,in_ladder", [(True, False), (False, True)])
def test_head_first_and_ladder_calls_reach_the_entry_unchanged(head_first, in_ladder):
    from sglang_ascend_hybrid.ops.gdn.prefill import entries

    q, k, v, g, beta, cu, h0 = _fla_inputs([5, 3], 1, 2, K, V, seed=8)
    seen = []
    token = entries.IN_LADDER.set(in_ladder)
    try:
        got = gdn_hooks.sgl_chunk_gated_delta_rule_npu(lambda *a, **kw: seen.append((a, kw)) or "entry", q, k, v, g,
                                                       beta, initial_state=h0, cu_seqlens=cu, head_first=head_first)
    finally:
        entries.IN_LADDER.reset(token)
    assert got == "entry"
    (args, kwargs), = seen
    assert len(args) == 5 and all(a is b for a, b in zip(args, (q, k, v, g, beta)))
    assert kwargs["head_first"] is head_first and kwargs["initial_state"] is h0
