"""The Triton GDN decode emulators address output rows by token position, as the kernels do
(sgl-project/sgl-kernel-npu ``fla/fused_sigmoid_gating_recurrent_decode_optimized.py`` at 5300df95:
``o = q.new_empty(N, HV, V)``, ``p_o = o + (bos * HV + i_hv) * V + o_v``; the generic kernel at
001e1888: ``p_o = o + ((i_k * all + bos) * HV + i_hv) * V``)."""

from __future__ import annotations

import pytest
import torch

from sglang_ascend_hybrid.emulators.gdn_decode import make_triton_decode_emulator
from sglang_ascend_hybrid.ops.errors import EmulatorContractViolation
from sglang_ascend_hybrid.ops.gdn.decode.naive import naive_gated_decode
from tests.support import gdn_inputs

Hk, K, Hv, V, SLOTS = 2, 16, 4, 16, 6


def _inputs(tokens, seed=0):
    return gdn_inputs.sglang_gating(tokens, hv=Hv, hk=Hk, k_dim=K, v_dim=V, slots=SLOTS, seed=seed)


def _run(entry, x, indices, cu):
    kernel = make_triton_decode_emulator(entry, layout="value_first")
    return kernel(x["A_log"], x["a"], x["dt_bias"], 1.0, 20.0, x["q"], x["k"], x["v"], x["b"], x["pool"],
                  torch.tensor(indices, dtype=torch.int32), use_qk_l2norm_in_kernel=True,
                  cu_seqlens=None if cu is None else torch.tensor(cu, dtype=torch.int32))


def _oracle(x, before, row, slot):
    """The fp64 step of q row ``row`` from pool slot ``slot``: (o [Hv, V], new state)."""
    pick = lambda t: t.reshape(-1, *t.shape[-2:])[row:row + 1] if t.dim() > 2 else t[row:row + 1]  # noqa: E731
    o, new = naive_gated_decode(x["A_log"], pick(x["a"]), x["dt_bias"], pick(x["q"]), pick(x["k"]),
                                    pick(x["v"]), pick(x["b"]), before[slot:slot + 1], l2norm="kernel")
    return o[0], new[0]


def test_optimized_rows_follow_the_tokens_and_the_last_row_stays_unwritten():
    """cu = [0, 1, 1, 2], two q rows, three sequences: the output has three rows (one per sequence),
    row 1 holds sequence 2's token (q row 1), row 2 is never written."""
    x = _inputs(2)
    before = x["pool"].clone()
    o = _run("optimized", x, [3, 1, 5], [0, 1, 1, 2])
    assert o.shape == (3, Hv, V)
    o0, s0 = _oracle(x, before, 0, 3)
    o2, s2 = _oracle(x, before, 1, 5)
    torch.testing.assert_close(o[0].double(), o0, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(o[1].double(), o2, atol=1e-5, rtol=1e-5)   # sequence 2's output, in row 1
    assert torch.isnan(o[2]).all()
    torch.testing.assert_close(x["pool"][3].double(), s0, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(x["pool"][5].double(), s2, atol=1e-5, rtol=1e-5)
    assert torch.equal(x["pool"][[0, 1, 2, 4]], before[[0, 1, 2, 4]])       # the empty sequence's slot 1 too


def test_generic_rows_follow_the_tokens_too():
    x = _inputs(2)
    before = x["pool"].clone()
    o = _run("generic", x, [3, 1, 5], [0, 1, 1, 2])
    assert o.shape == (1, 2, Hv, V)
    torch.testing.assert_close(o[0, 1].double(), _oracle(x, before, 1, 5)[0], atol=1e-5, rtol=1e-5)


def test_one_token_per_sequence_fills_every_row():
    x = _inputs(3)
    before = x["pool"].clone()
    o = _run("optimized", x, [0, 4, 2], [0, 1, 2, 3])
    for n, slot in enumerate([0, 4, 2]):
        torch.testing.assert_close(o[n].double(), _oracle(x, before, n, slot)[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("entry", ["optimized", "generic"])
def test_offsets_past_the_tokens_are_a_violation(entry):
    x = _inputs(2)
    with pytest.raises(EmulatorContractViolation, match="past q's 2 tokens"):
        _run(entry, x, [0, 1, 2], [0, 1, 2, 3])


def test_the_optimized_kernel_still_refuses_several_tokens_per_sequence():
    """Without cu_seqlens the batch is one sequence of B tokens (token i at slot idx + i)."""
    x = _inputs(3)
    with pytest.raises(EmulatorContractViolation, match="one token per sequence"):
        _run("optimized", x, [0, 4, 2], None)
