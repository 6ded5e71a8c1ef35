"""Builds of sgl-kernel-npu that lack an op (Ascend 950: SGL_KERNEL_ENABLE_A3_ONLY_OPS is OFF, so
``mega_chunk_gdn``, ``recurrent_gated_delta_rule`` and ``causal_conv1d`` are not registered while
their Python wrappers still import; sgl-project/sgl-kernel-npu f425bdf1 csrc/CMakeLists.txt ~9-13,
~49-62, ~171-175, csrc/pytorch_extensions.cpp ~104-139, ~267-274): the seam reports a wrapper whose
op is missing absent, the emulated 950 machine offers exactly the ops such a build has, every
ladder runs there without a crash on the right rung, and a device rung that raises AttributeError
(an entry the table did not know to be hollow) falls back with one WARNING."""

from __future__ import annotations

import logging
import sys
import types
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from sglang_ascend_hybrid.emulators import causal_conv1d as conv_emu
from sglang_ascend_hybrid.emulators import gdn_sets
from sglang_ascend_hybrid.integration.conv_state_layout import cuda_layout_view
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.conv import api as conv_ops
from sglang_ascend_hybrid.ops.conv import dispatch as conv_dispatch
from sglang_ascend_hybrid.ops.gdn import chunk_gated_delta_rule, contract, recurrent_gated_delta_rule
from sglang_ascend_hybrid.ops.gdn.contract import OP_MEGA, OP_NPU_CHUNK, OP_TRITON
from sglang_ascend_hybrid.ops.gdn.torch_impl import l2norm
from sglang_ascend_hybrid.ops.ladder import Ladder, Rung
from tests.ops.conv.conv_oracle import assert_close_to_oracle, naive_causal_conv1d_fn
from tests.support import gdn_inputs
from tests.support.call_counter import Counting
from tests.support.word_signature import SIG

D = 128


pytestmark = pytest.mark.usefixtures("fresh_gdn")


def _inputs(hv=16, hk=8, lens=(70, 5), pool_dtype=torch.bfloat16, seed=0):
    return gdn_inputs.packed(lens, seed=seed, hv=hv, hk=hk, k_dim=D, dtype=torch.bfloat16,
                             state_dtype=pool_dtype).prefill()


# ----------------------------------------------------------------------------- the seam's table


@pytest.fixture
def mega_wrapper(npu_stub_packages, monkeypatch):
    """The stub sgl_kernel_npu with an importable ``fla.mega_chunk_gdn`` (as on every build)."""
    import sgl_kernel_npu.fla  # noqa: F401  (the stub package)

    module = types.ModuleType("sgl_kernel_npu.fla.mega_chunk_gdn")

    def run_mega_chunk_gdn(*args, **kwargs):
        return torch.ops.npu.mega_chunk_gdn(*args, **kwargs)

    module.run_mega_chunk_gdn = run_mega_chunk_gdn
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return module


def test_the_mega_wrapper_without_its_registered_op_is_absent(mega_wrapper, monkeypatch, caplog):
    monkeypatch.setattr(torch.ops, "npu", SimpleNamespace(), raising=False)  # an Ascend 950 build
    with caplog.at_level(logging.INFO):
        assert seam.lookup(contract.OP_MEGA) is None
        assert not seam.available(contract.OP_MEGA)
    assert "torch.ops.npu.mega_chunk_gdn is not registered" in caplog.text
    assert seam.PYTHON_ENTRY_TORCH_OPS[contract.OP_MEGA] == "mega_chunk_gdn"
    assert seam.TORCH_OPS_OWNER["mega_chunk_gdn"] == "sgl_kernel_npu"


def test_the_mega_wrapper_with_its_registered_op_is_present(mega_wrapper, monkeypatch):
    monkeypatch.setattr(torch.ops, "npu", SimpleNamespace(mega_chunk_gdn=lambda *a, **k: "ran"), raising=False)
    assert seam.lookup(contract.OP_MEGA) is mega_wrapper.run_mega_chunk_gdn
    assert seam.lookup(contract.OP_MEGA)() == "ran"


def test_a_kernel_package_that_does_not_import_has_no_python_entries(npu_stub_packages, monkeypatch):
    """A broken install (its probe says it does not import) means absent entries, although a module
    under it would import."""
    with seam.install_package_probes({"sgl_kernel_npu": False}):
        assert seam.lookup("sgl_kernel_npu.fla.l2norm:l2norm_fwd") is None


def test_an_entry_outside_the_table_is_not_checked(npu_stub_packages, monkeypatch):
    from sgl_kernel_npu.fla import l2norm as stub_module

    monkeypatch.setattr(torch.ops, "npu", SimpleNamespace(), raising=False)
    assert seam.lookup("sgl_kernel_npu.fla.l2norm:l2norm_fwd") is stub_module.l2norm_fwd


# ----------------------------------------------------------------------------- the emulated 950 build


@pytest.mark.parametrize("pool_dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("chunk_op", [True, False], ids=["chunk-op", "no-chunk-op"])
@pytest.mark.parametrize("use_mega", ["0", "1"])
def test_every_gdn_ladder_runs_on_an_emulated_ascend_950(monkeypatch, caplog, pool_dtype, chunk_op, use_mega):
    """Prefill takes the chunk op (it keeps fp32 states on 950), else the Triton entry -- which with
    GDN_USE_MEGA_GDN=1 would call the missing mega op, so the ladder predicts that and takes torch
    -- never the mega rung; decode takes torch (no recurrent op).  No AttributeError, no WARNING."""
    monkeypatch.setenv("GDN_USE_MEGA_GDN", use_mega)
    ops = {n: Counting(f) for n, f in gdn_sets.emulators(chip="950", npu_chunk=chunk_op, triton=True).items()}
    q, k, v, g, beta, cu, h0 = _inputs(pool_dtype=pool_dtype)
    h0_before = h0.clone()
    with seam.install_device_facts(chip="950", sgl_kernel_npu_version="2026.6.1"), seam.install_emulators(ops), \
            caplog.at_level(logging.INFO):
        o, final = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0)
        pool = h0.clone()
        idx = torch.tensor([1, -1, 0])
        qd, kd = (l2norm(torch.randn(1, 3, 8, D)).bfloat16() for _ in range(2))
        vd = torch.randn(1, 3, 16, D).bfloat16()
        gd, bd = F.logsigmoid(torch.randn(1, 3, 16)), torch.rand(1, 3, 16).bfloat16()
        out = recurrent_gated_delta_rule(qd, kd, vd, gd, bd, state_pool=pool, state_indices=idx)
    rung = "npu_chunk" if chunk_op else ("torch" if use_mega == "1" else "triton")
    assert f"runs on the {rung} kernel" in caplog.text
    if chunk_op:
        assert ops[OP_NPU_CHUNK].calls == 1 and ops[OP_TRITON].calls == 0
    else:
        assert ops[OP_TRITON].calls == (0 if use_mega == "1" else 1)
    if not chunk_op and use_mega == "1":
        assert "no torch.ops.npu.mega_chunk_gdn" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    assert torch.equal(h0, h0_before)
    ref_o, ref_final = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0, backend="torch")
    torch.testing.assert_close(o.float(), ref_o.float(), atol=3e-2, rtol=3e-2)
    torch.testing.assert_close(final, ref_final, atol=3e-2, rtol=3e-2)
    ref_pool = h0.clone()
    ref_out = recurrent_gated_delta_rule(qd, kd, vd, gd, bd, state_pool=ref_pool, state_indices=idx,
                                         backend="torch")
    assert torch.equal(out, ref_out) and torch.equal(pool, ref_pool)  # decode ran on torch


def test_the_conv_ladders_run_on_an_emulated_ascend_950():
    """Short-conv prefill without torch.ops.npu.causal_conv1d (the 950 variant): torch rung, the oracle's
    result; the GDN 950 set installed alongside does not matter to it."""
    dim, width = 24, 4
    gen = torch.Generator().manual_seed(5)
    pool = torch.randn(4, width - 1, dim, generator=gen).bfloat16()
    weight = (torch.randn(dim, width, generator=gen) * 0.5).bfloat16()
    lens = [3, 2]
    qsl = torch.tensor([0, 3, 5], dtype=torch.int32)
    idx = torch.tensor([2, 0], dtype=torch.int32)
    his = torch.tensor([True, False])
    x = torch.randn(dim, sum(lens), generator=gen).bfloat16()
    ops = {**gdn_sets.emulators(chip="950", triton=True), **conv_emu.emulators(**conv_emu.VARIANTS["ascend950"])}
    conv_dispatch.reset_state()
    with seam.install_device_facts(chip="950"), seam.install_emulators(ops):
        view = cuda_layout_view(pool, width - 1)
        expect, scale, new_view = naive_causal_conv1d_fn(x, weight, None, qsl, idx, his, view, True)
        out = conv_ops.causal_conv1d_fn(x, weight, None, query_start_loc=qsl, cache_indices=idx,
                                        has_initial_state=his, conv_states=view, activation="silu")
    assert_close_to_oracle(out, expect, scale, torch.bfloat16, "950")
    assert torch.equal(view, new_view)


# ----------------------------------------------------------------------------- AttributeError on a device rung


def test_an_attribute_error_of_a_device_rung_is_an_unexpected_refusal(caplog):
    seen = []

    def hollow():
        seen.append("device")
        raise AttributeError("'_OpNamespace' 'npu' object has no attribute 'some_op'")

    ladder = Ladder("demo_attr", [
        Rung("device", lambda sig: True, hollow, device=True),
        Rung("torch", lambda sig: True, lambda: seen.append("torch") or "ok"),
    ])
    with caplog.at_level(logging.INFO):
        assert ladder(SIG) == "ok"
        assert ladder(SIG) == "ok"
    assert seen == ["device", "torch", "torch"]  # refused once, then remembered
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "failed unexpectedly" in warnings[0].getMessage()
    assert "AttributeError" in warnings[0].getMessage() and "some_op" in warnings[0].getMessage()
    for exc in (AttributeError("x"), NotImplementedError("x")):
        assert Rung("d", lambda s: True, lambda: None, device=True).classify(exc) == "unexpected"
        assert Rung("t", lambda s: True, lambda: None).classify(exc) == "error"  # pure torch: propagates


def test_a_pure_torch_rung_attribute_error_propagates():
    def broken():
        raise AttributeError("a bug in the torch path")

    ladder = Ladder("demo_attr_torch", [Rung("torch", lambda sig: True, broken)])
    with pytest.raises(AttributeError, match="a bug in the torch path"):
        ladder(SIG)


def test_a_hollow_mega_entry_the_table_did_not_know_falls_back_with_one_warning(caplog):
    """A mega entry that imports and is served (the seam could not tell) but raises AttributeError:
    the prefill ladder takes the next rung, the state is untouched, the result is the torch rung's."""
    hollow = Counting(gdn_sets.missing_torch_op("mega_chunk_gdn"))
    q, k, v, g, beta, cu, h0 = _inputs(lens=(9, 4))
    h0_before = h0.clone()
    with seam.install_device_facts(chip="A3", sgl_kernel_npu_version="2026.6.1"), \
            seam.install_emulators({OP_MEGA: hollow}), caplog.at_level(logging.INFO):
        o, final = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0)
        o2, final2 = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0)
    assert hollow.calls == 1
    ref_o, ref_final = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0, backend="torch")
    assert torch.equal(o, ref_o) and torch.equal(final, ref_final) and torch.equal(o2, ref_o)
    assert torch.equal(h0, h0_before)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "mega failed unexpectedly" in warnings[0] and "mega_chunk_gdn" in warnings[0]
