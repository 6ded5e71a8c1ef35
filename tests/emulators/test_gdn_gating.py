"""The GDN gating emulators (:mod:`sglang_ascend_hybrid.emulators.gdn_gating`) against SGLang's own Triton
gating kernel (run on CPU under ``TRITON_INTERPRET=1``) and a float64 formula, and every rule they copy
from the sgl-kernel-npu source: the host's shape unpacking, addressing by index, the without-sigmoid
kernel's power-of-two tiling."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

from sglang_ascend_hybrid.emulators import gdn_gating as emu
from sglang_ascend_hybrid.ops.errors import EmulatorContractViolation
from sglang_ascend_hybrid.ops.gdn.contract import GATING_ARANGE_TEXT

needs_triton_interpreter = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1",
    reason="SGLang's Triton reference runs on CPU only under TRITON_INTERPRET=1")


def _randn(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _fp64_g(A_log, a, dt_bias):
    x = a.double() + dt_bias.double()
    return -A_log.double().exp() * F.softplus(x, beta=1.0, threshold=20.0)


@pytest.mark.base_release_only
@needs_triton_interpreter
def test_gdn_gating_matches_sglang_triton():
    from sglang.kernels.ops.attention.linear.fused_gdn_gating import fused_gdn_gating as ref
    tokens, heads = 5, 4
    a = _randn(tokens, heads, dtype=torch.bfloat16) * 8  # reaches the softplus threshold branch too
    b = _randn(tokens, heads, dtype=torch.bfloat16, seed=1)
    A_log, dt_bias = _randn(heads, seed=2), _randn(heads, seed=3) * 10
    g, beta = emu.fused_gdn_gating_npu(A_log, a, b, dt_bias)
    g_ref, beta_ref = ref(A_log, a, b, dt_bias)
    assert g.dtype == torch.float32 and g.shape == (1, tokens, heads)
    assert beta.dtype == b.dtype and beta.shape == (1, tokens, heads)  # NPU stores b's dtype
    assert torch.allclose(g, g_ref, rtol=1e-5, atol=1e-5)
    # The NPU kernel takes sigmoid in float32 and rounds once to b's dtype.
    assert torch.equal(beta, torch.sigmoid(b.double()).to(b.dtype).unsqueeze(0))
    assert torch.allclose(beta.float(), beta_ref, atol=1e-2)


def test_gating_g_is_the_fp64_formula_with_the_kernels_softplus_threshold():
    tokens, heads = 6, 3
    a = _randn(tokens, heads, dtype=torch.bfloat16) * 15
    a[0] = 25.0   # beta * x > threshold: softplus(x) is x itself
    A_log, dt_bias = _randn(heads, seed=2), _randn(heads, seed=3, dtype=torch.bfloat16)
    g, _ = emu.fused_gdn_gating_npu(A_log, a, _randn(tokens, heads, seed=1), dt_bias)
    assert torch.allclose(g[0].double(), _fp64_g(A_log, a, dt_bias), rtol=1e-5, atol=1e-6)
    x0 = a[0].double() + dt_bias.double()
    assert torch.allclose(g[0, 0].double(), -A_log.double().exp() * x0, rtol=1e-6)


def test_gating_without_sigmoid_returns_b_itself_and_fp64_g():
    tokens, heads = 3, 4
    a, b = _randn(tokens, heads) * 30, _randn(tokens, heads, seed=1)
    A_log, dt_bias = _randn(heads, seed=2), _randn(heads, seed=3)
    g, beta = emu.fused_gdn_gating_kernel_without_sigmoid(A_log, a, b, dt_bias)
    assert beta is b and g.shape == (1, tokens, heads) and g.dtype == torch.float32
    assert torch.allclose(g[0].double(), _fp64_g(A_log, a, dt_bias), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(4,), (1, 4, 3)])
def test_gating_a_that_is_not_2d_raises_the_hosts_unpacking_error(shape):
    a = _randn(*shape)
    with pytest.raises(ValueError, match="values to unpack"):
        emu.fused_gdn_gating_npu(_randn(3), a, a, _randn(3))
    with pytest.raises(ValueError, match="values to unpack"):
        emu.fused_gdn_gating_kernel_without_sigmoid(_randn(3), a, a, _randn(3))


def test_gating_inputs_read_at_an_index_whatever_their_strides_are_violations():
    a, b, w = _randn(4, 4), _randn(4, 4, seed=1), _randn(4, seed=2)
    strided = _randn(4, 8)[:, ::2]
    with pytest.raises(EmulatorContractViolation, match=r"a of shape \(4, 4\) strides \(8, 2\) is read at t \* "
                                                        r"num_heads \+ h whatever its strides"):
        emu.fused_gdn_gating_npu(w, strided, b, w)
    with pytest.raises(EmulatorContractViolation, match="b of shape"):
        emu.fused_gdn_gating_npu(w, a, strided, w)
    with pytest.raises(EmulatorContractViolation, match="b of shape"):
        emu.fused_gdn_gating_npu(w, a, b[:3], w)   # fewer rows than a: read out of bounds
    with pytest.raises(EmulatorContractViolation, match="A_log has 5 elements"):
        emu.fused_gdn_gating_npu(_randn(5), a, b, w)
    with pytest.raises(EmulatorContractViolation, match="dt_bias of shape"):
        emu.fused_gdn_gating_npu(w, a, b, _randn(8)[::2])
    with pytest.raises(EmulatorContractViolation, match="a of shape"):
        emu.fused_gdn_gating_kernel_without_sigmoid(w, strided, b, w)
    with pytest.raises(EmulatorContractViolation, match="dt_bias has 3 elements"):
        emu.fused_gdn_gating_kernel_without_sigmoid(w, a, b, _randn(3))
    with pytest.raises(EmulatorContractViolation, match=r"A_log has 3 elements, the kernel reads A_log\[h\]"):
        emu.fused_gdn_gating_kernel_without_sigmoid(_randn(3), a, b, w)


def test_gating_an_empty_batch_is_not_emulated():
    with pytest.raises(EmulatorContractViolation, match="grid of 0 programs"):
        emu.fused_gdn_gating_npu(_randn(4), _randn(0, 4), _randn(0, 4), _randn(4))


# Batches the source's without-sigmoid tiling serves and refuses, as run under Triton's CPU interpreter:
# BLK_BATCHES = cdiv(batch, cdiv(48, cdiv(H, 8))) must be a power of two.
@pytest.mark.parametrize("heads, batch, serves", [
    (6, 1, True), (6, 48, True), (6, 49, True), (6, 96, True), (6, 97, False), (6, 100, False), (6, 144, False),
    (6, 145, True), (6, 200, False), (32, 24, True), (32, 25, False), (32, 36, False), (64, 7, True),
    (64, 17, False), (64, 33, False)])
def test_gating_without_sigmoid_takes_power_of_two_tiles_only(heads, batch, serves):
    a, b = _randn(batch, heads), _randn(batch, heads, seed=1)
    w = _randn(heads, seed=2)
    if serves:
        g, _ = emu.fused_gdn_gating_kernel_without_sigmoid(w, a, b, w)
        assert g.shape == (1, batch, heads)
    else:
        with pytest.raises(ValueError, match=GATING_ARANGE_TEXT):
            emu.fused_gdn_gating_kernel_without_sigmoid(w, a, b, w)
    g, _ = emu.fused_gdn_gating_npu(w, a, b, w)   # its sibling tiles in powers of two: every batch
    assert g.shape == (1, batch, heads)


def test_gating_without_sigmoid_on_an_empty_batch_raises_the_arange_error():
    with pytest.raises(ValueError, match="arange's end argument must be greater than the start argument"):
        emu.fused_gdn_gating_kernel_without_sigmoid(_randn(4), _randn(0, 4), _randn(0, 4), _randn(4))
