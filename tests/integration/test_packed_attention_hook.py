"""Integration with the real upstream module: SGLang's diffusion HookRegistry
REPLACE of ``ascend_fa.fused_infer_attention_varlen`` reaches ``from ... import``
copies and the upstream ``AscendFAImpl`` methods, and upstream's own ring merge
ignores the query rows our replacement marks with LSE -inf.

``ascend_fa`` imports on a CPU without the NPU stub packages (checked here:
neither ``torch_npu`` nor ``sgl_kernel_npu`` gets imported)."""

from __future__ import annotations

import contextlib
import importlib
import sys
import types

import pytest
import torch

from sglang_ascend_hybrid.integration import packed_attention as pa
from sglang_ascend_hybrid.ops.attention.api import fused_infer_attention_varlen
from sglang_ascend_hybrid.ops.attention.cases import packed_case
from sglang_ascend_hybrid.ops.attention.inputs import packed_boundaries
from sglang_ascend_hybrid.ops.attention.naive import naive_packed_attention
from tests.ops.attention.test_packed_attention import assert_close_to_naive

ATTR = "fused_infer_attention_varlen"


@pytest.fixture(scope="module")
def ascend_fa():
    npu_packages = ("torch_npu", "sgl_kernel_npu")
    fresh = pa.UPSTREAM_MODULE not in sys.modules and not any(n in sys.modules for n in npu_packages)
    module = importlib.import_module(pa.UPSTREAM_MODULE)
    if fresh:  # importing it pulled in no NPU package (no stubs needed on a CPU)
        assert not any(n in sys.modules for n in npu_packages)
    return module


@contextlib.contextmanager
def replaced_via_hook_registry(module):
    """Register our function as a REPLACE hook, apply, and undo everything."""
    from sglang.multimodal_gen.runtime.platforms.plugins import HookRegistry, HookType

    original = getattr(module, ATTR)
    saved_hooks = {t: list(h) for t, h in HookRegistry._hooks.items()}
    saved_patched = set(HookRegistry._patched)
    HookRegistry.reset()
    try:
        HookRegistry.register(pa.UPSTREAM_TARGET, fused_infer_attention_varlen, HookType.REPLACE)
        HookRegistry.apply_hooks()
        assert pa.UPSTREAM_TARGET in HookRegistry._patched
        yield original
    finally:
        patched = getattr(module, ATTR)
        HookRegistry.reset()
        HookRegistry._hooks.update(saved_hooks)
        HookRegistry._patched.update(saved_patched)
        setattr(module, ATTR, original)
        for mod in list(sys.modules.values()):  # undo the propagation to importers
            if isinstance(mod, types.ModuleType) and getattr(mod, ATTR, None) is patched:
                setattr(mod, ATTR, original)


def test_hook_registry_replace_reaches_from_imports(ascend_fa):
    importer = types.ModuleType("_packed_attention_hook_importer")
    exec(f"from {pa.UPSTREAM_MODULE} import {ATTR}", importer.__dict__)
    sys.modules[importer.__name__] = importer
    case = packed_case([3, 0, 2], [2, 4, 0], num_heads=4, num_kv_heads=2)
    try:
        original = importer.fused_infer_attention_varlen
        assert original is getattr(ascend_fa, ATTR)
        # upstream itself refuses these CPU tensors
        with pytest.raises(ValueError, match="on the same NPU"):
            original(*case.args(), **case.kwargs())
        assert not pa.probe_replacement(original)
        with replaced_via_hook_registry(ascend_fa) as before:
            assert before is original
            patched = importer.fused_infer_attention_varlen
            assert patched is getattr(ascend_fa, ATTR) and patched is not original
            out, lse = patched(*case.args(), **case.kwargs())
            want_out, want_lse = fused_infer_attention_varlen(*case.args(), **case.kwargs())
            assert torch.equal(out, want_out) and torch.equal(lse, want_lse)
            assert_close_to_naive(case, out, lse, torch.float32)
            assert pa.probe_replacement(patched)
        assert importer.fused_infer_attention_varlen is original
        assert getattr(ascend_fa, ATTR) is original
    finally:
        sys.modules.pop(importer.__name__, None)


def test_upstream_impl_methods_use_the_replacement(ascend_fa):
    impl = ascend_fa.AscendFAImpl(num_heads=4, head_size=16, causal=False, softmax_scale=0.2,
                                  num_kv_heads=4)
    case = packed_case([3, 4], [3, 4], num_heads=4, num_kv_heads=4, scale=0.2, seed=3)
    q = case.q
    empty_kv = case.k[:0]
    with replaced_via_hook_registry(ascend_fa):
        # packed varlen self-attention (q, k, v share boundaries)
        out = impl.forward_varlen(q, case.k, case.v, cu_seqlens=case.cu_seqlens_q,
                                  max_seqlen=4, cu_seqlens_host=case.q_bounds)
        ref, _ = naive_packed_attention(q, case.k, case.v, case.q_bounds, case.q_bounds, 0.2)
        torch.testing.assert_close(out.double(), ref, atol=2e-5, rtol=2e-5)
        # a ring hop whose KV chunk is empty: output 0, LSE -inf
        out, lse = impl.forward_ring_kv_chunk(q, empty_kv, empty_kv)
        assert (out == 0).all() and torch.isneginf(lse).all() and lse.shape == (4, 7)
    with pytest.raises(ValueError, match="on the same NPU"):
        impl.forward_ring_kv_chunk(q, empty_kv, empty_kv)


def test_upstream_ring_merge_ignores_empty_chunks(ascend_fa):
    from sglang.multimodal_gen.runtime.layers.usp import _ring_merge_attention

    impl = ascend_fa.AscendFAImpl(num_heads=4, head_size=16, causal=False, softmax_scale=0.25,
                                  num_kv_heads=2)
    case = packed_case([6], [10], num_heads=4, num_kv_heads=2, scale=0.25, seed=21)
    cuts = [0, 4, 4, 9, 9, 10]  # chunks of 4, 0, 5, 0, 1 keys
    acc_out = acc_lse = None
    with replaced_via_hook_registry(ascend_fa):
        for start, stop in zip(cuts, cuts[1:]):
            step_out, step_lse = impl.forward_ring_kv_chunk(case.q, case.k[start:stop],
                                                            case.v[start:stop])
            acc_out, acc_lse = _ring_merge_attention(acc_out, acc_lse, step_out, step_lse)
    ref_out, ref_lse = naive_packed_attention(case.q, case.k, case.v, case.q_bounds,
                                              case.k_bounds, case.scale)
    torch.testing.assert_close(acc_out.double(), ref_out, atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(acc_lse[..., 0].T.double(), ref_lse, atol=1e-4, rtol=1e-4)


def test_a_rank_error_upstream_refuses_is_refused_naming_the_value(ascend_fa):
    case = packed_case([3], [2])
    messages = []
    for fn in (getattr(ascend_fa, ATTR), fused_infer_attention_varlen):
        with pytest.raises(ValueError) as info:
            fn(case.q[None], case.k, case.v[None], case.cu_seqlens_q, case.cu_seqlens_k)
        messages.append(str(info.value))
    assert "[T, N, D]" in messages[0]  # upstream's own check, which names no value
    assert messages[1] == ("fused_infer_attention_varlen: q=shape (1, 3, 4, 16) float32: expected a 3D tensor in "
                           "[T, N, D] layout")


def test_upstream_still_needs_the_replacement(ascend_fa):
    assert pa.upstream_needs_replacement(ascend_fa)
    # the private boundary helper we mirror still exists and refuses what ours refuses
    with pytest.raises(ValueError, match="non-decreasing"):
        ascend_fa._packed_boundaries(torch.tensor([0, 3, 2]), None, 2, "cu_seqlens_q")
    with pytest.raises(ValueError) as ours:
        packed_boundaries(torch.tensor([0, 3, 2]), None, 2, "cu_seqlens_q")
    assert str(ours.value) == "fused_infer_attention_varlen: cu_seqlens_q=[0, 3, 2]: expected non-decreasing offsets"
