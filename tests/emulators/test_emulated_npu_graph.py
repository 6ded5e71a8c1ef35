"""The emulated NPU graph (capture / update / replay) and the graph-decode attention ops it rebinds."""

from __future__ import annotations

import threading

import pytest
import torch

from sglang_ascend_hybrid.testing.emulated_npu import kernels_torch_npu as k
from sglang_ascend_hybrid.testing.emulated_npu import npu_module


def _bsh_case(kv_lens, heads=4, kv_heads=2, dim=8, page=4, blocks=6):
    torch.manual_seed(0)
    kc = torch.randn(blocks, page, kv_heads * dim)
    vc = torch.randn(blocks, page, kv_heads * dim)
    table = torch.arange(blocks, dtype=torch.int32).reshape(len(kv_lens), -1)
    q = torch.randn(len(kv_lens), 1, heads * dim)
    kwargs = dict(block_table=table, block_size=page, num_heads=heads, num_key_value_heads=kv_heads,
                  input_layout="BSH", scale=0.3, actual_seq_lengths_kv=list(kv_lens), atten_mask=None, sparse_mode=0)
    return q, kc, vc, kwargs


@pytest.fixture(autouse=True)
def _widen(monkeypatch):
    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_EMULATED_NPU_WIDEN_FP32", "1")


def test_bsh_graph_decode_equals_paged_attention_and_zero_rows_for_padding():
    q, kc, vc, kwargs = _bsh_case([5, 0])
    ws = k.npu_fused_infer_attention_score_get_max_workspace(q, kc, vc, **kwargs)
    out = [torch.empty(2, 1, 32), torch.empty(1)]
    k.npu_fused_infer_attention_score.out(q, kc, vc, workspace=ws, out=out, **kwargs)
    ref = torch.empty(1, 4, 8)
    k.npu_paged_attention(q[:1].reshape(1, 4, 8), kc.view(6, 4, 2, 8), vc.view(6, 4, 2, 8), 2, 4, 0.3,
                          kwargs["block_table"][:1], torch.tensor([5], dtype=torch.int32), ref)
    torch.testing.assert_close(out[0][0].reshape(1, 4, 8), ref)
    assert torch.equal(out[0][1], torch.zeros(1, 32))  # a KV length of 0 (graph padding) is a zero row


def test_reshape_and_cache_allows_only_the_padding_slot_to_repeat():
    kc, vc = torch.zeros(2, 4, 1, 2), torch.zeros(2, 4, 1, 2)
    rows = torch.ones(3, 1, 2)
    k.npu_reshape_and_cache(rows, rows, kc, vc, torch.tensor([5, 0, 0], dtype=torch.int32))
    assert torch.isnan(kc[0, 0]).all() and torch.equal(kc[1, 1], torch.ones(1, 2))  # undefined padding slot
    with pytest.raises(ValueError, match="repeated slots"):
        k.npu_reshape_and_cache(rows, rows, kc, vc, torch.tensor([5, 5, 0], dtype=torch.int32))


def _capture(graph_obj, forward_fn):
    with npu_module.graph(graph_obj, auto_dispatch_capture=True):
        out = forward_fn()
    return out


def test_replay_reruns_the_capture_and_runs_attention_with_the_updated_lengths():
    q, kc, vc, kwargs = _bsh_case([5, 3])
    stale = dict(kwargs)  # the forward keeps passing the capture-time host lengths, as SGLang's does
    ws = torch.zeros(1, dtype=torch.uint8)

    def forward_fn():
        out = [torch.empty(2, 1, 32), torch.empty(1)]
        return k.npu_fused_infer_attention_score.out(q, kc, vc, workspace=ws, out=out, **stale)[0] * 1

    g = npu_module.NPUGraph()
    out = _capture(g, forward_fn)
    assert len(g.records) == 1 and g.captures == 1
    want = k.npu_fused_infer_attention_score(q, kc, vc, **{**kwargs, "actual_seq_lengths_kv": [2, 1]})[0]
    updater = threading.Thread(target=g.update, kwargs={"cpu_update_input": [{"actual_seq_lengths_kv": [2, 1]}]})
    updater.start()
    g.replay()
    updater.join()
    torch.testing.assert_close(out, want)  # the rebound lengths, not the forward's stale [5, 3]
    assert g.replays == 1 and g.updates == 1


def test_replay_without_update_waits_and_fails(monkeypatch):
    q, kc, vc, kwargs = _bsh_case([5, 3])
    ws = torch.zeros(1, dtype=torch.uint8)
    g = npu_module.NPUGraph()
    _capture(g, lambda: k.npu_fused_infer_attention_score.out(
        q, kc, vc, workspace=ws, out=[torch.empty(2, 1, 32), torch.empty(1)], **kwargs)[0] * 1)
    monkeypatch.setattr(npu_module, "UPDATE_WAIT_S", 0.01)
    with pytest.raises(RuntimeError, match="waited"):
        g.replay()


def test_update_needs_auto_dispatch_capture():
    g = npu_module.NPUGraph()
    with npu_module.graph(g):
        out = torch.zeros(1)  # noqa: F841  (the capturing frame's output)
        forward_fn = lambda: torch.zeros(1)  # noqa: E731,F841
    with pytest.raises(RuntimeError, match="auto_dispatch_capture"):
        g.update(cpu_update_input=[{"actual_seq_lengths_kv": [1]}])
