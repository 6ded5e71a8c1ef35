"""The emulated NPU's sgl-kernel-npu GDN helpers and allocator kernel agree with SGLang's own forms.

References: SGLang's Triton kernels of the same ops (run on CPU under ``TRITON_INTERPRET=1``), its
torch references (``rms_norm_ref``, ``alloc_extend_naive``), or a float64 formula.  Tiny sizes.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from sglang_ascend_hybrid.ops.errors import EmulatorContractViolation

pytestmark = pytest.mark.base_release_only

_MODULE_PATH = (Path(__file__).resolve().parents[2] / "sglang_ascend_hybrid" / "testing" / "emulated_npu"
                / "kernels_gdn_mem.py")


def _load_module():
    spec = importlib.util.spec_from_file_location("emulated_npu_kernels_gdn_mem", _MODULE_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


emu = _load_module()

needs_triton_interpreter = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1",
    reason="SGLang's Triton reference runs on CPU only under TRITON_INTERPRET=1")


def _randn(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


# ----------------------------------------------------------------------------- qkvzba split


@needs_triton_interpreter
@pytest.mark.parametrize("heads_qk,heads_v", [(2, 2), (2, 4)])
def test_interleaved_split_matches_sglang_triton(heads_qk, heads_v):
    from sglang.kernels.ops.attention.triton_gdn_fused_proj import fused_qkvzba_split_reshape_cat as ref
    head_qk, head_v, rows = 8, 4, 3
    ratio = heads_v // heads_qk
    qkvz = _randn(rows, heads_qk * (2 * head_qk + 2 * ratio * head_v), dtype=torch.bfloat16)
    ba = _randn(rows, heads_qk * 2 * ratio, dtype=torch.bfloat16, seed=1)
    got = emu.fused_qkvzba_split_reshape_cat(qkvz, ba, heads_qk, heads_v, head_qk, head_v)
    want = ref(qkvz, ba, heads_qk, heads_v, head_qk, head_v)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        assert torch.equal(g, w)


@needs_triton_interpreter
def test_contiguous_split_matches_sglang_triton():
    from sglang.kernels.ops.attention.triton_gdn_fused_proj import fused_qkvzba_split_reshape_cat_contiguous as ref
    heads_qk, heads_v, head_qk, head_v, rows = 2, 4, 8, 4, 3
    qkvz = _randn(rows, 2 * heads_qk * head_qk + 2 * heads_v * head_v, dtype=torch.bfloat16)
    ba = _randn(rows, 2 * heads_v, dtype=torch.bfloat16, seed=1)
    got = emu.fused_qkvzba_split_reshape_cat_contiguous(qkvz, ba, heads_qk, heads_v, head_qk, head_v)
    want = ref(qkvz, ba, heads_qk, heads_v, head_qk, head_v)
    for g, w in zip(got, want):
        assert g.shape == w.shape and torch.equal(g, w.reshape(g.shape))


def test_split_refuses_inputs_the_kernel_would_misread():
    qkvz = _randn(3, 2 * (16 + 16))  # 2 qk heads of 8, 2 v heads of 4 per group
    ba = _randn(3, 8)
    with pytest.raises(ValueError, match="mixed_qkvz"):
        emu.fused_qkvzba_split_reshape_cat(torch.cat([qkvz, qkvz], 1)[:, ::2], ba, 2, 4, 8, 4)
    with pytest.raises(ValueError, match="num_heads_v"):
        emu.fused_qkvzba_split_reshape_cat(qkvz, ba, 2, 3, 8, 4)
    with pytest.raises(ValueError, match="num_heads_v=3"):
        emu.fused_qkvzba_split_reshape_cat_contiguous(_randn(3, 2 * 16 + 2 * 12), _randn(3, 6), 2, 3, 8, 4)


# ----------------------------------------------------------------------------- l2norm, chunk indices


@needs_triton_interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_l2norm_matches_sglang_triton(dtype):
    from sglang.kernels.ops.attention.fla.l2norm import l2norm_fwd as ref
    x = _randn(5, 2, 16, dtype=dtype)
    got = emu.l2norm_fwd(x)
    want = ref(x)
    assert got.shape == x.shape and got.dtype == dtype
    tol = 1e-6 if dtype == torch.float32 else 1e-2
    assert torch.allclose(got.float(), want.float(), atol=tol, rtol=tol)


def test_l2norm_output_dtype_and_fp64():
    x = _randn(4, 600)  # the D > 512 kernel
    got = emu.l2norm_fwd(x, output_dtype=torch.bfloat16)
    want = x.double() / torch.sqrt((x.double() ** 2).sum(-1, keepdim=True) + 1e-6)
    assert got.dtype == torch.bfloat16
    assert torch.allclose(got.double(), want, atol=1e-2)
    with pytest.raises(EmulatorContractViolation, match=r"read at row t \* 4 whatever its strides"):
        emu.l2norm_fwd(_randn(4, 8).t())   # viewable as [8, 4], rows 1 element apart
    with pytest.raises(EmulatorContractViolation, match=r"read at row t \* 4 whatever its strides"):
        emu.l2norm_fwd(_randn(2, 8)[:, :4])   # two rows 8 elements apart
    assert emu.l2norm_fwd(_randn(1, 8)[:, :4]).shape == (1, 4)   # one row: nothing read out of place
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        emu.l2norm_fwd(_randn(4, 3, 8).transpose(0, 1))   # the source's x.view(-1, D) cannot merge the rows
    with pytest.raises(RuntimeError, match="doesn't support feature dim >= 64KB"):
        emu.l2norm_fwd(_randn(1, 16385))   # fp32 rows of more than 64 KB


def test_chunk_indices_match_sglang_and_cache_by_identity():
    from sglang.kernels.ops.attention.fla.index import prepare_chunk_indices as ref
    cu = torch.tensor([0, 3, 3 + 130, 3 + 130 + 64], dtype=torch.int32)
    got = emu.prepare_chunk_indices(cu, 64)
    assert got.dtype == cu.dtype
    assert torch.equal(got, ref(cu.clone(), 64))
    assert got.tolist() == [[0, 0], [1, 0], [1, 1], [1, 2], [2, 0]]
    cu[1:] += 64  # changed in place: the device's identity cache answers with the old result
    assert emu.prepare_chunk_indices(cu, 64) is got


# ----------------------------------------------------------------------------- gated norm


@pytest.mark.parametrize("norm_before_gate,group_size", [(True, None), (False, 4)])
def test_gated_rms_norm_matches_sglang_reference(norm_before_gate, group_size):
    from sglang.kernels.ops.attention.fla.layernorm_gated import rms_norm_ref
    x, z = _randn(6, 8, dtype=torch.bfloat16), _randn(6, 8, dtype=torch.bfloat16, seed=1)
    w = _randn(8, seed=2)
    out, mean, rstd = emu.layer_norm_fwd_npu(x, w, None, 1e-6, z=z, group_size=group_size,
                                             norm_before_gate=norm_before_gate, is_rms_norm=True,
                                             activation="swish")
    want = rms_norm_ref(x, w, None, z=z, eps=1e-6, group_size=group_size, norm_before_gate=norm_before_gate)
    assert mean is None and rstd.dtype == torch.float32 and rstd.shape == (6 * (8 // (group_size or 8)),)
    assert out.dtype == x.dtype
    assert torch.allclose(out.float(), want.float(), atol=2e-2, rtol=2e-2)


def test_layer_norm_with_bias_writes_out_in_place_and_matches_fp64():
    x, w, bias = _randn(3, 8), _randn(8, seed=1), _randn(8, seed=2)
    out = torch.full_like(x, float("nan"))
    ptr = out.data_ptr()
    got, mean, rstd = emu.layer_norm_fwd_npu(x, w, bias, 1e-5, out=out)
    want = F.layer_norm(x.double(), (8,), w.double(), bias.double(), eps=1e-5)
    assert got is out and out.data_ptr() == ptr
    assert torch.allclose(out.double(), want, atol=1e-5)
    assert torch.allclose(mean.double(), x.double().mean(-1), atol=1e-6)
    assert torch.allclose(rstd.double(), 1 / torch.sqrt(x.double().var(-1, unbiased=False) + 1e-5), atol=1e-5)


def test_layer_norm_rejects_a_3d_gate_as_the_device_asserts():
    x = _randn(6, 4)
    with pytest.raises(AssertionError, match="z: expected shape"):
        emu.layer_norm_fwd_npu(x, _randn(4), None, 1e-6, z=_randn(3, 2, 4), is_rms_norm=True)


# ----------------------------------------------------------------------------- allocator


def _alloc_case():
    page_size = 4
    prefix = torch.tensor([0, 5, 8, 3], dtype=torch.int64)
    seq = torch.tensor([6, 7, 17, 4], dtype=torch.int64)
    # last_loc: slot of each request's last prefix token (page 9 holds request 1's, page 2 request 3's).
    last_loc = torch.tensor([-1, 9 * 4 + 0, 11 * 4 + 3, 2 * 4 + 2], dtype=torch.int64)
    free_pages = torch.tensor([20, 21, 22, 23, 24, 25, 26], dtype=torch.int64)
    return prefix, seq, last_loc, free_pages, page_size


def test_alloc_extend_kernel_matches_sglang_alloc_extend_naive():
    from sglang.srt.mem_cache.allocator.paged import alloc_extend_naive
    prefix, seq, last_loc, free_pages, page_size = _alloc_case()
    n = int((seq - prefix).sum())
    out = torch.full((n,), -7, dtype=torch.int64)
    ptr = out.data_ptr()
    emu.alloc_extend_kernel[(4,)](prefix, seq, last_loc, free_pages, out, 4, page_size, 16)
    want = torch.empty(n, dtype=torch.int64)
    alloc_extend_naive(prefix, seq, last_loc, free_pages, want, page_size, "cpu")
    assert out.data_ptr() == ptr and torch.equal(out, want)
    assert out.tolist()[:6] == [80, 81, 82, 83, 84, 85]  # request 0: page 20 then page 21


def test_alloc_extend_kernel_refuses_a_short_output_or_free_list():
    prefix, seq, last_loc, free_pages, page_size = _alloc_case()
    n = int((seq - prefix).sum())
    with pytest.raises(ValueError, match="out_indices"):
        emu.alloc_extend_kernel[(4,)](prefix, seq, last_loc, free_pages, torch.empty(n + 1, dtype=torch.int64),
                                      4, page_size, 16)
    with pytest.raises(ValueError, match="free_page_ptr"):
        emu.alloc_extend_kernel[(4,)](prefix, seq, last_loc, free_pages[:2], torch.empty(n, dtype=torch.int64),
                                      4, page_size, 16)
    with pytest.raises(TypeError, match="alloc_extend_kernel\\[grid\\]"):
        emu.alloc_extend_kernel(prefix, seq, last_loc, free_pages, torch.empty(n), 4, page_size, 16)


# ----------------------------------------------------------------------------- the table


def test_ops_table_names_sglang_import_paths():
    from sglang_ascend_hybrid.emulators.mamba_state_update import emulate_move_intermediate_cache
    assert emu.OPS["sgl_kernel_npu.mamba.mamba_state_update_triton:move_intermediate_cache"] \
        is emulate_move_intermediate_cache
    assert emu.OPS["sgl_kernel_npu.fla.layernorm_gated:layer_norm_fwd_npu"] is emu.layer_norm_fwd_npu
    for key, value in emu.OPS.items():
        module, _, attr = key.partition(":")
        assert module.startswith("sgl_kernel_npu.") and attr and (callable(value) or hasattr(value, "__getitem__"))


@pytest.mark.parametrize("d", [512, 513, 600])
def test_l2norm_adds_eps_under_the_root_as_both_kernels_do(d):
    """``rsqrt(sum x^2 + eps)`` (D <= 512) / ``1 / sqrt(sum x^2 + eps)`` (above), on small inputs, where eps shows
    in fp32.  (On this CPU torch's rsqrt and 1 / sqrt agree bit for bit, so which of the two a D selects is
    not observable here.)"""
    x = _randn(64, d) * 1e-4
    sum_sq = (x * x).sum(dim=1, keepdim=True)
    got = emu.l2norm_fwd(x)
    assert torch.equal(got, x * torch.rsqrt(sum_sq + 1e-6))
    assert not torch.equal(got, x * torch.rsqrt(sum_sq - 1e-6)) and not torch.equal(got, x * torch.rsqrt(sum_sq))
