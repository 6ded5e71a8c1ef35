"""``torch.npu`` of the emulated Ascend device: the names SGLang, the plugin and transformers read.

Everything runs on the CPU: streams and events are ordered by construction (one host thread
per stream), ``synchronize`` has nothing to wait for, and memory figures are fixed.

Graphs: :class:`NPUGraph` records the function SGLang's capture runs inside ``torch.npu.graph(...)``
(``NPUCudaGraphBackend.capture_one``'s ``forward_fn``, 0.5.23; ``_capture_graph``'s ``run_once_fn``
in ``hardware_backend/npu/graph_runner/``) and re-runs it at every ``replay()``, copying the fresh
outputs into the tensors the capture returned.  With ``auto_dispatch_capture=True`` it also records
the calls of the ops torch_npu's graph handlers can update (FIA, paged attention), and
``update(cpu_update_input=...)`` rebinds their KV lengths the way torch_npu does; a replayed call of
such an op waits for that update and runs with the rebound lengths.

What this can show: that SGLang's graph runner captures, pads and replays decode batches on the
plugin's backends; that everything the replay reads lives in the static buffers the capture bound
(a replay re-runs on the capture's tensors, so an input copied anywhere else is missed, as on a
device); that the attention KV lengths reach the kernel only through ``graph.update`` (the forward's
own host-side list stays the capture-time one, as on a device); that outputs are read from the
captured buffers.  What it cannot show: a replay re-runs Python, so host-side work inside the forward
(Python branches, ``.tolist()``, ``.item()``, fresh allocations, a plugin's Python dispatch between
rungs) is redone at every replay with the current values, where a device graph would have frozen the
capture-time result: a forward that only works because it recomputes a host value per step passes
here and fails on a device.  Nor does it show device timing, graph memory pools or capture-unsafe
operations (syncs, allocations during capture).
The device name is an Atlas A3 chip (``Ascend910_9391``), which the plugin's seam classifies as A3.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import threading
from types import SimpleNamespace
from typing import Callable, Optional

import torch

DEVICE_NAME = "Ascend910_9391"
TOTAL_MEMORY = 64 * 1024**3  # an Atlas A3 die's HBM, as torch_npu reports it
# What mem_get_info reports free: small on purpose, so SGLang sizes its pools modestly when the
# caller does not cap them (a CPU process cannot use 64 GiB of "device" memory).
FREE_MEMORY = 8 * 1024**3

# NPUs the machine reports, all backed by the same host memory: one per TP / DP rank SGLang starts
# (each rank's process calls set_device(its gpu_id)); tensors of every index are CPU tensors.
DEVICE_COUNT = 8

_state = threading.local()
_current_device = 0


# --------------------------------------------------------------------------- device


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return True


def _is_in_bad_fork() -> bool:
    return False


def init() -> None:
    return None


def device_count() -> int:
    return DEVICE_COUNT


def current_device() -> int:
    return _current_device


def set_device(device) -> None:
    global _current_device
    index = device.index if isinstance(device, torch.device) else device
    if isinstance(index, str):
        index = torch.device(index).index
    index = 0 if index is None else int(index)
    if not 0 <= index < DEVICE_COUNT:
        raise ValueError(f"set_device: device={device!r}: the emulated machine has NPUs 0 .. {DEVICE_COUNT - 1}")
    _current_device = index


def get_device_name(device=None) -> str:
    return DEVICE_NAME


def get_device_properties(device=None):
    return SimpleNamespace(name=DEVICE_NAME, total_memory=TOTAL_MEMORY, major=9, minor=3,
                           multi_processor_count=24, cube_core_num=24, vector_core_num=48)


def get_device_capability(device=None) -> tuple[int, int]:
    return (9, 3)


def synchronize(device=None) -> None:
    return None


def empty_cache() -> None:
    return None


def mem_get_info(device=None) -> tuple[int, int]:
    return (FREE_MEMORY, TOTAL_MEMORY)


def memory_allocated(device=None) -> int:
    return 0


def max_memory_allocated(device=None) -> int:
    return 0


def memory_reserved(device=None) -> int:
    return 0


def max_memory_reserved(device=None) -> int:
    return 0


def reset_peak_memory_stats(device=None) -> None:
    return None


def memory_stats(device=None) -> dict:
    return {"allocated_bytes.all.current": 0, "reserved_bytes.all.current": 0}


# "npu" tensors draw from the CPU generator, which torch.manual_seed seeds (and torch.manual_seed
# calls these for the registered PrivateUse1 module: seeding the CPU generator here would recurse).
def manual_seed(seed: int) -> None:
    return None


def manual_seed_all(seed: int) -> None:
    return None


def seed() -> None:
    return None


def initial_seed() -> int:
    return torch.initial_seed()


def set_compile_mode(jit_compile: bool = False) -> None:
    return None


def is_bf16_supported() -> bool:
    return True


def get_rng_state(device=None):
    return torch.get_rng_state()


def set_rng_state(state, device=None) -> None:
    torch.set_rng_state(state)


config = SimpleNamespace(allow_internal_format=False)
utils = SimpleNamespace(get_device_name=get_device_name)


# --------------------------------------------------------------------------- streams and events


class Stream:
    """A stream: work on it runs at once, in order, on the host thread."""

    def __init__(self, device=None, priority: int = 0, **kwargs) -> None:
        self.device_index = _current_device if device is None else (torch.device(device).index or 0)
        self.priority = priority

    @property
    def device(self):
        return torch.device("npu", self.device_index)

    def synchronize(self) -> None:
        return None

    def wait_stream(self, other: "Stream") -> None:
        return None

    def wait_event(self, event: "Event") -> None:
        return None

    def record_event(self, event: Optional["Event"] = None) -> "Event":
        event = event or Event()
        event.record(self)
        return event

    def query(self) -> bool:
        return True

    def __eq__(self, other) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)


class Event:
    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        self._recorded = False

    def record(self, stream: Optional[Stream] = None) -> None:
        self._recorded = True

    def wait(self, stream: Optional[Stream] = None) -> None:
        return None

    def synchronize(self) -> None:
        return None

    def query(self) -> bool:
        return True

    def elapsed_time(self, end: "Event") -> float:
        return 0.0


_DEFAULT_STREAM: Optional[Stream] = None


def _default() -> Stream:
    global _DEFAULT_STREAM
    if _DEFAULT_STREAM is None:
        _DEFAULT_STREAM = Stream()
    return _DEFAULT_STREAM


def current_stream(device=None) -> Stream:
    stack = getattr(_state, "streams", None)
    return stack[-1] if stack else _default()


def default_stream(device=None) -> Stream:
    return _default()


def set_stream(stream: Stream) -> None:
    _state.streams = [stream]


class StreamContext:
    """``with torch.npu.stream(s):`` -- re-enterable (SGLang's scheduler re-enters its
    ``forward_stream_ctx``, ``managers/scheduler.py``)."""

    def __init__(self, stream: Optional[Stream]) -> None:
        self.stream = stream

    def __enter__(self):
        stack = getattr(_state, "streams", None)
        if stack is None:
            stack = _state.streams = []
        stack.append(self.stream or current_stream())
        return self.stream

    def __exit__(self, *exc) -> None:
        _state.streams.pop()


def stream(s: Optional[Stream]) -> StreamContext:
    return StreamContext(s)


# --------------------------------------------------------------------------- graphs

# The ops torch_npu's graph handlers record under ``auto_dispatch_capture`` and ``NPUGraph.update`` can
# rebind (torch_npu ``torch_npu/npu/_npugraph_handlers/ifa_handler.py`` and ``simple_handler.py``,
# Ascend/pytorch), with the parameter each handler's ``update_args`` also rebinds by position.
UPDATABLE_OPS = {
    "npu_fused_infer_attention_score": "actual_seq_lengths_kv",
    "npu_fused_infer_attention_score.out": "actual_seq_lengths_kv",
    "_npu_paged_attention": "context_lens",
}
# How long a replayed updatable op waits for the NPUGraph.update that releases it (a device would hang).
UPDATE_WAIT_S = 60.0


@dataclasses.dataclass
class _OpRecord:
    """One updatable op call a capture recorded (torch_npu's ``_GraphDispatchRecord``)."""

    op: str
    kwargs: dict
    released: threading.Event = dataclasses.field(default_factory=threading.Event)


class NPUGraph:
    """Records the function captured inside :func:`graph` and re-runs it at ``replay()``.

    With ``auto_dispatch_capture=True`` the capture also records each call of an op in
    :data:`UPDATABLE_OPS` (torch_npu's ``_GraphDispatchMode``); ``update(cpu_update_input)`` rebinds
    their arguments as torch_npu's ``update_capture_record`` does, and a replayed call of such an op
    waits for the update that releases it (the captured external event), then runs with the rebound
    arguments instead of those the re-run forward passes.
    """

    def __init__(self) -> None:
        self._replay: Optional[Callable[[], object]] = None
        self.auto_dispatch_capture = False
        self.records: list[_OpRecord] = []
        self.captures = 0
        self.replays = 0
        self.updates = 0

    def capture_begin(self, *args, **kwargs) -> None:
        self.records = []

    def capture_end(self) -> None:
        return None

    def set_replay(self, fn: Callable[[], object]) -> None:
        self._replay = fn
        self.captures += 1
        _count("captures")

    def replay(self) -> None:
        if self._replay is None:
            raise RuntimeError("NPUGraph.replay(): nothing was captured (the emulated device records the "
                               "function SGLang's graph runner runs inside torch.npu.graph)")
        self.replays += 1
        _count("replays")
        previous = getattr(_state, "replaying", None)
        _state.replaying = [self, 0]
        try:
            self._replay()
            if _state.replaying[1] != len(self.records):
                raise RuntimeError(f"emulated NPUGraph replay: the re-run forward called {_state.replaying[1]} "
                                   f"updatable ops, the capture recorded {len(self.records)}")
        finally:
            _state.replaying = previous

    def update(self, cpu_update_input=None, **kwargs) -> None:
        """torch_npu's ``NPUGraph.update`` / ``_GraphDispatchMode.update_capture_record`` (Ascend/pytorch
        ``torch_npu/npu/graphs.py``): needs ``auto_dispatch_capture``; one dict applies to every recorded
        op, otherwise one dict per recorded op; each key an op has is rebound; then the op is released."""
        if not self.auto_dispatch_capture:
            raise RuntimeError("NPUGraph.update: the graph was not captured with auto_dispatch_capture=True")
        updates = list(cpu_update_input or [])
        if len(updates) == 1:
            updates = [dict(updates[0]) for _ in self.records]
        if len(updates) != len(self.records):
            raise RuntimeError(f"NPUGraph.update: {len(self.records)} recorded ops, {len(updates)} inputs")
        for record, update in zip(self.records, updates):
            for key, value in update.items():
                if key in record.kwargs or key == UPDATABLE_OPS[record.op]:
                    record.kwargs[key] = value
            record.released.set()
        self.updates += 1
        _count("updates")

    def reset(self) -> None:
        self._replay = None
        self.records = []

    def pool(self):
        return ("emulated-npu-graph-pool", id(self))


def graph_op_arguments(op: str, kwargs: dict) -> dict:
    """The keyword arguments an op emulator runs with: ``kwargs`` outside graphs; recorded at a capture
    (for ops in :data:`UPDATABLE_OPS`); at a replay, the recorded call's arguments as the last
    ``NPUGraph.update`` rebound them, once that update released the call."""
    if op not in UPDATABLE_OPS:
        return kwargs
    capturing = getattr(_state, "capturing", None)
    replaying = getattr(_state, "replaying", None)
    if replaying is not None:
        npu_graph, index = replaying
        if not npu_graph.auto_dispatch_capture:
            return kwargs
        if index >= len(npu_graph.records) or npu_graph.records[index].op != op:
            raise RuntimeError(f"emulated NPUGraph replay: call {index} is {op}, the capture recorded "
                               f"{[r.op for r in npu_graph.records]}")
        record = npu_graph.records[index]
        replaying[1] += 1
        if not record.released.wait(UPDATE_WAIT_S):
            raise RuntimeError(f"emulated NPUGraph replay: {op} (recorded call {index}) waited {UPDATE_WAIT_S} s for "
                               "the NPUGraph.update that releases it (the captured event; a device would hang)")
        record.released.clear()
        key = UPDATABLE_OPS[op]  # the rebindable argument; the others are the re-run forward's (see the docstring)
        return {**kwargs, key: record.kwargs[key]} if key in record.kwargs else kwargs
    if capturing is not None and capturing.auto_dispatch_capture:
        capturing.records.append(_OpRecord(op, dict(kwargs)))
    return kwargs


# per-process counts of graph captures / replays / updates, for the records file (see :func:`_count`)
COUNTS = {"captures": 0, "replays": 0, "updates": 0}


def _count(what: str) -> None:
    COUNTS[what] += 1
    n = COUNTS[what]
    if what == "captures" or n & (n - 1) == 0:  # every capture; replays / updates at 1, 2, 4, 8, ...
        from sglang_ascend_hybrid.testing.emulated_npu import surface

        surface.record("npu-graph", what, count=n)


class graph:  # noqa: N801  (torch.npu.graph is a class used as a context manager)
    """``with torch.npu.graph(g, pool=..., stream=..., auto_dispatch_capture=...):`` -- the body runs
    once, eagerly; its updatable op calls are recorded when ``auto_dispatch_capture``."""

    def __init__(self, npu_graph: NPUGraph, pool=None, stream: Optional[Stream] = None,
                 capture_error_mode: str = "global", auto_dispatch_capture: bool = False, **kwargs) -> None:
        self.npu_graph = npu_graph
        self.stream_ctx = StreamContext(stream)
        npu_graph.auto_dispatch_capture = bool(auto_dispatch_capture)

    def __enter__(self):
        self.stream_ctx.__enter__()
        self.npu_graph.capture_begin()
        self._previous = getattr(_state, "capturing", None)
        _state.capturing = self.npu_graph
        return self.npu_graph

    def __exit__(self, *exc) -> None:
        _state.capturing = self._previous
        self.npu_graph.capture_end()
        self.stream_ctx.__exit__(*exc)
        if exc[0] is None:
            self.npu_graph.set_replay(_captured_replay(sys._getframe(1)))


# the local names of the function SGLang's capturing frame runs inside ``torch.npu.graph``:
# ``NPUCudaGraphBackend.capture_one`` (0.5.23: ``forward_fn``), ``NPUGraphRunner._capture_graph`` (``run_once_fn``)
_CAPTURED_FUNCTION_NAMES = ("forward_fn", "run_once_fn")


def _captured_replay(frame) -> Callable[[], None]:
    """What a replay re-runs: the function SGLang's capturing frame called inside the ``with`` (its
    local ``forward_fn`` / ``run_once_fn``), whose fresh outputs are copied into the tensors the capture
    returned (its local ``out``), as a replayed device graph writes its captured output buffers."""
    run = next((frame.f_locals[n] for n in _CAPTURED_FUNCTION_NAMES if n in frame.f_locals), None)
    captured = frame.f_locals.get("out")
    if run is None or captured is None:
        raise RuntimeError(
            f"emulated torch.npu.graph: the capturing frame {frame.f_code.co_name!r} "
            f"({frame.f_code.co_filename}:{frame.f_lineno}) has no local {' / '.join(_CAPTURED_FUNCTION_NAMES)} "
            "or 'out'; the graph stand-in follows SGLang's NPU graph capture and cannot replay this capture")

    context = _sglang_forward_context()

    def replay() -> None:
        with _forward_context_of_capture(context):
            copy_into(captured, run())

    return replay


_FORWARD_CONTEXT_MODULE = "sglang.srt.model_executor.forward_context"


def _sglang_forward_context():
    """SGLang's active ForwardContext (the attention backend the captured layers read), or None: a
    device graph freezes the backend its kernels were captured with; a re-run reads it again."""
    module = sys.modules.get(_FORWARD_CONTEXT_MODULE)
    return getattr(module, "_current", None) if module is not None else None


@contextlib.contextmanager
def _forward_context_of_capture(context):
    """Replay inside the ForwardContext that was active at capture when none is active now (SGLang's
    replays run outside any forward context: on a device nothing reads it)."""
    module = sys.modules.get(_FORWARD_CONTEXT_MODULE)
    if context is None or module is None or getattr(module, "_current", None) is not None:
        yield
        return
    previous = module.set_forward_context(context)
    try:
        yield
    finally:
        module.set_forward_context(previous)


def copy_into(dst, src) -> None:
    """Copy ``src``'s tensors into ``dst``'s, structure by structure (tensors, tuples / lists,
    dicts, dataclass-like objects); a mismatch of structure or shape is an error."""
    if isinstance(dst, torch.Tensor):
        if not isinstance(src, torch.Tensor) or src.shape != dst.shape:
            raise RuntimeError(f"emulated graph replay: output {getattr(src, 'shape', type(src))} does not match "
                               f"the captured {tuple(dst.shape)}")
        dst.copy_(src)
    elif isinstance(dst, (tuple, list)):
        for d, s in zip(dst, src, strict=True):
            copy_into(d, s)
    elif isinstance(dst, dict):
        for key, d in dst.items():
            copy_into(d, src[key])
    elif dataclasses.is_dataclass(dst):
        for field in dataclasses.fields(dst):
            d = getattr(dst, field.name)
            if d is not None:
                copy_into(d, getattr(src, field.name))
    elif hasattr(dst, "tensors"):  # SGLang's PPProxyTensors
        copy_into(dst.tensors, src.tensors)


def graph_pool_handle():
    return ("emulated-npu-graph-pool", 0)


def is_current_stream_capturing() -> bool:
    return getattr(_state, "capturing", None) is not None


# --------------------------------------------------------------------------- misc


class _Amp:
    @staticmethod
    def autocast(*args, **kwargs):
        return contextlib.nullcontext()


amp = _Amp()


def _lazy_init() -> None:
    return None
