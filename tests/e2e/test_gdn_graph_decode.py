"""A whole GDN model's decode driven in SGLang's NPU graph-runner order, through the plugin's decode
hook, against transformers.

The order (SGLang's decode graph runner with the Ascend mamba backend): ``init_cuda_graph_state``
once; for the capture size, ``init_forward_metadata_out_graph(view, in_capture=True)`` and then
the captured part (``init_forward_metadata_in_graph`` + the model forward) on a dummy batch; each
replay refills the static buffers through ``init_forward_metadata_out_graph`` on a replay view of
the live batch padded to the capture size (the Ascend backend gives padded requests slot 0 and
length 0) and runs the captured part again (on a CPU there is no graph to replay: the forward
runs again on the same buffers).  Inside the captured part every call of the decode hook is
watched: no host sync, the same aten op sequence on the same static storages (the pool, the
slot-index and ``query_start_loc`` buffers) as at capture, and no pool slot changes but those of
the live requests.
"""

from __future__ import annotations

import contextlib
import functools
from types import SimpleNamespace as NS

import pytest
import torch

from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.gdn import decode
from tests.e2e import device, harness
from tests.e2e.runner import run_family
from tests.support.op_log import StaticOpLog
from tests.support.release_subset import older_releases_run
from tests.support.sync_counter import SyncCounter

CAPTURE_BS = 4
STEPS = (("A", "B", "C"), ("A", "C"), ("A", "B", "C"), ("B",), ("A", "B", "C"), ("A", "B"))


class _HookWatch:
    """Wraps the serving decode ladder: per hook call, the host syncs and the op log (device kernels
    are one launch each: their CPU emulators' own ops are not the caller's)."""

    def __init__(self, static_fn):
        self.static_fn = static_fn
        self.calls = []   # (syncs, ops)

    def __call__(self, real):
        def watched(call, backend="auto"):
            with SyncCounter(device_of_interest="cpu") as syncs, StaticOpLog(self.static_fn()) as log:
                out = real(call, backend)
            self.calls.append((syncs.total, log.ops))
            return out

        return watched


def _opaque_emulators(ctx_factory):
    @contextlib.contextmanager
    def ctx():
        from torch.utils._python_dispatch import _disable_current_modes

        with ctx_factory() as calls:
            launches = {}
            for name, fn in seam.installed_emulators().items():
                def launch(*a, _fn=fn, **k):
                    with _disable_current_modes():
                        return _fn(*a, **k)
                launches[name] = launch
            with seam.install_emulators(launches):
                yield calls

    return ctx


def _batch(sched, reqs, fill_req_row: int = 0):
    """The live decode batch padded to CAPTURE_BS (padding: request-pool row 0, one KV token at the
    reserved location 0), and the replay view the mamba backend reads (padded seq_lens = its fill value)."""
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

    ids, pos, locs, seq, rows = [], [], [], [], []
    for req in reqs:
        p = req.done
        sched.pool.req_to_token[req.row, p] = sched._loc(req, p)
        ids.append(req.tokens[p])
        pos.append(p)
        locs.append(sched._loc(req, p))
        seq.append(p + 1)
        rows.append(req.row)
    pad = CAPTURE_BS - len(reqs)
    ids, pos, locs = ids + [0] * pad, pos + [0] * pad, locs + [0] * pad
    seq, rows = seq + [1] * pad, rows + [fill_req_row] * pad
    fb = ForwardBatch(
        forward_mode=ForwardMode.DECODE, batch_size=CAPTURE_BS, input_ids=torch.tensor(ids, dtype=torch.int64),
        req_pool_indices=torch.tensor(rows, dtype=torch.int64), seq_lens=torch.tensor(seq, dtype=torch.int64),
        seq_lens_cpu=torch.tensor(seq, dtype=torch.int64), out_cache_loc=torch.tensor(locs, dtype=torch.int64),
        seq_lens_sum=sum(seq), positions=torch.tensor(pos, dtype=torch.int64))
    return fb, pad


def _view(fb, linear, pad):
    fill = linear.get_cuda_graph_seq_len_fill_value()
    seq_cpu = fb.seq_lens_cpu.clone()
    if pad:
        seq_cpu[-pad:] = fill
    return NS(batch_size=fb.batch_size, forward_mode=fb.forward_mode, actual_forward_mode=fb.forward_mode,
              req_pool_indices=fb.req_pool_indices.clone(), seq_lens=fb.seq_lens, seq_lens_cpu=seq_cpu,
              spec_info=None, num_padding=pad, mamba_track_indices=None, out_cache_loc=fb.out_cache_loc)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8)


def _forward(engine, fb):
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
    from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

    fb.capture_hidden_mode = CaptureHiddenMode.NULL
    fb.req_to_token_pool = engine.req_to_token_pool
    fb.token_to_kv_pool = engine.token_to_kv_pool
    fb.attn_backend = engine.backend
    engine.backend.full_attn_backend.init_forward_metadata(fb)
    with seam.capture_region():   # the captured part
        engine.backend.linear_attn_backend.init_forward_metadata_in_graph(fb)
        with forward_context(ForwardContext(attn_backend=engine.backend)):
            return engine.model.forward(fb.input_ids, fb.positions, fb).next_token_logits


def run_graph_plan(engine, watch_box: dict):
    sched = harness.Scheduler(engine)
    plan = harness.StepPlan()
    reqs = {n: sched.admit(harness.Request(n, list(p), r, s))
            for n, p, r, s in zip("ABC", plan.prompts, plan.rows, plan.slots)}
    a, b, c = reqs["A"], reqs["B"], reqs["C"]
    sched.extend([(a, plan.first_chunk)])
    sched.extend([(a, len(a.prompt) - plan.first_chunk), (b, len(b.prompt)), (c, len(c.prompt))])
    linear = engine.backend.linear_attn_backend
    linear.init_cuda_graph_state(CAPTURE_BS, CAPTURE_BS)
    temporal = engine.req_to_token_pool.mamba_pool.mamba_cache.temporal
    watch_box["static"] = lambda: [temporal, linear.state_indices_list[CAPTURE_BS - 1],
                                   linear.query_start_loc_list[CAPTURE_BS - 1]]
    # capture: a dummy batch of request-pool row 0 (what SGLang's runner captures with)
    fb, _ = _batch(sched, [])
    linear.init_forward_metadata_out_graph(_view(fb, linear, 0), in_capture=True)
    _forward(engine, fb)
    watch_box["captured"] = len(watch_box["watch"].calls)
    leaks = []
    for names in STEPS:
        live = [reqs[n] for n in names]
        fb, pad = _batch(sched, live)
        linear.init_forward_metadata_out_graph(_view(fb, linear, pad), in_capture=False)
        before = temporal.clone()
        logits = _forward(engine, fb).float()
        changed = {s for s in range(temporal.shape[1])  # bit patterns: a NaN left in slot 0 equals itself
                   if not torch.equal(_bits(temporal[:, s]), _bits(before[:, s]))}
        leaks.append(changed - {r.slot for r in live})
        for req, row in zip(live, logits):
            req.done += 1
            req.logits.append(row.clone())
            req.generated.append(int(row.argmax()))
    return list(reqs.values()), leaks


GDN_LAYERS = 3  # of the tiny Qwen3.5
SLOT_INDEX_BUFFER = 1  # position of the captured slot-index buffer in the watched static tensors


def _graph_run(layout, ssm_dtype, breakage=None):
    box: dict = {}
    watch = _HookWatch(lambda: box["static"]())
    box["watch"] = watch
    dev = _opaque_emulators(functools.partial(device.npu_emulators, decode_layout=layout))

    def patch(mp):
        mp.setattr(decode, "run_decode", watch(decode.run_decode))
        if breakage is not None:
            breakage(mp)

    holder = {}

    def plan_runner(engine, plan):
        reqs, leaks = run_graph_plan(engine, box)
        holder["leaks"] = leaks
        return reqs

    run = run_family("qwen3_5", dtype=torch.bfloat16, device=dev, ssm_dtype=ssm_dtype, breakage=patch,
                     plan_runner=plan_runner)
    return run, watch, box["captured"], holder["leaks"]


# older releases: the value-first route through SGLang's own Triton decode kernel (for CI time)
@pytest.mark.parametrize("layout,ssm_dtype,rung", older_releases_run([
    pytest.param("value_first", torch.float32, "triton_decode", id="value_first-fp32"),
    pytest.param("key_first", torch.bfloat16, "npu_recurrent", id="key_first-bf16"),
    pytest.param("key_first", torch.float32, "torch", id="key_first-fp32")], keep=(0,)))
def test_graph_runner_decode_matches_transformers_without_syncs(layout, ssm_dtype, rung):
    run, watch, captured, leaks = _graph_run(layout, ssm_dtype)
    cmp = run.compare()
    assert cmp.bf16_ok(), str(cmp)
    assert f"runs on the {rung} kernel" in run.log_text()
    assert captured == GDN_LAYERS                       # one hook call per GDN layer at capture
    assert len(watch.calls) == GDN_LAYERS * (1 + len(STEPS))
    capture_ops = [ops for _, ops in watch.calls[:captured]]
    assert all(s == 0 for s, _ in watch.calls), [s for s, _ in watch.calls]
    for step in range(len(STEPS)):
        replay = [ops for _, ops in watch.calls[captured * (step + 1):captured * (step + 2)]]
        assert replay == capture_ops, f"replay {step} differs from the capture"
    assert all(not leak for leak in leaks), leaks       # only live requests' slots changed
    assert any(SLOT_INDEX_BUFFER in where for ops in capture_ops for _, where in ops)  # the buffer is read


def _fresh_slot_indices(mp):
    """Breakage: the hook hands the ladder a fresh copy of the slot indices (not the captured buffer)."""
    real = decode.DecodeCall

    def fresh(q, k, v, a, b, A_log, dt_bias, pool, cache_indices, *rest, **kw):
        return real(q, k, v, a, b, A_log, dt_bias, pool, cache_indices.clone(), *rest, **kw)

    mp.setattr(decode, "DecodeCall", fresh)


def test_negative_control_fresh_slot_indices_are_caught_by_the_replay_check():
    """With the breakage the captured slot-index buffer is never read by the hook: a device graph
    would replay the indices of the capture forever; the storage check sees it."""
    _, watch, captured, _ = _graph_run("key_first", torch.float32, breakage=_fresh_slot_indices)
    capture_ops = [ops for _, ops in watch.calls[:captured]]
    assert not any(SLOT_INDEX_BUFFER in where for ops in capture_ops for _, where in ops)
