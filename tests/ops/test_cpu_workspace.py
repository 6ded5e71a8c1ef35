"""Kept CPU temporaries (``ops.cpu_workspace``): reused per thread, grown on demand, never kept
off CPU or above the size limit, and the short-conv prefill's results never alias them."""

from __future__ import annotations

import threading

import torch

from sglang_ascend_hybrid.ops import cpu_workspace
from sglang_ascend_hybrid.ops.conv import torch_impl as ref


def test_kept_buffers_are_reused_grown_and_per_thread():
    a = cpu_workspace.kept("test.a", (4, 8), torch.float32, "cpu")
    b = cpu_workspace.kept("test.a", (2, 8), torch.float32, "cpu")
    assert b.data_ptr() == a.data_ptr()                        # the same kept buffer, a smaller view
    assert cpu_workspace.kept("test.a", (4, 8), torch.bfloat16, "cpu").data_ptr() != a.data_ptr()
    grown = cpu_workspace.kept("test.a", (64, 8), torch.float32, "cpu")
    assert grown.shape == (64, 8)
    assert cpu_workspace.kept("test.a", (64, 8), torch.float32, "cpu").data_ptr() == grown.data_ptr()
    other = []
    t = threading.Thread(target=lambda: other.append(cpu_workspace.kept("test.a", (4, 8), torch.float32, "cpu")))
    t.start()
    t.join()
    assert other[0].data_ptr() != grown.data_ptr()             # another thread, its own buffer


def test_not_kept_off_cpu_or_above_the_limit(monkeypatch):
    monkeypatch.setattr(cpu_workspace, "KEEP_MAX_ELEMENTS", 16)
    big1 = cpu_workspace.kept("test.big", (5, 5), torch.float32, "cpu")
    big2 = cpu_workspace.kept("test.big", (5, 5), torch.float32, "cpu")
    assert big1.data_ptr() != big2.data_ptr() and ("test.big", torch.float32) not in cpu_workspace.buffers("cpu")
    assert cpu_workspace.buffers("meta") == {}
    m = cpu_workspace.kept("test.meta", (4,), torch.float32, "meta")
    assert m.device.type == "meta" and cpu_workspace.buffers("meta") == {}


def test_kept_buffer_made_under_inference_mode_works_outside_it():
    with torch.inference_mode():
        cpu_workspace.kept("test.inf", (8,), torch.float32, "cpu")
    cpu_workspace.kept("test.inf", (8,), torch.float32, "cpu").fill_(1.0)   # no inference-tensor error


def test_short_conv_prefill_results_survive_later_calls():
    """Output and written states of a bf16 prefill (which keeps its fp32 block buffers, the
    history and the new states) stay as they were after later calls with other inputs."""
    def run(seed, dim=16, total=40):
        gen = torch.Generator().manual_seed(seed)
        x = torch.randn(dim, total, generator=gen).bfloat16()
        weight = torch.randn(dim, 4, generator=gen).bfloat16()
        states = torch.randn(6, dim, 3, generator=gen).bfloat16()
        qsl = torch.tensor([0, 7, 30, total], dtype=torch.int32)
        out = ref.causal_conv1d_fn_torch(x, weight, None, qsl, torch.tensor([4, 0, 2]),
                                         torch.tensor([True, False, True]), states, check_values=False)
        return out, states
    out, states = run(1)
    kept = out.clone(), states.clone()
    storages = {b.untyped_storage().data_ptr() for b in cpu_workspace.buffers("cpu").values()}
    assert out.untyped_storage().data_ptr() not in storages
    run(2)
    run(3, dim=24, total=90)
    assert torch.equal(out, kept[0]) and torch.equal(states, kept[1])


def test_a_callers_store_is_used_on_any_device_without_the_limit(monkeypatch):
    """With ``store`` (the chunked GDN path's per-call dict off CPU), buffers of one name share
    memory on every device and the caller bounds their size."""
    monkeypatch.setattr(cpu_workspace, "KEEP_MAX_ELEMENTS", 4)
    store: dict = {}
    a = cpu_workspace.kept("test.s", (4, 4), torch.float32, "meta", store=store)
    first = store[("test.s", torch.float32)]
    assert first.numel() == 16 and a.device.type == "meta"          # above the limit, kept anyway
    b = cpu_workspace.kept("test.s", (2, 4), torch.float32, "meta", store=store)
    assert b.shape == (2, 4) and store[("test.s", torch.float32)] is first and len(store) == 1
    cpu_store: dict = {}
    c = cpu_workspace.kept("test.s", (3, 3), torch.float32, "cpu", store=cpu_store)
    d = cpu_workspace.kept("test.s", (2, 3), torch.float32, "cpu", store=cpu_store)
    assert d.data_ptr() == c.data_ptr() and ("test.s", torch.float32) not in cpu_workspace.buffers("cpu")
