"""Tests for mutants a sampled mutation run found alive (triage in
docs/mutation-report.md): probe verdicts are read back, the capture question is asked of
torch_npu, the npu_v2 prefill rung without cache indices on a batch of several sequences, the
torch decode rung's own bias check, the decode-v2 kernel gets the caller's pad slot id, and the
index-dtype rule's message."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from sglang_ascend_hybrid.backends.conv_state_layout import cuda_layout_view
from sglang_ascend_hybrid.emulators import causal_conv1d as emu
from sglang_ascend_hybrid.ops.conv import api as conv
from sglang_ascend_hybrid.ops.conv import torch_impl as ref
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.index_dtype import index_dtype_problem



def test_a_recorded_verdict_is_read_back_per_probe_and_signature():
    seam.record_verdict("p", "sig-a", "A")
    assert seam.verdict_of("p", "sig-a") == "A"
    assert seam.verdict_of("p", "sig-b") is None and seam.verdict_of("q", "sig-a") is None


@pytest.mark.parametrize("answer,expected", [(False, False), (True, True), (RuntimeError("api"), True)])
def test_capturing_asks_torch_npu_where_it_is_installed(monkeypatch, answer, expected):
    def is_current_stream_capturing():
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(seam, "package_available", lambda name: name == "torch_npu")
    monkeypatch.setattr(torch, "npu", SimpleNamespace(is_current_stream_capturing=is_current_stream_capturing),
                        raising=False)
    assert seam.capturing() is expected


def test_capturing_without_torch_npu_is_false(monkeypatch):
    monkeypatch.setattr(seam, "package_available", lambda name: False)
    monkeypatch.setattr(torch, "npu", SimpleNamespace(is_current_stream_capturing=lambda: True), raising=False)
    assert seam.capturing() is False


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
        out = conv.causal_conv1d_fn(x, weight, None, query_start_loc=qsl, conv_states=cuda_layout_view(pool),
                                    activation="silu")
    assert calls
    expected = ref.causal_conv1d_fn_torch(x, weight, None, qsl, None, None, cuda_layout_view(ref_pool), "silu", -1)
    torch.testing.assert_close(out, expected, rtol=2e-3, atol=2e-3)
    assert torch.equal(pool, ref_pool)


def test_torch_decode_rung_checks_its_bias():
    x = torch.randn(2, 8)
    pool = torch.zeros(3, 2, 8)
    with pytest.raises(ValueError, match="bias"):
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
        conv.causal_conv1d_update(torch.randn(2, 8, generator=gen).half(), cuda_layout_view(pool),
                                  torch.randn(8, 3, generator=gen).half(), activation="silu",
                                  conv_state_indices=torch.tensor([1, 7], dtype=torch.int32), pad_slot_id=7)
    assert seen.get("pad_slot_id") == 7


def test_index_dtype_message_names_the_accepted_dtypes_and_why():
    text = index_dtype_problem("slots", torch.tensor([1.0]))
    assert "(int8, uint8, int16, int32, int64)" in text and text.endswith("indices are whole numbers")
    assert index_dtype_problem("slots", torch.tensor([True])).endswith("a bool mask is not an index")


def test_a_prefill_refusal_is_remembered_for_the_channel_signature_whatever_the_token_count():
    """The prefill signature is (width, channels, dtypes, layout): a kernel that refused once is not
    asked again for the next batch of another length (the refusal memo must not key on T)."""
    gen = torch.Generator().manual_seed(8)
    dim, width = 16, 3
    weight = torch.randn(dim, width, generator=gen).half()
    pool = torch.randn(4, width - 1, dim, generator=gen).half()
    asked = []

    def refusing(*a, **k):
        asked.append(1)
        raise RuntimeError(emu.ERR_DTYPE)

    with seam.install_emulators({emu.OP_FN_V2: refusing}):
        for lens in ([2, 3], [4, 1, 3]):
            qsl = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
            conv.causal_conv1d_fn(torch.randn(dim, sum(lens), generator=gen).half(), weight, None,
                                  query_start_loc=qsl, cache_indices=torch.arange(len(lens), dtype=torch.int32),
                                  conv_states=cuda_layout_view(pool), activation="silu")
    assert asked == [1]


@pytest.mark.parametrize("state_dtype,expected", [(torch.float32, True), (torch.bfloat16, False)])
def test_static_prefill_reasons_say_where_the_stride_probe_decides(state_dtype, expected):
    """``plan``'s per-rung verdicts mark the Triton rung as decided by the startup probe exactly
    where the rung itself would ask the probe (an fp32 pool, Triton not running the mega kernel)."""
    from sglang_ascend_hybrid.ops.gdn import dispatch

    sig = dispatch.GdnSignature(6, 2, 128, 128, torch.bfloat16, state_dtype=state_dtype)
    rows = {name: (reason, probe) for name, reason, probe in
            dispatch.prefill_static_reasons(sig, environ={"GDN_USE_MEGA_GDN": "0"})}
    runs_mega = dispatch.triton_runs_mega(sig, {"GDN_USE_MEGA_GDN": "0"}, True)
    assert rows["triton"][1] is (expected and not runs_mega)
    assert rows["triton"][1] == dispatch.triton_needs_probe(sig, runs_mega)
    assert not rows["npu_chunk"][1] and not rows["torch"][1]
