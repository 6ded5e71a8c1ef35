"""The mega GDN prefill kernel's emulator (:mod:`sglang_ascend_hybrid.emulators.gdn_mega`): head sets and
refusal texts per variant, the wrapper's casts and fp16 state, the refusal of empty sequences."""

from __future__ import annotations

import pytest
import torch

from sglang_ascend_hybrid.emulators import gdn_mega
from sglang_ascend_hybrid.ops.errors import EmulatorContractViolation
from sglang_ascend_hybrid.ops.gdn import contract as caps
from tests.ops.gdn.prefill.test_gdn_prefill_ladder import _inputs
from tests.support import gdn_inputs


def _mega_args(hv=16, hk=8, T=40, D=128, seed=1):
    x = gdn_inputs.packed([T], seed=seed, hv=hv, hk=hk, k_dim=D, dtype=torch.half, with_state=False)
    return x.q, x.k, x.v, x.g, x.beta


@pytest.mark.parametrize("variant", caps.MEGA_VARIANTS, ids=lambda v: v.name)
@pytest.mark.parametrize("pair", [(16, 16), (32, 16), (16, 8), (16, 4), (8, 2), (12, 4), (24, 8), (6, 2), (16, 3),
                                  (64, 16), (48, 16), (32, 8), (4, 4)])
def test_mega_head_sets_and_hint_by_variant(variant, pair):
    hv, hk = pair
    q, k, v, g, beta = _mega_args(hv, hk, T=8)
    expected = {
        "post3": pair in {(16, 16), (32, 16), (48, 16), (64, 16), (16, 8), (32, 8), (16, 4)},
        "pr517": hv % hk == 0 and hv in {16, 24, 32, 48, 64},
        "current": hv % hk == 0 and hv in {8, 12, 16, 24, 32, 48, 64},
    }[variant.name]
    assert variant.supports(hv, hk) == expected
    op = gdn_mega.make_mega_emulator(variant=variant)
    if expected:
        out = op(q, k, v, g, beta, None, None, True, None)
        assert len(out) == 7 and out[3].dtype == torch.float32 and out[5].shape == (1, 1, hv, 128, 128)
    else:
        with pytest.raises(RuntimeError) as err:
            op(q, k, v, g, beta, None, None, True, None)
        text = str(err.value)
        assert text.startswith(caps.MEGA_PAIR_TEXT)
        assert text.endswith(caps.MEGA_HINT) == variant.hint
        assert caps.is_mega_refusal(err.value)


def test_mega_wrapper_casts_and_keeps_an_fp16_state():
    q, k, v, g, beta = _mega_args()
    h0 = torch.randn(1, 16, 128, 128, generator=torch.Generator().manual_seed(2)) * 0.1 + 1e-4
    op = gdn_mega.make_mega_emulator()
    out = op(q.bfloat16(), k.bfloat16(), v.bfloat16(), g, beta.bfloat16(), None, h0, True, None)
    assert out[1].dtype == torch.bfloat16  # (out * scale).to(q.dtype)
    ref = op(q, k, v, g, beta, None, h0.half().float(), True, None)  # fp32 state: the wrapper halves it
    torch.testing.assert_close(out[3], ref[3], atol=1e-2, rtol=5e-2)  # bf16 vs fp16 inputs
    with pytest.raises(RuntimeError, match="^mega_chunk_gdn supports head dimension 128"):
        op(*(x[..., :64] for x in (q, k, v)), g, beta, None, None, True, None)
    with pytest.raises(RuntimeError, match="^g must be float32"):
        op(q, k, v, g.half(), beta, None, None, True, None)
    with pytest.raises(RuntimeError, match="^mega_chunk_gdn currently supports packed B=1 input"):
        op(q.expand(2, -1, -1, -1), k.expand(2, -1, -1, -1), v.expand(2, -1, -1, -1), g, beta, None, None, True,
           None)
    assert not caps.MEGA_POST3.hint and caps.MEGA_CURRENT.hint


def test_mega_emulator_keeps_the_real_contract():
    q, k, v, g, beta, cu, h0 = _inputs([4], 6, 2)
    run = gdn_mega.make_mega_emulator()
    text = (r"unsupported mega_chunk_gdn \(NumValueHeads, NumKeyHeads\) pair "
            r"Try running the alternative backend by setting GDN_ATTN_BACKEND_TRITON=1\.")
    with pytest.raises(RuntimeError, match=text):
        run(q, k, v, g, beta, None, None, True, cu)
    q2, k2, v2, g2, b2, cu2, _ = _inputs([4], 8, 2)
    with pytest.raises(RuntimeError, match="g must be float32"):
        run(q2, k2, v2, g2.half(), b2, None, None, True, cu2)


@pytest.mark.parametrize("lens", [(5, 0, 77), (5, 77, 0)])
def test_the_mega_emulator_refuses_any_empty_sequence(lens):
    """chunk_h stores an empty sequence's entering state into the next sequence's first h row, or past
    h's end for a trailing one: undefined either way."""
    q, k, v, g, beta, cu, h0 = gdn_inputs.packed(lens, seed=4, hv=16, hk=8, k_dim=128, dtype=torch.bfloat16,
                                                 state_dtype=torch.bfloat16).prefill()
    mega = gdn_mega.make_mega_emulator()
    with pytest.raises(EmulatorContractViolation, match=r"sequence\(s\) \[\d\] of cu_seqlens .* are empty"):
        mega(q, k, v, g.float(), beta, None, h0.transpose(-1, -2).contiguous(), True, cu)
