"""Shared measurement harness of the benchmarks: side by side, interleaved, 1 and 2 threads.

Every benchmark of this directory measures *ratios* of methods run in one process:

* each repetition runs every method once, in an order rotated by the repetition number
  (load changes hit every method alike);
* the subject is also run a second time under another name (``<subject> (A/A)``): the
  ratio of the two copies shows the machine's noise in the same run;
* per thread count (``torch.set_num_threads``) the median and the minimum of each method
  are reported, and every goal is checked on both (a goal is met only when the ratio of
  medians and the ratio of minima both clear the bar);
* the CPU time *other* processes used while a table was measured is printed with it
  (machine busy time from ``/proc/stat`` minus this process's own CPU time, in cores): above
  :data:`QUIET_LOAD` cores the table is LOADED (its ratios are not a result), and an A/A
  ratio off by more than :data:`AA_TOLERANCE` marks it NOISY;
* at more than one thread a sync probe runs before and after the table (:func:`sync_probe`): a
  small parallel op (an in-place multiply of 1 MiB) timed at the table's thread count against 1
  thread.  On this VM the second vCPU goes through phases in which waking it for every parallel
  region costs much more (seen: 2-thread / 1-thread time of that op 0.58 in a good phase, 0.81 in
  a bad one); a method made of many mid-sized ops then runs up to 2.5x slower at 2 threads while
  big streaming ops do not, and other processes' CPU time does not show it.  Above
  :data:`SYNC_LIMIT` the table is marked SLOW-SYNC (its ratios are not a result).  So that a run
  still gives results, a table at more than one thread first waits for a good phase (probing every
  :data:`SYNC_POLL_S` seconds) and is measured again when its closing probe is slow, both within
  ``--sync-wait`` seconds per table (default :data:`SYNC_WAIT_S`; 0: measure as found); the
  table's notes say how long it waited and how often it was measured.

A goal is ``Goal(label, numerator, denominator, bar, at_least)``: the ratio is
``time(numerator) / time(denominator)`` and it must be ``>= bar`` (``at_least``) or
``<= bar``.  "Subject is 1.5x faster than the loop" is ``Goal(..., "loop", subject, 1.5)``.
A goal with ``difference=True`` compares ``time(numerator) - time(denominator)`` in seconds
instead (shown in microseconds): "the plugin adds at most 30 us to upstream's call" is
``Goal(..., "plugin", "upstream", 30e-6, at_least=False, difference=True)``; like a ratio it is
checked on the medians and on the minima.

:func:`count_torch_ops` counts the ATen operators a call dispatches (a
``TorchDispatchMode``): the op count an NPU would pay as launches.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Sequence

import torch
from torch.utils._python_dispatch import TorchDispatchMode

QUIET_LOAD = 0.25     # cores used by other processes during a table above which it is not a result
SYNC_LIMIT = 0.70     # small parallel op at n threads / at 1 thread above which threads wake up slowly
AA_TOLERANCE = 0.05   # |A/A - 1| above which a table is marked noisy
SYNC_WAIT_S = 240.0   # default seconds a table may spend waiting out a slow-sync phase (--sync-wait)
SYNC_POLL_S = 10.0    # pause between sync probes while waiting
_sync_wait = [0.0]   # seconds per table; setup() sets it from --sync-wait (library use: measure as found)
MIN_REPS = 7


@dataclass(frozen=True)
class Goal:
    label: str
    numerator: str
    denominator: str
    bar: float
    at_least: bool = True
    difference: bool = False   # compare time(numerator) - time(denominator) (seconds), not their ratio

    def check(self, value: float) -> bool:
        return value >= self.bar if self.at_least else value <= self.bar

    def show(self, value: float) -> str:
        """A goal's value as printed: a ratio, or a difference in microseconds."""
        return f"{value * 1e6:.2f} us" if self.difference else f"{value:.3f}"

    def wording(self) -> str:
        op = "-" if self.difference else "/"
        bar = f"{self.bar * 1e6:g} us" if self.difference else f"{self.bar:g}"
        return f"{self.numerator} {op} {self.denominator} {'>=' if self.at_least else '<='} {bar}"


@dataclass
class Table:
    """One comparison at one thread count."""
    title: str
    threads: int
    reps: int
    others_load: float   # cores used by other processes while the table was measured
    times: dict[str, list[float]]
    goals: list[Goal]
    subject: str
    notes: list[str] = field(default_factory=list)
    sync_ratio: float = 0.0   # worst sync_probe of the table (0: one thread, not probed)

    def median(self, name: str) -> float:
        return statistics.median(self.times[name])

    def minimum(self, name: str) -> float:
        return min(self.times[name])

    def ratio(self, num: str, den: str) -> tuple[float, float]:
        return self.median(num) / self.median(den), self.minimum(num) / self.minimum(den)

    def difference(self, num: str, den: str) -> tuple[float, float]:
        """(median(num) - median(den), min(num) - min(den)) in seconds."""
        return self.median(num) - self.median(den), self.minimum(num) - self.minimum(den)

    @property
    def aa(self) -> tuple[float, float]:
        return self.ratio(aa_name(self.subject), self.subject)

    @property
    def noisy(self) -> bool:
        return any(abs(r - 1.0) > AA_TOLERANCE for r in self.aa)

    @property
    def slow_sync(self) -> bool:
        return self.sync_ratio > SYNC_LIMIT

    @property
    def loaded(self) -> bool:
        return not self.others_load <= QUIET_LOAD   # nan (no /proc/stat) counts as loaded

    def goal_results(self) -> list[tuple[Goal, float, float, bool]]:
        out = []
        for goal in self.goals:
            measure = self.difference if goal.difference else self.ratio
            med, mn = measure(goal.numerator, goal.denominator)
            out.append((goal, med, mn, goal.check(med) and goal.check(mn)))
        return out


def aa_name(subject: str) -> str:
    return f"{subject} (A/A)"


def sync_probe(threads: int, ops: int = 400) -> float:
    """Time of a small parallel op at ``threads`` threads / at 1 thread (minimum of 3 tries each)."""
    x = torch.ones(256, 1024)
    previous = torch.get_num_threads()

    def per_op(n: int) -> float:
        torch.set_num_threads(n)
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(ops):
                x.mul_(1.0)
            best = min(best, time.perf_counter() - t0)
        return best

    try:
        return per_op(threads) / per_op(1)
    finally:
        torch.set_num_threads(previous)


def _busy_seconds() -> float:
    """Seconds of CPU time the whole machine has been busy (all cores, /proc/stat)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)      # idle + iowait
    guest = sum(fields[8:10]) if len(fields) > 9 else 0           # already counted in user/nice
    return (sum(fields) - idle - guest) / os.sysconf("SC_CLK_TCK")


def _own_seconds(children: bool = False) -> float:
    t = os.times()
    return t.user + t.system + (t.children_user + t.children_system if children else 0.0)


class OthersLoad:
    """Cores used by other processes between construction and :meth:`cores`; with
    ``children=True`` this process's waited-for children count as its own (benchmarks whose
    subjects are child processes)."""

    def __init__(self, children: bool = False):
        try:
            self._busy = _busy_seconds()
        except (OSError, ValueError, IndexError):  # pragma: no cover - no /proc/stat
            self._busy = None
        self._children = children
        self._own, self._wall = _own_seconds(children), time.perf_counter()

    def cores(self) -> float:
        if self._busy is None:
            return float("nan")
        try:
            busy = _busy_seconds()
        except (OSError, ValueError, IndexError):  # pragma: no cover - /proc/stat gone
            return float("nan")
        wall = time.perf_counter() - self._wall
        others = (busy - self._busy) - (_own_seconds(self._children) - self._own)
        return max(others, 0.0) / max(wall, 1e-9)


def rotated(runs: list, rep: int) -> list:
    """The order of ``runs`` in repetition ``rep``: rotated by ``rep``, reversed every other
    repetition (each method once per repetition, no fixed position)."""
    shift = rep % len(runs)
    order = runs[shift:] + runs[:shift]
    return order[::-1] if rep % 2 else order


def measure(title: str, methods: Sequence[tuple[str, Callable[[], object]]], subject: str,
            goals: Sequence[Goal] = (), reps: int = MIN_REPS, threads: int = 1,
            warmup: int = 1, notes: Sequence[str] = ()) -> Table:
    """Time ``methods`` interleaved at ``threads`` threads; ``subject`` gets an A/A copy.

    At more than one thread, within ``--sync-wait`` seconds: wait until the sync probe is under
    :data:`SYNC_LIMIT` before measuring, and measure again when the closing probe is over it."""
    names = [n for n, _ in methods]
    if subject not in names:
        raise ValueError(f"subject={subject!r}: expected one of {names}")
    deadline = time.monotonic() + _sync_wait[0]
    waited, attempts = 0.0, 0
    while True:
        attempts += 1
        sync = sync_probe(threads) if threads > 1 else 0.0
        while sync > SYNC_LIMIT and time.monotonic() + SYNC_POLL_S <= deadline:
            time.sleep(SYNC_POLL_S)
            waited += SYNC_POLL_S
            sync = sync_probe(threads)
        table = _measure_once(title, methods, subject, goals, reps, threads, warmup, notes, sync)
        if not table.slow_sync or time.monotonic() >= deadline:
            break
    if waited or attempts > 1:
        table.notes.append(f"slow-sync phase: waited {waited:.0f} s for a good one, measured {attempts} time(s)")
    return table


def _measure_once(title, methods, subject, goals, reps, threads, warmup, notes, sync) -> Table:
    fns = dict(methods)
    runs = list(methods) + [(aa_name(subject), fns[subject])]
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for _ in range(warmup):
            for _, fn in runs:
                fn()
        times: dict[str, list[float]] = {n: [] for n, _ in runs}
        others = OthersLoad()
        for rep in range(reps):
            for name, fn in rotated(runs, rep):
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
        load = others.cores()
    finally:
        torch.set_num_threads(previous)
    if threads > 1:
        sync = max(sync, sync_probe(threads))
    return Table(title, threads, reps, load, times, list(goals), subject, list(notes), sync)


def report(table: Table, unit: float | None = None, unit_name: str | None = None) -> None:
    """Print a table; times in ms, or in us when the subject's median is under 1 ms."""
    if unit is None:
        unit, unit_name = (1e-3, "ms") if table.median(table.subject) >= 1e-3 else (1e-6, "us")
    flags = []
    if table.loaded:
        flags.append(f"LOADED (other processes used {table.others_load:.2f} cores > {QUIET_LOAD}: "
                     "not a result)")
    if table.noisy:
        flags.append(f"NOISY (A/A off by more than {AA_TOLERANCE:.0%})")
    if table.slow_sync:
        flags.append(f"SLOW-SYNC (a small parallel op at {table.threads} threads took {table.sync_ratio:.2f} of its "
                     f"1-thread time > {SYNC_LIMIT}: threads wake up slowly, not a result)")
    print(f"\n== {table.title} | {table.threads} thread(s), {table.reps} interleaved reps, "
          f"other processes {table.others_load:.2f} cores" +
          (f", sync probe {table.sync_ratio:.2f}" if table.threads > 1 else "")
          + (" | " + "; ".join(flags) if flags else ""))
    for note in table.notes:
        print(f"   {note}")
    width = max(len(n) for n in table.times)
    for name in table.times:
        print(f"   {name:<{width}}  median {table.median(name) / unit:10.3f} {unit_name}   "
              f"min {table.minimum(name) / unit:10.3f} {unit_name}")
    med, mn = table.aa
    print(f"   A/A control: {aa_name(table.subject)} / {table.subject} = {med:.3f} (median), "
          f"{mn:.3f} (min)")
    for goal, med, mn, ok in table.goal_results():
        print(f"   VERDICT {'MEETS' if ok else 'BELOW'}: {goal.label}: {goal.wording()} -> "
              f"{goal.show(med)} (median), {goal.show(mn)} (min)")


def summary(tables: Sequence[Table]) -> bool:
    """Print one line per goal and thread count; True when every goal is met everywhere."""
    print("\n== summary")
    all_ok = True
    for t in tables:
        for goal, med, mn, ok in t.goal_results():
            all_ok &= ok
            tag = (" [loaded]" if t.loaded else " [slow-sync]" if t.slow_sync else
                   " [noisy]" if t.noisy else "")
            bar = f"{goal.bar * 1e6:g} us" if goal.difference else f"{goal.bar:g}"
            print(f"   {'MEETS' if ok else 'BELOW'}  {t.threads}t  {goal.label}: "
                  f"{goal.show(med)} / {goal.show(mn)} (median / min; bar {'>=' if goal.at_least else '<='} "
                  f"{bar}){tag}")
    quiet = not any(t.loaded or t.slow_sync for t in tables)
    print(f"   overall: {'all goals met' if all_ok else 'some goals not met'}"
          f"{'' if quiet else ' (LOADED or SLOW-SYNC tables: not a result)'}")
    return all_ok


def write_json(path: str, tables: Sequence[Table], extra: dict | None = None) -> None:
    rows = []
    for t in tables:
        d = asdict(t)
        d["goals"] = [dict(asdict(g), median=med, min=mn, met=ok) for g, med, mn, ok in t.goal_results()]
        d["aa"] = t.aa
        d["median"] = {n: t.median(n) for n in t.times}
        d["min"] = {n: t.minimum(n) for n in t.times}
        rows.append(d)
    with open(path, "w") as f:
        json.dump({"tables": rows, **(extra or {})}, f, indent=1)


def arguments(description: str, reps: int = MIN_REPS) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--reps", type=int, default=reps,
                   help=f"interleaved repetitions per thread count (default {reps}; goals need >= {MIN_REPS})")
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    p.add_argument("--smoke", action="store_true",
                   help="tiny sizes, to check the benchmark runs (ratios mean nothing)")
    p.add_argument("--json", default=None, help="also write the tables to this JSON file")
    p.add_argument("--allocator", choices=("caching", "plain"), default="caching",
                   help="caching (default): freed memory is kept for reuse, as the NPU's caching allocator "
                        "does (keep_freed_memory); plain: PyTorch's CPU allocator as it is, every fresh "
                        "multi-MB tensor page-faults")
    p.add_argument("--sync-wait", type=float, default=SYNC_WAIT_S,
                   help=f"seconds per table (default {SYNC_WAIT_S:g}) to wait out a slow-sync phase at more "
                        "than one thread: wait for a good one, measure again after a bad one; 0: measure as found")
    return p


def setup(args) -> str:
    """Apply ``--allocator`` and ``--sync-wait``; returns the line the benchmark prints about them."""
    if args.sync_wait < 0:
        raise SystemExit(f"--sync-wait={args.sync_wait:g}: expected seconds >= 0")
    _sync_wait[0] = 0.0 if args.smoke else args.sync_wait   # a smoke run's ratios mean nothing anyway
    return f"{setup_allocator(args)}; sync wait {_sync_wait[0]:g} s per table"


def setup_allocator(args) -> str:
    """Apply ``--allocator``; returns the line the benchmark prints about it."""
    if args.allocator == "caching":
        if keep_freed_memory():
            return "allocator: caching (freed memory kept for reuse, as on the NPU; --allocator plain to compare)"
        return "allocator: plain (could not make glibc keep freed memory)"
    return "allocator: plain (fresh multi-MB tensors page-fault on first touch)"


def thread_counts(spec: str) -> list[int]:
    try:
        counts = [int(x) for x in spec.split(",") if x.strip()]
    except ValueError:
        counts = []
    if not counts or any(c < 1 for c in counts):
        raise SystemExit(f"--threads={spec!r}: expected comma-separated positive integers, e.g. 1,2")
    return counts


def keep_freed_memory() -> bool:
    """Make glibc keep freed memory for reuse (no ``mmap`` per large block, no trimming), as the
    NPU's caching allocator does.  PyTorch's CPU allocator hands multi-MB tensors back to the OS
    on free, so every fresh one page-faults (about 0.5 ms per MB here), a cost an NPU run never
    pays.  Process-wide and one-way; returns False where it cannot be set (not glibc)."""
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
        M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
        return bool(libc.mallopt(M_MMAP_MAX, 0)) and bool(libc.mallopt(M_TRIM_THRESHOLD, 2 ** 31 - 1))   # a C int
    except (OSError, AttributeError):
        return False


class _OpCounter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.count = 0
        self.by_op: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        name = str(func.overloadpacket)
        self.by_op[name] = self.by_op.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


def count_torch_ops(fn: Callable[[], object]) -> tuple[int, dict[str, int]]:
    """ATen operators dispatched by one call of ``fn`` (views and in-place ops included)."""
    with _OpCounter() as counter:
        fn()
    return counter.count, dict(sorted(counter.by_op.items(), key=lambda kv: -kv[1]))


def run(description: str, tables_at: Callable, argv=None, json_extra: Callable | None = None,
        add_arguments: Callable | None = None) -> int:
    """The common main of a benchmark: parse the arguments, set the allocator, then per thread
    count report every table ``tables_at(args, threads, reps)`` yields, as it comes; the summary,
    the JSON (``json_extra(args)`` adds to it) and the exit status (1 when a goal is missed,
    never for ``--smoke``).  ``add_arguments(parser)`` adds a benchmark's own options."""
    parser = arguments(description)
    if add_arguments is not None:
        add_arguments(parser)
    args = parser.parse_args(argv)
    reps = min(args.reps, 2) if args.smoke else args.reps
    print(setup(args))
    tables = []
    for threads in thread_counts(args.threads):
        for table in tables_at(args, threads, reps):
            report(table)
            tables.append(table)
    ok = summary(tables)
    if args.json:
        write_json(args.json, tables, json_extra(args) if json_extra else None)
    return 0 if ok or args.smoke else 1
