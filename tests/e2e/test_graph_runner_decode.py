"""Whole-model decode in SGLang's NPU decode graph-runner order (:mod:`tests.e2e.graph_runner`):
``init_cuda_graph_state``; per capture size (4, 2, 1) ``init_forward_metadata_out_graph(...,
in_capture=True)``, two warm-ups and the captured ``init_forward_metadata_in_graph`` + forward;
replays of live batches of 3, 2 and 1 requests padded to a capture size through SGLang's decode
buffer registry and ``build_replay_fb_view``.

For LFM2 the watched part is the short-conv mixer (the plugin's sidecar hands it pool views and
the graph-stable slot-index buffer; the plugin's conv op runs); for Qwen3.5 the plugin's GDN
decode hook.  A run replays on a device when every watched call of the capture and of every
replay does no host sync, reads nothing made outside the graph but static buffers, and every
replay runs the capture's op sequence on the capture's storage, reading the captured slot-index
buffer; only the live requests' pool slots change (and the reserved pad slot 0, which SGLang's
Ascend mamba backend gives padded requests).  The logits equal transformers' and, in bf16 where
the device rungs serve, the eager decode's bit for bit."""

from __future__ import annotations

import copy
import functools

import pytest
import torch

from sglang_ascend_hybrid.integration import short_conv
from sglang_ascend_hybrid.ops.gdn import decode
from sglang_ascend_hybrid.ops.gdn.contract import OP_GATING
from tests.e2e import device, harness
from tests.e2e import graph_runner as gr
from tests.e2e.runner import run_family

CONV_LAYERS = 3  # of the tiny LFM2: conv, conv, full_attention, conv
GDN_LAYERS = 3  # of the tiny Qwen3.5
BUCKETS = [4, 2, 4, 1, 4, 2]  # the capture size each step of gr.STEPS replays
FORWARDS = 3 * len(gr.CAPTURE_BS) + len(gr.STEPS)  # per capture size 2 warm-ups + the capture; the replays
PAD_SLOT = 0


def _graph_run(name: str, part: str, watched, *, dtype=torch.float32, dev=None, ssm_dtype=None, breakage=None):
    """Family ``name``'s prefill eager, then its decode in graph-runner order; ``watched(mp, wrap)``
    wraps the family's served part with ``wrap(part, fn)``."""
    watch, holder = gr.Watch(), {}

    def patch(mp):
        watched(mp, watch.wrap)
        if breakage is not None:
            breakage(mp)

    def plan_runner(engine, plan):
        holder["graph"] = gr.run_graph_plan(engine, watch)
        return holder["graph"].reqs

    run = run_family(name, dtype=dtype, device=dev, ssm_dtype=ssm_dtype, breakage=patch, plan_runner=plan_runner)
    return run, holder["graph"]


def _watch_short_conv(mp, wrap):
    from sglang.srt.models.lfm2 import Lfm2ShortConv

    mp.setattr(Lfm2ShortConv, "forward", wrap("short_conv", Lfm2ShortConv.forward))


def _watch_gdn_decode(mp, wrap):
    mp.setattr(decode, "run_decode", wrap("gdn_decode", decode.run_decode))


def _lfm2_problems(graph):
    return gr.replay_problems(graph, "slot_index_buffer", "short_conv", pad_slots={PAD_SLOT})


def _assert_watched(graph, part: str, layers: int):
    calls = [c for c in graph.watch.calls if c.part == part]
    assert len(calls) == layers * FORWARDS, len(calls)
    assert graph.buckets == BUCKETS  # padded (3 -> 4) and exact (2, 1) replays


def test_lfm2_graph_decode_on_the_device_conv_rung_replays_and_equals_eager_decode():
    """bf16 with the device emulators behind the seam: the conv decode runs on the sgl-kernel-npu
    v2 update op (a launch each); logits equal transformers' and the eager decode's bitwise."""
    dev = gr.opaque_emulators(device.npu_emulators)
    run, graph = _graph_run("lfm2", "short_conv", _watch_short_conv, dtype=torch.bfloat16, dev=dev)
    assert not _lfm2_problems(graph), _lfm2_problems(graph)
    _assert_watched(graph, "short_conv", CONV_LAYERS)
    assert run.device_calls[device.OP_CONV_UPDATE_V2] == CONV_LAYERS * FORWARDS, run.device_calls
    cmp = run.compare()
    assert cmp.bf16_ok(), str(cmp)
    eager = run_family("lfm2", dtype=torch.bfloat16, device=dev, plan_runner=lambda e, p: gr.run_eager_plan(e))
    for g, e in zip(run.reqs, eager.reqs):
        assert g.generated == e.generated, (g.name, g.generated, e.generated)
        assert torch.equal(torch.stack(g.logits), torch.stack(e.logits)), g.name


def test_lfm2_graph_decode_on_the_torch_conv_rung_replays_and_matches_transformers():
    run, graph = _graph_run("lfm2", "short_conv", _watch_short_conv)
    assert not _lfm2_problems(graph), _lfm2_problems(graph)
    _assert_watched(graph, "short_conv", CONV_LAYERS)
    cmp = harness.compare(run.reqs, copy.deepcopy(run.reference).double())  # transformers in float64
    assert cmp.tokens_equal and cmp.max_gap < 1e-5, str(cmp)
    assert any(PAD_SLOT in changed for changed in graph.changed)  # padded rows did run (on slot 0)


def _fresh_slot_indices_at_replay(mp):
    """Breakage: at replay the sidecar hands the conv layers a fresh copy of the slot indices instead
    of refilling the graph-stable buffer the capture read (a device graph would keep reading the
    buffer, and so the capture's slots)."""
    sidecar = short_conv.backend_classes()[0]
    real = sidecar.init_forward_metadata_out_graph

    def fresh(self, forward_batch, in_capture=False):
        real(self, forward_batch, in_capture)
        if not in_capture:
            self._cache_indices = self._cache_indices.clone()

    mp.setattr(sidecar, "init_forward_metadata_out_graph", fresh)


def test_negative_control_a_fresh_copy_of_the_slot_indices_at_replay_is_caught():
    run, graph = _graph_run("lfm2", "short_conv", _watch_short_conv, breakage=_fresh_slot_indices_at_replay)
    problems = _lfm2_problems(graph)
    differ = [p for p in problems if "not the captured op sequence on the captured storage" in p]
    assert len(differ) == len(gr.STEPS), problems  # every replay: the storage differs from the capture's
    assert all("on ('slot_index_buffer',) at capture" in p and "on ('ext',) at replay" in p for p in differ), differ
    assert any("reads tensors made outside the graph" in p for p in problems), problems
    assert run.compare().fp32_ok()  # on a CPU the eager re-run still computes the right logits: only
    # the storage check sees what a replayed device graph would do


def _host_read_in_conv_decode(mp):
    """Breakage: the plugin's conv decode op reads its slot indices on the host first (a value check
    left on): a sync inside the captured part."""
    from sglang_ascend_hybrid.ops.conv import api as plugin_conv

    real = plugin_conv.causal_conv1d_update

    def checked(x, conv_state, weight, *args, conv_state_indices=None, **kwargs):
        assert bool((conv_state_indices >= -1).all())
        return real(x, conv_state, weight, *args, conv_state_indices=conv_state_indices, **kwargs)

    mp.setattr(plugin_conv, "causal_conv1d_update", checked)


def test_negative_control_a_host_read_in_the_conv_decode_is_caught():
    _, graph = _graph_run("lfm2", "short_conv", _watch_short_conv, breakage=_host_read_in_conv_decode)
    problems = _lfm2_problems(graph)
    synced = [p for p in problems if p.endswith("1 host syncs")]
    # every conv layer of every capture and replay (warm-ups may sync: they run eagerly)
    assert len(synced) == CONV_LAYERS * (len(gr.CAPTURE_BS) + len(gr.STEPS)), problems


def test_qwen3_5_graph_decode_replays_through_the_decode_hook():
    """bf16 pool, key-first Triton decode kernel (the probe rules it out): the npu_recurrent rung."""
    dev = gr.opaque_emulators(functools.partial(device.npu_emulators, decode_layout="key_first"))
    run, graph = _graph_run("qwen3_5", "gdn_decode", _watch_gdn_decode, dtype=torch.bfloat16, dev=dev,
                            ssm_dtype=torch.bfloat16)
    problems = gr.replay_problems(graph, "state_indices[{bs}]", "gdn_decode")
    assert not problems, problems
    _assert_watched(graph, "gdn_decode", GDN_LAYERS)
    assert "runs on the npu_recurrent kernel" in run.log_text()
    assert run.device_calls["recurrent_gated_delta_rule"] == GDN_LAYERS * FORWARDS, run.device_calls
    # its gates on sgl-kernel-npu's gating kernel, captured and replayed with it
    assert run.device_calls[OP_GATING] == GDN_LAYERS * FORWARDS, run.device_calls
    assert "decode gates" in run.log_text() and "runs on the npu_gating kernel" in run.log_text()
    assert all(PAD_SLOT not in changed for changed in graph.changed)  # the hook leaves padded rows alone
    cmp = run.compare()
    assert cmp.bf16_ok(), str(cmp)


# decode steps the scheduler tracks (step -> {request: track slot}): a padded batch of 4, two rows
# of one step, a bucket of 2; slots free in the harness pool (A, B, C hold 7, 3, 10; 0 is the pad)
TRACKED_STEPS = {0: {"A": 11}, 2: {"B": 9, "C": 8}, 5: {"A": 6}}


def _tracked_graph_run(name: str, watched, breakage=None):
    """Family ``name``'s decode in graph-runner order with the scheduler's decode tracking
    (:data:`TRACKED_STEPS`); ``watched(mp, wrap)`` wraps the served part."""
    watch, holder = gr.Watch(), {}

    def patch(mp):
        watched(mp, watch.wrap)
        if breakage is not None:
            breakage(mp)

    def plan_runner(engine, plan):
        holder["graph"] = gr.run_graph_plan(engine, watch, track=TRACKED_STEPS)
        return holder["graph"].reqs

    run = run_family(name, breakage=patch, plan_runner=plan_runner)
    return run, holder["graph"]


def test_lfm2_graph_decode_tracks_radix_snapshots_inside_the_graph():
    """Decode-side prefix-cache tracking under graph capture: SGLang's decode registry track slots
    (mask, track indices), the sidecar's track published inside the captured region from the
    captured batch, one static-shape copy per conv layer: no host sync, the capture's op sequence
    on the capture's storage at every replay, only live and tracked slots change, and each track
    slot holds its request's state right after the tracked step."""
    run, graph = _tracked_graph_run("lfm2", _watch_short_conv)
    assert not _lfm2_problems(graph), _lfm2_problems(graph)
    _assert_watched(graph, "short_conv", CONV_LAYERS)
    cache = run.backend.linear_attn_backend.req_to_token_pool.mamba_pool.mamba_cache
    for (step, name), states in graph.tracked.items():
        slot = TRACKED_STEPS[step][name]
        for pool, want in zip(cache.conv, states[1:]):
            assert torch.equal(pool[:, slot], want), (step, name)
    assert any(graph.changed[s] & set(TRACKED_STEPS[s].values()) for s in TRACKED_STEPS)
    cmp = harness.compare(run.reqs, copy.deepcopy(run.reference).double())  # tracking changes no output
    assert cmp.tokens_equal and cmp.max_gap < 1e-5, str(cmp)


def test_qwen3_5_graph_decode_tracks_radix_snapshots_inside_the_graph():
    """GDN decode tracking under graph capture is SGLang's own (``_track_mamba_state_decode`` in the
    captured forward, on the state the plugin's decode hook wrote): no host sync, the capture's ops on
    the capture's storage at every replay, and each track slot holds its request's SSM and conv
    states right after the tracked step."""
    run, graph = _tracked_graph_run("qwen3_5", _watch_gdn_decode)
    problems = gr.replay_problems(graph, "state_indices[{bs}]", "gdn_decode")
    assert not problems, problems
    _assert_watched(graph, "gdn_decode", GDN_LAYERS)
    cache = run.backend.linear_attn_backend.req_to_token_pool.mamba_pool.mamba_cache
    for (step, name), states in graph.tracked.items():
        slot = TRACKED_STEPS[step][name]
        for pool, want in zip([cache.temporal, *cache.conv], states):
            assert torch.equal(pool[:, slot], want), (step, name)
    assert any(graph.changed[s] & set(TRACKED_STEPS[s].values()) for s in TRACKED_STEPS)
    cmp = harness.compare(run.reqs, copy.deepcopy(run.reference).double())  # tracking changes no output
    assert cmp.tokens_equal and cmp.max_gap < 1e-5, str(cmp)


def test_negative_control_gdn_graph_decode_without_sglangs_track_copy_fails(monkeypatch):
    from sglang.srt.layers.attention import hybrid_linear_attn_backend as hla

    monkeypatch.setattr(hla.MambaAttnBackendBase, "_track_mamba_state_decode",
                        lambda self, *args, **kwargs: None)
    with pytest.raises(AssertionError):
        test_qwen3_5_graph_decode_tracks_radix_snapshots_inside_the_graph()


def test_negative_control_graph_decode_without_the_track_copy_leaves_track_slots_stale():
    from sglang_ascend_hybrid.integration import short_conv_track

    def no_copy(mp):
        mp.setattr(short_conv_track, "after_update", lambda conv_state: None)

    run, graph = _tracked_graph_run("lfm2", _watch_short_conv, breakage=no_copy)
    cache = run.backend.linear_attn_backend.req_to_token_pool.mamba_pool.mamba_cache
    stale = [(s, n) for (s, n), states in graph.tracked.items()
             if not all(torch.equal(p[:, TRACKED_STEPS[s][n]], w) for p, w in zip(cache.conv, states[1:]))]
    assert len(stale) == len(graph.tracked)
