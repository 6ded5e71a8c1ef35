"""The GDN prefill's q / k l2-normalisation ladder: sgl-kernel-npu's Triton ``l2norm_fwd`` where it serves
(as SGLang's ``chunk_gdn`` calls it), the torch path elsewhere, the same values either way."""

from __future__ import annotations

import logging

import torch

from sglang_ascend_hybrid.emulators import gdn_sets
from sglang_ascend_hybrid.emulators.gdn_l2norm import l2norm_fwd
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.gdn import api
from sglang_ascend_hybrid.ops.gdn.contract import L2NORM_TEXT, OP_L2NORM, l2norm_refusal_reason
from sglang_ascend_hybrid.ops.gdn.prefill import l2norm as qk
from sglang_ascend_hybrid.ops.gdn.signature import GdnSignature


def _oracle(x: torch.Tensor) -> torch.Tensor:
    xd = x.double()
    return xd / torch.sqrt((xd * xd).sum(-1, keepdim=True) + 1e-6)


class Counting:
    def __init__(self, fn=l2norm_fwd):
        self.fn, self.inputs = fn, []

    def __call__(self, x, *args, **kwargs):
        self.inputs.append(x)
        return self.fn(x, *args, **kwargs)


def _qk(T=9, H=2, K=16, dtype=torch.bfloat16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(1, T, H, K, generator=gen).to(dtype), torch.randn(1, T, H, K, generator=gen).to(dtype))


def _sig(q, hv=4):
    return GdnSignature(hv, q.shape[2], q.shape[3], q.shape[3], q.dtype)


def test_the_kernel_serves_both_q_and_k_and_matches_the_torch_path_and_the_oracle():
    q, k = _qk()
    torch_q, torch_k = qk.qk_l2norm(_sig(q), q, k)           # no kernel installed: the torch rung
    kernel = Counting()
    with seam.install_emulators({OP_L2NORM: kernel}):
        got_q, got_k = qk.qk_l2norm(_sig(q), q, k)
    assert [t.shape for t in kernel.inputs] == [q.shape, k.shape]  # one launch each, as SGLang's chunk_gdn
    assert got_q.dtype == q.dtype and got_k.shape == k.shape
    assert torch.equal(got_q, torch_q) and torch.equal(got_k, torch_k)
    assert torch.allclose(got_q.double(), _oracle(q), atol=1e-2)
    assert torch.allclose(got_k.double(), _oracle(k), atol=1e-2)


def test_a_strided_q_reaches_the_kernel_as_a_contiguous_copy():
    gen = torch.Generator().manual_seed(1)
    wide = torch.randn(1, 7, 2, 48, generator=gen).to(torch.bfloat16)
    q, k = wide[..., :16], wide[..., 16:32]                    # rows 48 elements apart: the kernel reads t * 16
    kernel = Counting()
    with seam.install_emulators({OP_L2NORM: kernel}):
        got_q, got_k = qk.qk_l2norm(_sig(q), q, k)             # the emulator raises on a strided input
    assert all(t.is_contiguous() for t in kernel.inputs)
    assert torch.allclose(got_q.double(), _oracle(q), atol=1e-2)
    assert torch.allclose(got_k.double(), _oracle(k), atol=1e-2)


def test_rows_past_64_kb_go_to_the_torch_path_with_the_kernels_own_rule(caplog):
    assert l2norm_refusal_reason(32768, 2) is None
    assert "at most 65536 bytes" in l2norm_refusal_reason(32769, 2)
    assert l2norm_refusal_reason(16384, 4) is None and l2norm_refusal_reason(16385, 4) is not None
    q, k = _qk(T=2, H=1, K=16385, dtype=torch.float32)
    kernel = Counting()
    caplog.set_level(logging.INFO, logger="sglang_ascend_hybrid")
    with seam.install_emulators({OP_L2NORM: kernel}):
        got_q, _ = qk.qk_l2norm(_sig(q, hv=1), q, k)
    assert kernel.inputs == []
    assert "normalises q and k (K=16385 float32) on the torch kernel" in caplog.text
    assert "cannot use the npu_l2norm kernel: rows of 16385 x 4 bytes" in caplog.text
    assert torch.allclose(got_q.double(), _oracle(q), atol=1e-5)


def test_a_refusal_at_call_time_falls_back_to_torch_for_that_signature(caplog):
    q, k = _qk(seed=2)
    calls = []

    def refusing(x, *args, **kwargs):
        calls.append(x)
        raise RuntimeError(L2NORM_TEXT)

    caplog.set_level(logging.INFO, logger="sglang_ascend_hybrid")
    with seam.install_emulators({OP_L2NORM: refusing}):
        first = qk.qk_l2norm(_sig(q), q, k)
        again = qk.qk_l2norm(_sig(q), q, k)
    assert len(calls) == 1                                      # refused once, not asked again
    assert torch.equal(first[0], again[0]) and torch.allclose(first[0].double(), _oracle(q), atol=1e-2)
    assert sum("gdn_qk_l2norm kernel npu_l2norm refused" in r.getMessage() for r in caplog.records) == 1


def test_the_prefill_op_normalises_through_the_kernel_when_asked_and_not_otherwise():
    q, k = _qk(T=6, H=1, K=8, dtype=torch.float32, seed=3)
    gen = torch.Generator().manual_seed(4)
    v = torch.randn(1, 6, 2, 8, generator=gen)
    g = torch.nn.functional.logsigmoid(torch.randn(1, 6, 2, generator=gen))
    beta = torch.rand(1, 6, 2, generator=gen)
    cu = torch.tensor([0, 4, 6], dtype=torch.int32)
    kernel = Counting()
    with seam.install_emulators({OP_L2NORM: kernel}):
        o_plain, _ = api.chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu)
        assert kernel.inputs == []
        o_norm, _ = api.chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, use_qk_l2norm=True)
    assert len(kernel.inputs) == 2
    want, _ = api.chunk_gated_delta_rule(torch.nn.functional.normalize(q, dim=-1, eps=0),
                                         torch.nn.functional.normalize(k, dim=-1, eps=0), v, g, beta, cu_seqlens=cu)
    assert torch.allclose(o_norm, want, atol=1e-4) and not torch.allclose(o_plain, o_norm, atol=1e-3)


def test_every_gdn_emulator_set_offers_the_kernel():
    assert gdn_sets.emulators()[OP_L2NORM] is l2norm_fwd
    assert OP_L2NORM not in gdn_sets.emulators(l2norm=False)
