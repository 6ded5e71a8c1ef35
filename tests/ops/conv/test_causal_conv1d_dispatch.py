"""Kernel ladder of the plugin conv ops with the NPU kernels emulated behind the seam
(fp16, as the real ops require), checked against SGLang's Triton kernels; and the
AROUND hooks' routing."""

from __future__ import annotations

import logging
import re

import pytest
import torch
from sglang.kernels.ops.mamba.causal_conv1d_triton import (
    causal_conv1d_fn as triton_fn,
)
from sglang.kernels.ops.mamba.causal_conv1d_triton import (
    causal_conv1d_update as triton_update,
)

from sglang_ascend_hybrid.emulators import causal_conv1d as emu
from sglang_ascend_hybrid.integration import conv_hooks
from sglang_ascend_hybrid.integration.conv_state_layout import cuda_layout_view
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.conv import api as ops
from sglang_ascend_hybrid.ops.conv import dispatch as conv_dispatch
from sglang_ascend_hybrid.ops.conv import torch_impl as ref
from tests.support.word_signature import SIG

DIM = 32
LENS = [5, 2, 0, 1, 4]
SLOTS = [1, -1, 3, 4, 6]
HAS_INIT = [True, False, True, False, True]



def _ops(*names):
    table = emu.emulators()
    return {n: table[n] for n in names}


def _prefill_case(width, gen):
    qsl = torch.tensor([0] + torch.tensor(LENS).cumsum(0).tolist(), dtype=torch.int32)
    x = torch.randn(DIM, sum(LENS), generator=gen).half()
    weight = (torch.randn(DIM, width, generator=gen) * 0.5).half()
    bias = torch.randn(DIM, generator=gen).half()
    pool = torch.randn(8, width - 1, DIM, generator=gen).half()  # window-major, contiguous
    return x, qsl, weight, bias, pool


@pytest.mark.parametrize("width", [2, 3, 4])
@pytest.mark.parametrize("installed,expected_rung", [
    ((emu.OP_FN_V2, emu.OP_ACLNN), "npu_v2"),
    ((emu.OP_ACLNN,), "npu_aclnn"),
])
def test_prefill_device_rungs_match_triton(width, installed, expected_rung):
    gen = torch.Generator().manual_seed(width)
    x, qsl, weight, bias, pool = _prefill_case(width, gen)
    idx = torch.tensor(SLOTS, dtype=torch.int32)
    his = torch.tensor(HAS_INIT)
    ref_pool = pool.clone()
    before = pool.clone()
    call = conv_dispatch.FnCall(x, weight, bias, qsl, idx, his, cuda_layout_view(pool), "silu", -1)
    with seam.install_emulators(_ops(*installed)):
        assert conv_dispatch.FN_LADDER.choose(call.signature(), call).name == expected_rung
        out = ops.causal_conv1d_fn(x, weight, bias, query_start_loc=qsl, cache_indices=idx,
                                   has_initial_state=his, conv_states=cuda_layout_view(pool),
                                   activation="silu")
    ref = triton_fn(x, weight, bias, cuda_layout_view(ref_pool), qsl, LENS, cache_indices=idx,
                    has_initial_state=his, activation="silu")
    real = torch.ones(sum(LENS), dtype=torch.bool)
    real[5:7] = False  # padded sequence
    torch.testing.assert_close(out[:, real], ref[:, real], rtol=2e-3, atol=2e-3)
    # states are copies of inputs: bit-identical to the Triton kernel's, slot 0 included
    torch.testing.assert_close(pool, ref_pool, rtol=0, atol=0)
    for slot in (0, 2, 3, 5, 7):  # pad / zero-length / outside the batch: untouched
        assert torch.equal(pool[slot], before[slot])


@pytest.mark.parametrize("width", [2, 4])
@pytest.mark.parametrize("installed,expected_rung", [
    ((emu.OP_UPDATE_V2, emu.OP_ACLNN), "npu_v2"),
    ((emu.OP_ACLNN, emu.OP_UPDATE_V2_MAIN), "npu_aclnn"),
    ((emu.OP_UPDATE_V2_MAIN,), "npu_update_v2"),
])
def test_decode_device_rungs_match_triton(width, installed, expected_rung):
    gen = torch.Generator().manual_seed(40 + width)
    pool = torch.randn(8, width - 1, DIM, generator=gen).half()
    ref_pool = pool.clone()
    weight = (torch.randn(DIM, width, generator=gen) * 0.5).half()
    idx = torch.tensor([2, -1, 5, 0], dtype=torch.int32)
    with seam.install_emulators(_ops(*installed)):
        for step in range(3):
            x = torch.randn(4, DIM, generator=gen).half()
            call = conv_dispatch.UpdateCall(x, cuda_layout_view(pool), weight, None, None, idx, -1)
            assert conv_dispatch.UPDATE_LADDER.choose(call.signature(), call).name == expected_rung
            out = ops.causal_conv1d_update(x, cuda_layout_view(pool), weight, None, None,
                                           conv_state_indices=idx)
            ref = triton_update(x, cuda_layout_view(ref_pool), weight, None, None, conv_state_indices=idx)
            keep = torch.tensor([True, False, True, True])
            torch.testing.assert_close(out[keep], ref[keep], rtol=2e-3, atol=2e-3)
            torch.testing.assert_close(pool, ref_pool, rtol=0, atol=0)


@pytest.mark.parametrize("why,dim,width,dtype", [
    ("width", 32, 5, torch.float16),
    ("dtype", 32, 3, torch.float32),
])
def test_out_of_limits_goes_to_torch_and_logs_once(caplog, why, dim, width, dtype):
    gen = torch.Generator().manual_seed(9)
    pool = torch.randn(4, width - 1, dim, generator=gen).to(dtype)
    ref = pool.clone()
    weight = torch.randn(dim, width, generator=gen).to(dtype)
    idx = torch.tensor([1, 3], dtype=torch.int32)
    call = conv_dispatch.UpdateCall(torch.zeros(2, dim, dtype=dtype), cuda_layout_view(pool), weight, None,
                           None, idx, -1)
    with seam.install_emulators(emu.emulators()), caplog.at_level(logging.INFO):
        assert conv_dispatch.UPDATE_LADDER.choose(call.signature(), call).name == "torch"
        for _ in range(3):
            x = torch.randn(2, dim, generator=gen).to(dtype)
            out = ops.causal_conv1d_update(x, cuda_layout_view(pool), weight, conv_state_indices=idx)
            expect = ops.causal_conv1d_update(x, cuda_layout_view(ref), weight, conv_state_indices=idx)
    torch.testing.assert_close(out, expect)
    lines = [r for r in caplog.records if "outside every installed NPU conv kernel" in r.getMessage()]
    assert len(lines) == 1 and r"update" in lines[0].getMessage()
    # the line gives every device rung's own reason, from its predicate
    said = {"width": "npu_aclnn: width 5; the NPU conv kernels take 2-4",
            "dtype": "npu_aclnn: x, weight and the state are not of one dtype fp16 or bf16"}[why]
    assert said in lines[0].getMessage() and "npu_update_v2: " in lines[0].getMessage()


def test_dim_not_a_multiple_of_16_stays_on_the_npu_kernel():
    """torch.ops.npu.causal_conv1d's host has no dim rule (sgl-kernel-npu f425bdf1)."""
    pool = torch.randn(4, 2, 24).half()
    call = conv_dispatch.UpdateCall(torch.zeros(2, 24).half(), cuda_layout_view(pool), torch.randn(24, 3).half(),
                           None, None, torch.tensor([1, 3]), -1)
    with seam.install_emulators(emu.emulators(v2_branch=False)):
        assert conv_dispatch.UPDATE_LADDER.choose(call.signature(), call).name == "npu_aclnn"


def test_refusal_falls_back_to_next_rung(caplog):
    """A kernel that refuses the shape at call time with a host text is marked and the next rung runs."""
    gen = torch.Generator().manual_seed(5)
    x, qsl, weight, bias, pool = _prefill_case(3, gen)
    ref_pool = pool.clone()
    idx = torch.tensor(SLOTS, dtype=torch.int32)

    def refusing_v2(*a, **k):
        raise RuntimeError(emu.ERR_DTYPE)

    conv_dispatch.reset_state()
    with seam.install_emulators({emu.OP_FN_V2: refusing_v2, emu.OP_ACLNN: emu.NpuCausalConv1d()}), \
            caplog.at_level(logging.INFO):
        out = ops.causal_conv1d_fn(x, weight, bias, query_start_loc=qsl, cache_indices=idx,
                                   conv_states=cuda_layout_view(pool), activation=None)
    conv_dispatch.reset_state()
    ref = triton_fn(x, weight, bias, cuda_layout_view(ref_pool), qsl, LENS, cache_indices=idx, activation=None)
    real = torch.ones(sum(LENS), dtype=torch.bool)
    real[5:7] = False
    torch.testing.assert_close(out[:, real], ref[:, real], rtol=2e-3, atol=2e-3)
    torch.testing.assert_close(pool, ref_pool, rtol=0, atol=0)
    assert any("refused" in r.getMessage() and "npu_aclnn" in r.getMessage()
               and r.levelno == logging.INFO for r in caplog.records)


def test_forced_backend_env(monkeypatch):
    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_CONV_BACKEND", "torch")
    gen = torch.Generator().manual_seed(6)
    pool = torch.randn(4, 2, DIM, generator=gen).half()
    called = []
    with seam.install_emulators({n: (lambda *a, **k: called.append(1)) for n in conv_dispatch.DEVICE_OPS}):
        ops.causal_conv1d_update(torch.randn(1, DIM).half(), cuda_layout_view(pool),
                                 torch.randn(DIM, 3).half(), conv_state_indices=torch.tensor([1]))
    assert not called


def test_decode_only_env_backend_leaves_prefill_on_its_ladder(monkeypatch, caplog):
    """SGLANG_ASCEND_HYBRID_CONV_BACKEND=npu_update_v2 (a decode-only kernel) forces decode and
    leaves the serving prefill hook on its own ladder, said once, as the GDN variable does."""
    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_CONV_BACKEND", "npu_update_v2")
    gen = torch.Generator().manual_seed(21)
    x, qsl, weight, bias, pool = _prefill_case(3, gen)
    idx = torch.tensor(SLOTS, dtype=torch.int32)
    his = torch.tensor(HAS_INIT)
    ref_pool = pool.clone()
    calls = []
    table = emu.emulators()

    def counted(name):
        def op(*a, **k):
            calls.append(name)
            return table[name](*a, **k)
        return op

    installed = {n: counted(n) for n in (emu.OP_FN_V2, emu.OP_ACLNN, emu.OP_UPDATE_V2_MAIN)}
    caplog.set_level(logging.INFO, logger="sglang_ascend_hybrid")
    with seam.install_emulators(installed):
        for _ in range(2):  # the second call says nothing more
            pool.copy_(ref_pool)
            out = conv_hooks.causal_conv1d_fn_around(lambda *a, **k: pytest.fail("upstream called"),
                                              x, weight, bias, query_start_loc=qsl, cache_indices=idx,
                                              has_initial_state=his, conv_states=cuda_layout_view(pool),
                                              activation="silu")
        assert calls == [emu.OP_FN_V2, emu.OP_FN_V2]  # the prefill ladder's first rung, not an error
        state = torch.randn(4, 2, DIM, generator=gen).half()
        ops.causal_conv1d_update(torch.randn(2, DIM, generator=gen).half(), cuda_layout_view(state),
                                 weight, bias, activation="silu",
                                 conv_state_indices=torch.tensor([1, 3], dtype=torch.int32))
    assert calls[-1] == emu.OP_UPDATE_V2_MAIN  # decode takes the forced kernel
    ref = triton_fn(x, weight, bias, cuda_layout_view(ref_pool.clone()), qsl, LENS, cache_indices=idx,
                    has_initial_state=his, activation="silu")
    real = torch.ones(sum(LENS), dtype=torch.bool)
    real[5:7] = False
    torch.testing.assert_close(out[:, real], ref[:, real], rtol=2e-3, atol=2e-3)
    said = [r for r in caplog.records if "is not a conv causal_conv1d_fn kernel" in r.getMessage()]
    assert len(said) == 1 and "SGLANG_ASCEND_HYBRID_CONV_BACKEND=npu_update_v2" in said[0].getMessage()


def test_unknown_forced_backend_still_refused_by_the_ladder():
    with pytest.raises(ValueError, match=re.escape("causal_conv1d_fn: backend='bogus': expected 'auto' or one of the "
                                                   f"rungs {conv_dispatch.FN_LADDER.names}")):
        conv_dispatch.FN_LADDER(SIG, None, backend="bogus")


# --------------------------------------------------------------------------- AROUND hooks


def test_hooks_route_window_major_to_plugin_and_cuda_layout_to_original():
    gen = torch.Generator().manual_seed(12)
    calls = []

    def original(*a, **k):
        calls.append("original")
        return "upstream"

    x = torch.randn(DIM, 3, generator=gen)
    weight = torch.randn(DIM, 3, generator=gen)
    qsl = torch.tensor([0, 3], dtype=torch.int32)
    cuda_states = torch.zeros(2, DIM, 2)
    assert conv_hooks.causal_conv1d_fn_around(original, x, weight, None, qsl, torch.tensor([1]), None,
                                       cuda_states, None) == "upstream"
    pool = torch.zeros(2, 2, DIM)
    out = conv_hooks.causal_conv1d_fn_around(original, x, weight, None, query_start_loc=qsl,
                                      cache_indices=torch.tensor([1]), conv_states=cuda_layout_view(pool),
                                      activation=None)
    assert calls == ["original"] and out.shape == x.shape
    torch.testing.assert_close(pool[1], x[:, 1:].t())

    assert conv_hooks.causal_conv1d_update_around(original, torch.randn(1, DIM), cuda_states, weight) == "upstream"
    conv_hooks.causal_conv1d_update_around(original, torch.randn(1, DIM), cuda_layout_view(pool), weight,
                                    conv_state_indices=torch.tensor([0]))
    assert calls == ["original", "original"] and pool[0].abs().sum() > 0


def test_hooks_route_everything_to_plugin_while_emulated():
    with seam.install_emulators({emu.OP_ACLNN: emu.NpuCausalConv1d()}):
        assert conv_hooks.routes_to_plugin(torch.zeros(2, DIM), torch.zeros(2, DIM, 2))
    assert not conv_hooks.routes_to_plugin(torch.zeros(2, DIM), torch.zeros(2, DIM, 2))
    assert conv_hooks.routes_to_plugin(torch.zeros(2, DIM), cuda_layout_view(torch.zeros(2, 1, DIM)))
    assert not conv_hooks.routes_to_plugin(torch.zeros(2, DIM), torch.zeros(2, DIM, 1))


def test_npu_v2_prefill_without_cache_indices_on_several_sequences():
    """cache_indices=None means slot b for sequence b: the npu_v2 rung must hand the kernel one
    slot per sequence (3 here) and match the torch rung."""
    gen = torch.Generator().manual_seed(3)
    dim, width, lens = 16, 3, [2, 3, 1]
    qsl = torch.tensor([0, 2, 5, 6], dtype=torch.int32)
    x = torch.randn(dim, sum(lens), generator=gen).half()
    weight = torch.randn(dim, width, generator=gen).half()
    pool = torch.randn(4, width - 1, dim, generator=gen).half()
    ref_pool = pool.clone()
    calls = []
    table = emu.emulators()
    with seam.install_emulators({emu.OP_FN_V2: lambda *a, **k: calls.append(1) or table[emu.OP_FN_V2](*a, **k)}):
        out = ops.causal_conv1d_fn(x, weight, None, query_start_loc=qsl, conv_states=cuda_layout_view(pool),
                                    activation="silu")
    assert calls
    expected = ref.causal_conv1d_fn_torch(x, weight, None, qsl, None, None, cuda_layout_view(ref_pool), "silu", -1)
    torch.testing.assert_close(out, expected, rtol=2e-3, atol=2e-3)
    assert torch.equal(pool, ref_pool)


def test_torch_decode_rung_checks_its_bias():
    x = torch.randn(2, 8)
    pool = torch.zeros(3, 2, 8)
    with pytest.raises(ValueError, match=re.escape("causal_conv1d_update_torch: bias=shape (5,) float32: "
                                                   "expected shape (8,)")):
        ref.causal_conv1d_update_torch(x, cuda_layout_view(pool), torch.randn(8, 3), torch.randn(5),
                                       None, torch.tensor([0, 1], dtype=torch.int32))


def test_decode_v2_kernel_gets_the_callers_pad_slot_id():
    seen = {}
    table = emu.emulators()

    def kernel(*a, **k):
        seen.update(k)
        return table[emu.OP_UPDATE_V2_MAIN](*a, **k)

    gen = torch.Generator().manual_seed(4)
    pool = torch.randn(4, 2, 8, generator=gen).half()
    with seam.install_emulators({emu.OP_UPDATE_V2_MAIN: kernel}):
        ops.causal_conv1d_update(torch.randn(2, 8, generator=gen).half(), cuda_layout_view(pool),
                                  torch.randn(8, 3, generator=gen).half(), activation="silu",
                                  conv_state_indices=torch.tensor([1, 7], dtype=torch.int32), pad_slot_id=7)
    assert seen.get("pad_slot_id") == 7
