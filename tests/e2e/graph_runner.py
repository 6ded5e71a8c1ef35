"""SGLang's NPU decode graph runner, in its order, over a whole model on a CPU.

The order is ``NPUGraphRunner`` / ``DecodeCudaGraphRunner``'s (``hardware_backend/npu/graph_runner/
npu_graph_runner.py`` and ``model_executor/runner/decode_cuda_graph_runner.py``; the same order in
every tested SGLang release):

* construction: ``init_cuda_graph_state(max_bs, max_num_token)``, then the static input buffers:
  SGLang's own decode buffer registry (``build_decode_registry``, cache locations int32 as the NPU
  runner's ``_cache_loc_dtype``), seq-len fill value the backend's ``get_cuda_graph_seq_len_fill_value``;
* capture: ``seq_lens`` / ``seq_lens_cpu`` filled with the fill value and the index buffers zeroed
  (``reset_index_buffers``); per capture size, largest first, a dummy ``ForwardBatch`` over the
  buffers' slices (``capture_prepare``), ``init_forward_metadata_out_graph(fb, in_capture=True)``,
  then ``run_once`` twice as warm-ups (``NPUCudaGraphBackend.capture_one``) and once captured:
  ``init_forward_metadata_in_graph`` + the model forward;
* replay of a live batch: padded to the next capture size (``_pad_to_bucket``), the buffers
  refilled by the registry's ``fill_from`` (the padded tail by its padding policy: row 0, location
  0, seq len = the fill value), ``build_replay_fb_view`` (SGLang's), ``init_forward_metadata_out_graph``
  on that view, then the captured part again.  A CPU has no graph: "replay" runs ``run_once`` again
  on the captured batch, whose tensors are the static buffers.

The full-attention layers run on ``TorchNativeAttnBackend`` (the harness's stand-in for the Ascend
attention backend, which has no CPU path): its eager metadata is built inside ``run_once``.

What is watched (:class:`Watch`): the parts the plugin serves inside the captured region (the
linear backend's ``init_forward_metadata_in_graph`` and the family's ``watched`` calls: the GDN
decode hook, LFM2's short-conv mixer).  Per watched call: host syncs (:mod:`tests.support.sync_counter`),
the aten op sequence with the storage each tensor argument lives in (:class:`ProducerOpLog`): a
static buffer (pool, graph buffers, input buffers, weights), a temporary made inside the captured
region (``"tmp"``), or ``"ext"``: made outside the captured region and not static, which a device
graph would freeze at its capture-time value.
"""

from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass, field
from types import SimpleNamespace as NS
from typing import Callable, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from sglang_ascend_hybrid.ops import seam
from tests.support.op_log import StaticOpLog
from tests.support.sync_counter import SyncCounter

CAPTURE_BS = (1, 2, 4)
# live requests per decode step: padded 3 -> 4, exact 2 and 1
STEPS = (("A", "B", "C"), ("A", "C"), ("A", "B", "C"), ("B",), ("A", "B", "C"), ("A", "B"))
BUFFER_NAMES = ("input_ids", "positions", "out_cache_loc", "req_pool_indices", "seq_lens", "seq_lens_cpu")


# --------------------------------------------------------------------------- watching


class _Producers(TorchDispatchMode):
    """Over the whole captured region: the storages its ops produce (a device graph's private pool)."""

    active: Optional["_Producers"] = None

    def __init__(self):
        super().__init__()
        self.made: set = set()

    def note(self, out) -> None:
        for t in (out if isinstance(out, (tuple, list)) else (out,)):
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                self.made.add(t.untyped_storage().data_ptr())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.note(out)
        return out

    def __enter__(self):
        _Producers.active = self
        return super().__enter__()

    def __exit__(self, *exc):
        _Producers.active = None
        return super().__exit__(*exc)


class ProducerOpLog(StaticOpLog):
    """:class:`tests.support.op_log.StaticOpLog` whose non-static tensors are ``"tmp"`` when the captured
    region made them and ``"ext"`` when they came from outside it.  A device kernel launched through
    the seam (:func:`opaque_emulators`) is one entry, ``launch <op>``, with its tensor arguments."""

    active: Optional["ProducerOpLog"] = None

    def record(self, name: str, args, kwargs) -> None:
        made = _Producers.active.made if _Producers.active is not None else set()

        def where(t):
            storage = t.untyped_storage()
            if not storage.nbytes():
                return "empty"  # no data a graph could freeze (LFM2's zero-size SSM pool)
            ptr = storage.data_ptr()
            return self.static.get(ptr, "tmp" if ptr in made else "ext")

        flat = [x for a in list(args) + list(kwargs.values())
                for x in (a if isinstance(a, (list, tuple)) else (a,))]
        self.ops.append((name, tuple(where(t) for t in flat
                                     if isinstance(t, torch.Tensor) and t.device.type != "meta")))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.record(str(func), args, kwargs)
        return func(*args, **kwargs)

    def __enter__(self):
        self._outer, ProducerOpLog.active = ProducerOpLog.active, self
        return super().__enter__()

    def __exit__(self, *exc):
        ProducerOpLog.active = self._outer
        return super().__exit__(*exc)


@dataclass
class Call:
    part: str
    phase: str  # "warmup", "capture", "replay"
    bs: int
    syncs: int
    ops: list
    replay: Optional[int] = None  # the n-th replay (phase "replay")


@dataclass
class Watch:
    static: list = field(default_factory=list)  # tensors whose storage is graph-static, by index
    labels: dict = field(default_factory=dict)  # label -> index in static
    calls: list = field(default_factory=list)
    phase: str = "eager"
    bs: int = 0

    def wrap(self, part: str, fn: Callable) -> Callable:
        def watched(*args, **kwargs):
            if self.phase == "eager":
                return fn(*args, **kwargs)
            with SyncCounter(device_of_interest="cpu") as syncs, ProducerOpLog(self.static) as log:
                out = fn(*args, **kwargs)
            self.calls.append(Call(part, self.phase, self.bs, syncs.total, log.ops))
            return out

        return watched

    def of(self, phase: str, bs: Optional[int] = None, index: Optional[int] = None) -> list:
        """The watched calls of a phase (and capture size; ``index``: the n-th replay)."""
        calls = [c for c in self.calls if c.phase == phase and (bs is None or c.bs == bs)]
        return calls if index is None else [c for c in calls if c.replay == index]


def opaque_emulators(ctx_factory):
    """The device emulators behind the seam as one launch each: their own aten ops are not the
    caller's (a kernel on the device), their outputs are temporaries of the captured region."""
    @contextlib.contextmanager
    def ctx():
        from torch.utils._python_dispatch import _disable_current_modes

        with ctx_factory() as calls:
            launches = {}
            for name, fn in seam.installed_emulators().items():
                def launch(*a, _fn=fn, _name=name, **k):
                    producers, log = _Producers.active, ProducerOpLog.active
                    if log is not None:
                        log.record(f"launch {_name}", a, k)
                    with _disable_current_modes():
                        out = _fn(*a, **k)
                    if producers is not None:
                        producers.note(out)
                    return out
                launches[name] = launch
            with seam.install_emulators(launches):
                yield calls

    return ctx


# --------------------------------------------------------------------------- the runner


def _kwargs_for(fn, **candidates):
    params = inspect.signature(fn).parameters
    return {k: v for k, v in candidates.items() if k in params}


class GraphRunner:
    def __init__(self, engine, watch: Watch, capture_bs=CAPTURE_BS, track: bool = False):
        from sglang.srt.model_executor.cuda_graph_buffer_registry import build_decode_registry

        self.engine, self.watch = engine, watch
        self.linear = engine.backend.linear_attn_backend
        self.capture_bs = tuple(sorted(capture_bs))
        self.max_bs = self.capture_bs[-1]
        self.fill = self.linear.get_cuda_graph_seq_len_fill_value()
        self.linear.init_cuda_graph_state(self.max_bs, self.max_bs)
        self.registry = build_decode_registry(**_kwargs_for(
            build_decode_registry, device=torch.device("cpu"), max_bs=self.max_bs, max_num_token=self.max_bs,
            seq_len_fill_value=self.fill, cache_loc_dtype=torch.int32, share_pool=False, enable_mamba_track=track))
        self.track = track
        self.buffers = NS(encoder_lens=None, mamba_track_indices=None,
                          **{n: self.registry.get_slot(n).buffer for n in BUFFER_NAMES})
        if track:  # SGLang's decode registry slots of the radix-cache tracking (extra_buffer)
            self.buffers.mamba_track_indices = self.registry.get_slot("mamba_track_indices").buffer
            self.buffers.mamba_track_mask = self.registry.get_slot("mamba_track_mask").buffer
        self.captured: dict = {}  # bs -> the captured ForwardBatch
        self.replays = 0
        self._register_static()

    def _register_static(self) -> None:
        """Graph-static storages: the pools, the input buffers, the backends' graph buffers, the weights."""
        w, linear = self.watch, self.linear
        cache = self.engine.req_to_token_pool.mamba_pool.mamba_cache

        def add(label, t):  # (an empty tensor has no storage to tell apart: "empty" in the log)
            if isinstance(t, torch.Tensor) and t.untyped_storage().nbytes() and label not in w.labels:
                w.labels[label] = len(w.static)
                w.static.append(t)

        add("ssm_pool", cache.temporal)
        for i, c in enumerate(cache.conv):
            add(f"conv_pool{i}", c)
        for bs in self.capture_bs:
            add(f"state_indices[{bs}]", linear.state_indices_list[bs - 1])
            add(f"query_start_loc[{bs}]", linear.query_start_loc_list[bs - 1])
        add("slot_index_buffer", getattr(linear, "_cache_indices_buf", None))  # the short-conv sidecar's
        for name in BUFFER_NAMES + (("mamba_track_indices", "mamba_track_mask") if self.track else ()):
            add(name, getattr(self.buffers, name))
        kv = self.engine.token_to_kv_pool
        for i, (k, v) in enumerate(zip(kv.k_buffer, kv.v_buffer)):
            add(f"k{i}", k)
            add(f"v{i}", v)
        add("req_to_token", self.engine.req_to_token_pool.req_to_token)
        for name, t in list(self.engine.model.named_parameters()) + list(self.engine.model.named_buffers()):
            add(name, t)

    # ----------------------------------------------------------------- capture

    def _capture_fb(self, bs: int):
        from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

        names = BUFFER_NAMES + (("mamba_track_indices", "mamba_track_mask") if self.track else ())
        s = {n: self.registry.get_slot(n).slice_for(bs, bs) for n in names}
        return ForwardBatch(forward_mode=ForwardMode.DECODE, batch_size=bs, input_ids=s["input_ids"],
                            req_pool_indices=s["req_pool_indices"], seq_lens=s["seq_lens"],
                            seq_lens_cpu=s["seq_lens_cpu"], out_cache_loc=s["out_cache_loc"],
                            positions=s["positions"], seq_lens_sum=int(s["seq_lens_cpu"].sum()),
                            orig_seq_lens=s["seq_lens"], mamba_track_indices=s.get("mamba_track_indices"),
                            mamba_track_mask=s.get("mamba_track_mask"))

    def run_once(self, fb, phase: str, bs: int):
        """The captured part: the linear backend's in-graph metadata and the model forward."""
        from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
        from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

        e = self.engine
        fb.capture_hidden_mode = CaptureHiddenMode.NULL
        fb.req_to_token_pool, fb.token_to_kv_pool, fb.attn_backend = e.req_to_token_pool, e.token_to_kv_pool, e.backend
        e.backend.full_attn_backend.init_forward_metadata(fb)  # the full-attention stand-in, eager
        self.watch.phase, self.watch.bs = phase, bs
        region = seam.capture_region() if phase != "warmup" else contextlib.nullcontext()
        try:
            with region, _Producers():
                self.watch.wrap("in_graph", self.linear.init_forward_metadata_in_graph)(fb)
                with forward_context(ForwardContext(attn_backend=e.backend)):
                    return e.model.forward(fb.input_ids, fb.positions, fb).next_token_logits
        finally:
            self.watch.phase = "eager"

    def capture(self) -> None:
        self.buffers.seq_lens.fill_(self.fill)
        self.buffers.seq_lens_cpu.fill_(self.fill)
        for name in ("positions", "out_cache_loc", "req_pool_indices") + (
                ("mamba_track_indices", "mamba_track_mask") if self.track else ()):
            getattr(self.buffers, name).zero_()
        for bs in reversed(self.capture_bs):
            fb = self._capture_fb(bs)
            self.linear.init_forward_metadata_out_graph(fb, in_capture=True)
            for _ in range(2):
                self.run_once(fb, "warmup", bs)
            self.run_once(fb, "capture", bs)
            self.captured[bs] = fb

    # ----------------------------------------------------------------- replay

    def replay(self, live_fb):
        """Decode the live batch ``live_fb`` through the captured batch of its padded size."""
        from sglang.srt.model_executor.runner.decode_cuda_graph_runner import build_replay_fb_view

        raw_bs = live_fb.batch_size
        bs = next(b for b in self.capture_bs if b >= raw_bs)
        self.registry.fill_from(live_fb, raw_bs=raw_bs, padded_bs=bs, raw_num_tokens=raw_bs, padded_num_tokens=bs)
        view = build_replay_fb_view(**_kwargs_for(
            build_replay_fb_view, forward_batch=live_fb, buffers=self.buffers, bs=bs, raw_bs=raw_bs,
            num_tokens=bs, global_num_tokens_cpu=None, seq_len_fill_value=self.fill,
            capture_forward_mode=self.captured[bs].forward_mode, is_encoder_decoder=False))
        self.linear.init_forward_metadata_out_graph(view)
        start = len(self.watch.calls)
        logits = self.run_once(self.captured[bs], "replay", bs)
        for c in self.watch.calls[start:]:
            c.replay = self.replays
        self.replays += 1
        return logits[:raw_bs], bs


# --------------------------------------------------------------------------- the plan


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8)


def _slot_rows(pools) -> list:
    """Per pool tensor ``[layers, slots, ...]``: a copy, to tell which slots a replay changed."""
    return [p.clone() for p in pools]


def _changed_slots(pools, before) -> set:
    return {s for p, b in zip(pools, before) for s in range(p.shape[1])
            if not torch.equal(_bits(p[:, s]), _bits(b[:, s]))}  # bit patterns: a NaN equals itself


@dataclass
class GraphRun:
    reqs: list
    watch: Watch
    buckets: list  # per step: the capture size it replayed
    changed: list  # per step: the pool slots the replay changed
    live_slots: list  # per step: the live requests' slots (and the track slots the step writes)
    # (step, request) -> its slot's states after that step [temporal, *conv]
    tracked: dict = field(default_factory=dict)


def _decode_fb(sched, reqs):
    """The live decode batch of ``reqs`` as the scheduler hands it to the graph runner."""
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

    ids, pos, locs, seq = [], [], [], []
    for req in reqs:
        p = req.done
        sched.pool.req_to_token[req.row, p] = sched._loc(req, p)
        ids.append(req.tokens[p])
        pos.append(p)
        locs.append(sched._loc(req, p))
        seq.append(p + 1)
    return ForwardBatch(
        forward_mode=ForwardMode.DECODE, batch_size=len(reqs), input_ids=torch.tensor(ids, dtype=torch.int64),
        req_pool_indices=torch.tensor([r.row for r in reqs], dtype=torch.int64),
        seq_lens=torch.tensor(seq, dtype=torch.int64), seq_lens_cpu=torch.tensor(seq, dtype=torch.int64),
        out_cache_loc=torch.tensor(locs, dtype=torch.int32), seq_lens_sum=sum(seq),
        positions=torch.tensor(pos, dtype=torch.int64))


def _prefill(engine, plan):
    from tests.e2e import harness

    sched = harness.Scheduler(engine)
    reqs = {n: sched.admit(harness.Request(n, list(p), r, s))
            for n, p, r, s in zip("ABC", plan.prompts, plan.rows, plan.slots)}
    a, b, c = reqs["A"], reqs["B"], reqs["C"]
    sched.extend([(a, plan.first_chunk)])
    sched.extend([(a, len(a.prompt) - plan.first_chunk), (b, len(b.prompt)), (c, len(c.prompt))])
    return sched, reqs


def run_graph_plan(engine, watch: Watch, steps=STEPS, track=None) -> GraphRun:
    """The harness's prefill (a chunked prefill of A, then A's continuation with B and C, eager),
    the capture, then one replay per step of ``steps`` (the live requests of each step).
    ``track`` = {step: {request: track slot}}: the radix-cache tracking the scheduler asks of those
    decode steps (``mamba_track_mask`` / ``_indices`` of the live batch; the runner's registry then
    has SGLang's track slots)."""
    from tests.e2e import harness

    sched, reqs = _prefill(engine, harness.StepPlan())
    runner = GraphRunner(engine, watch, track=track is not None)
    runner.capture()
    cache = engine.req_to_token_pool.mamba_pool.mamba_cache
    pools = [cache.temporal, *cache.conv]
    buckets, changed, live_slots, tracked = [], [], [], {}
    for step, names in enumerate(steps):
        live = [reqs[n] for n in names]
        before = _slot_rows(pools)
        fb = _decode_fb(sched, live)
        marks = (track or {}).get(step, {})
        if track is not None:
            fb.mamba_track_mask = torch.tensor([r.name in marks for r in live])
            fb.mamba_track_indices = torch.tensor([marks.get(r.name, 0) for r in live], dtype=torch.int64)
        logits, bs = runner.replay(fb)
        buckets.append(bs)
        changed.append(_changed_slots(pools, before))
        live_slots.append({r.slot for r in live} | set(marks.values()))
        for name in marks:
            tracked[(step, name)] = [p[:, reqs[name].slot].clone() for p in pools]  # temporal, *conv
        for req, row in zip(live, logits.float()):
            req.done += 1
            req.logits.append(row.clone())
            req.generated.append(int(row.argmax()))
    return GraphRun(list(reqs.values()), watch, buckets, changed, live_slots, tracked)


def run_eager_plan(engine, steps=STEPS) -> list:
    """The same prefill and decode steps, eager (``init_forward_metadata`` per batch, no padding)."""
    from tests.e2e import harness

    sched, reqs = _prefill(engine, harness.StepPlan())
    for names in steps:
        sched.decode([reqs[n] for n in names])
    return list(reqs.values())


# --------------------------------------------------------------------------- the checks


def replay_problems(run: GraphRun, slot_buffer: str, part: str, pad_slots=frozenset()) -> list:
    """Why this graph run would not replay on a device (empty: it would).  ``slot_buffer``: the
    static buffer the watched ``part`` must read its slot indices from (``{bs}``: the capture size);
    ``pad_slots``: pool slots padded requests may write (besides the live requests')."""
    w, problems = run.watch, []
    names = {i: label for label, i in w.labels.items()}
    for c in w.calls:
        if c.phase in ("capture", "replay") and c.syncs:
            problems.append(f"{c.part} ({c.phase}, bs {c.bs}): {c.syncs} host syncs")
        if c.phase in ("capture", "replay") and any("ext" in where for _, where in c.ops):
            ext = sorted({op for op, where in c.ops if "ext" in where})
            problems.append(f"{c.part} ({c.phase}, bs {c.bs}) reads tensors made outside the graph: {ext}")
    for bs in sorted({c.bs for c in w.calls}):
        captured = [(c.part, c.ops) for c in w.of("capture", bs)]
        buffer = slot_buffer.format(bs=bs)
        if not any(w.labels[buffer] in where for p, ops in captured if p == part for _, where in ops):
            problems.append(f"{part} (capture, bs {bs}) never reads {buffer}")
        for n in sorted({c.replay for c in w.of("replay", bs)}):
            replay = [(c.part, c.ops) for c in w.of("replay", bs, n)]
            if replay != captured:
                problems.append(f"replay {n} (bs {bs}): not the captured op sequence on the captured storage"
                                f"{_first_difference(captured, replay, names)}")
    for step, (changed, live) in enumerate(zip(run.changed, run.live_slots)):
        if changed - live - set(pad_slots):
            problems.append(f"step {step}: slots {sorted(changed - live - set(pad_slots))} changed, "
                            f"live {sorted(live)}")
    return problems


def _first_difference(captured, replay, names) -> str:
    def show(where):
        return tuple(names.get(x, x) for x in where)

    if len(captured) != len(replay):
        return f": {len(replay)} watched calls, {len(captured)} at capture"
    for (part, ops), (_, ops2) in zip(captured, replay):
        for i, (a, b) in enumerate(zip(ops, ops2)):
            if a != b:
                return f": {part} op {i} {a[0]} on {show(a[1])} at capture, {b[0]} on {show(b[1])} at replay"
        if len(ops) != len(ops2):
            return f": {part} ran {len(ops2)} ops, {len(ops)} at capture"
    return ""
