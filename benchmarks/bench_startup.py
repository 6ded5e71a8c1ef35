"""Start-up costs of the plugin and its CLI, against their goals, measured side by side.

Run:  .venv/bin/python benchmarks/bench_startup.py [--reps 7] [--doctor-reps 3] [--smoke] [--json PATH]

Every number is a fresh child process (what a user or SGLang pays), run interleaved with the
others of its table (order rotated every repetition, reversed every other one), after one
warm-up round; medians and minima are reported, the subject also runs a second time as an A/A
control.  Tables:

* ``CLI``: ``python -c pass`` (a bare interpreter of this venv) against the console script's
  ``--help`` and an argument error (``plan --tp two``).  Goal: each / bare <= 1.5 (median and
  minimum); neither may import torch or SGLang (``tests/tools/test_cli_startup.py`` checks that).
* ``plan``: ``plan --config examples/configs/qwen3_6-27b`` wall time.  Goal: <= 3 s.
* ``registration``: the seconds SGLang's ``load_plugins()`` takes inside a child that first
  imports ``sglang.launch_server`` (what ``python -m sglang.launch_server`` has imported when it
  calls ``load_plugins()``), timed in the child: the plugin *disabled* (SGLang's own
  ``SGLANG_PLUGINS`` whitelist names every general plugin but ours, so SGLang never loads it),
  *enabled* (the subject, with its A/A copy), and enabled with a *cold target cache* (a fresh
  empty ``XDG_CACHE_HOME``: every target source parsed, as on the first start after an
  install; no goal).  Goal: enabled - disabled <= 0.1 s (difference of the medians and of the
  minima).
* ``doctor`` (no goal): ``doctor`` wall time, ``--doctor-reps`` repetitions.

Threads: what is timed runs in the children, so the parent's thread count means nothing;
``--threads`` sets the children's ``OMP_NUM_THREADS`` (default 1; start-up is single-threaded
Python and imports, 2 threads change nothing measurable).  Bytecode: the children run with
``PYTHONDONTWRITEBYTECODE`` unset, so the plugin's modules are compiled once (into the git-ignored
``__pycache__``) and then loaded from bytecode, as an installed package is; ``--no-bytecode``
keeps this environment's setting (then every start compiles the plugin's modules again).
Load: the CPU time of processes other than this one and its children is printed with each table
(LOADED above 0.25 cores: not a result).  Exit status 1 when a goal is missed (never with
``--smoke``: one repetition, no warm-up, rows only).  The harness's ``--allocator`` and
``--sync-wait`` have no effect here (nothing is allocated or run in parallel in this process).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.harness import (  # noqa: E402
    MIN_REPS,
    QUIET_LOAD,
    Goal,
    OthersLoad,
    Table,
    aa_name,
    arguments,
    report,
    rotated,
    thread_counts,
    write_json,
)

PLAN_CONFIG = ROOT / "examples" / "configs" / "qwen3_6-27b"
PLAN_GOAL_S = 3.0
REGISTRATION_GOAL_S = 0.1
HELP_GOAL = 1.5
DOCTOR_REPS = 3
MARK = "@@BENCH_STARTUP@@"
TABLES = ("cli", "plan", "registration", "doctor")

REGISTRATION_CHILD = f"""
import json, time
import sglang.launch_server  # noqa: F401  (what launch_server has imported when it loads plugins)
from sglang.srt.plugins import load_plugins
t0 = time.perf_counter()
load_plugins()
print({MARK!r} + json.dumps(time.perf_counter() - t0))
"""


@dataclass
class Absolute:
    """A goal on seconds: ``value`` (median, min) <= ``bar``."""
    label: str
    table: Table
    median: float
    minimum: float
    bar: float

    @property
    def met(self) -> bool:
        return self.median <= self.bar and self.minimum <= self.bar


def child_env(threads: int, bytecode: bool, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_ASCEND_HYBRID_")}
    env.update(TORCH_DEVICE_BACKEND_AUTOLOAD="0", HF_HUB_OFFLINE="1", OMP_NUM_THREADS=str(threads))
    env.pop("SGLANG_PLUGINS", None)
    if bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(extra)
    return env


def cli_command() -> list[str]:
    """The console script next to this interpreter (what users run), else ``python -m``."""
    script = Path(sys.executable).with_name("sglang-ascend-hybrid")
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "sglang_ascend_hybrid.cli"]


def wall(argv: Sequence[str], env: dict, expect: int = 0) -> Callable[[], float]:
    def run() -> float:
        t0 = time.perf_counter()
        proc = subprocess.run(list(argv), env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        took = time.perf_counter() - t0
        if proc.returncode != expect:
            raise SystemExit(f"bench_startup: {' '.join(argv)} exited {proc.returncode}, expected {expect}:\n"
                             + proc.stderr.decode(errors="replace")[-2000:])
        return took

    return run


def in_child(code: str, env_of: Callable[[], dict], cleanup: Callable[[dict], None] = lambda env: None
             ) -> Callable[[], float]:
    """Seconds a child measured itself and printed after :data:`MARK`."""
    def run() -> float:
        env = env_of()
        try:
            proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True)
        finally:
            cleanup(env)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)]
        if proc.returncode != 0 or not lines:
            raise SystemExit(f"bench_startup: registration child failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
        return float(json.loads(lines[-1][len(MARK):]))

    return run


def interleaved(title: str, methods: list[tuple[str, Callable[[], float]]], subject: str, reps: int,
                warmup: int, threads: int, goals: Sequence[Goal] = (), notes: Sequence[str] = ()) -> Table:
    """The harness's rotation (each method once per repetition, order rotated, reversed every
    other repetition), for methods that return their own seconds."""
    fns = dict(methods)
    runs = list(methods) + [(aa_name(subject), fns[subject])]
    for _ in range(warmup):
        for _, fn in runs:
            fn()
    times: dict[str, list[float]] = {n: [] for n, _ in runs}
    load = OthersLoad(children=True)   # the measured subjects are this process's children
    for rep in range(reps):
        for name, fn in rotated(runs, rep):
            times[name].append(fn())
    return Table(title, threads, reps, load.cores(), times, list(goals), subject, list(notes))


def other_plugins_only() -> str:
    """An SGLANG_PLUGINS value that lets SGLang load every general plugin but this one."""
    from importlib.metadata import entry_points

    others = [ep.name for ep in entry_points(group="sglang.srt.plugins")
              if not ep.value.startswith("sglang_ascend_hybrid")]
    return ",".join(others) or "no-plugin-but-sglang-ascend-hybrid-is-excluded"


def absolute(label: str, table: Table, name: str, bar: float, minus: str | None = None) -> Absolute:
    med, mn = table.median(name), table.minimum(name)
    if minus is not None:
        med, mn = med - table.median(minus), mn - table.minimum(minus)
    return Absolute(label, table, med, mn, bar)


def print_absolute(goal: Absolute) -> None:
    print(f"   VERDICT {'MEETS' if goal.met else 'BELOW'}: {goal.label} <= {goal.bar:g} s -> "
          f"{goal.median:.3f} s (median), {goal.minimum:.3f} s (min)")


def summary(tables: Sequence[Table], absolutes: Sequence[Absolute]) -> bool:
    print("\n== summary")
    ok = True
    for t in tables:
        for goal, med, mn, met in t.goal_results():
            ok &= met
            print(f"   {'MEETS' if met else 'BELOW'}  {t.threads}t  {goal.label}: {med:.3f} / {mn:.3f} "
                  f"(median / min; bar {'>=' if goal.at_least else '<='} {goal.bar:g}){_tag(t)}")
    for a in absolutes:
        ok &= a.met
        print(f"   {'MEETS' if a.met else 'BELOW'}  {a.table.threads}t  {a.label}: {a.median:.3f} s / "
              f"{a.minimum:.3f} s (median / min; bar <= {a.bar:g} s){_tag(a.table)}")
    loaded = any(t.loaded for t in tables)
    print(f"   overall: {'all goals met' if ok else 'some goals not met'}"
          f"{' (LOADED tables: not a result)' if loaded else ''}")
    return ok


def _tag(t: Table) -> str:
    return " [loaded]" if t.loaded else " [noisy]" if t.noisy else ""


def cli_table(cli, reps, warmup, threads, bytecode, note, **_) -> tuple[Table, None]:
    env = child_env(threads, bytecode)
    t = interleaved("CLI: --help and an argument error vs a bare interpreter", [
        ("python -c pass", wall([sys.executable, "-c", "pass"], env)),
        ("cli --help", wall([*cli, "--help"], env)),
        ("cli plan --tp two (usage error)", wall([*cli, "plan", "--config", "x", "--tp", "two"], env, expect=2)),
    ], "cli --help", reps, warmup, threads, goals=[
        Goal("--help / bare interpreter", "cli --help", "python -c pass", HELP_GOAL, at_least=False),
        Goal("argument error / bare interpreter", "cli plan --tp two (usage error)", "python -c pass",
             HELP_GOAL, at_least=False),
    ], notes=[note])
    report(t)
    return t, None


def plan_table(cli, reps, warmup, threads, bytecode, note, **_) -> tuple[Table, Absolute]:
    env = child_env(threads, bytecode)
    t = interleaved(f"plan --config {PLAN_CONFIG.relative_to(ROOT)}", [
        ("python -c pass", wall([sys.executable, "-c", "pass"], env)),
        ("plan", wall([*cli, "plan", "--config", str(PLAN_CONFIG)], env)),
    ], "plan", reps, warmup, threads, notes=[note])
    report(t)
    a = absolute("plan seconds", t, "plan", PLAN_GOAL_S)
    print_absolute(a)
    return t, a


def registration_table(reps, warmup, threads, bytecode, disabled, note, **_) -> tuple[Table, Absolute]:
    def cold_env() -> dict:  # a fresh, empty cache directory per run
        return child_env(threads, bytecode, XDG_CACHE_HOME=tempfile.mkdtemp(prefix="bench-startup-xdg-"))

    def drop(env) -> None:
        shutil.rmtree(env["XDG_CACHE_HOME"], ignore_errors=True)

    warm = child_env(threads, bytecode)
    t = interleaved("registration: SGLang's load_plugins() after importing sglang.launch_server", [
        ("plugin disabled",
         in_child(REGISTRATION_CHILD, lambda: child_env(threads, bytecode, SGLANG_PLUGINS=disabled))),
        ("plugin enabled", in_child(REGISTRATION_CHILD, lambda: warm)),
        ("plugin enabled, cold target cache", in_child(REGISTRATION_CHILD, cold_env, drop)),
    ], "plugin enabled", reps, warmup, threads, notes=[
        note, f"disabled: SGLANG_PLUGINS={disabled!r} (SGLang's own whitelist: the plugin is never loaded)",
        "times: load_plugins() measured inside each child (perf_counter), SGLang's import excluded"])
    report(t)
    a = absolute("registration cost (enabled - disabled)", t, "plugin enabled", REGISTRATION_GOAL_S,
                 minus="plugin disabled")
    print_absolute(a)
    cold = absolute("", t, "plugin enabled, cold target cache", 0.0, minus="plugin disabled")
    print(f"   cold target cache - disabled: {cold.median:.3f} s (median), {cold.minimum:.3f} s (min); no goal: "
          "the first start after an install or upgrade")
    return t, a


def doctor_table(cli, doctor_reps, warmup, threads, bytecode, note, **_) -> tuple[Table, None]:
    t = interleaved("doctor (no goal)", [("doctor", wall([*cli, "doctor"], child_env(threads, bytecode)))],
                    "doctor", doctor_reps, warmup, threads, notes=[note])
    report(t)
    return t, None


def main(argv=None) -> int:
    parser = arguments(__doc__.splitlines()[0])
    parser.set_defaults(threads="1")
    parser.add_argument("--doctor-reps", type=int, default=DOCTOR_REPS,
                        help=f"repetitions of the doctor table (default {DOCTOR_REPS}; no goal)")
    parser.add_argument("--only", default=",".join(TABLES),
                        help=f"comma-separated tables to run, of {', '.join(TABLES)} (default: all)")
    parser.add_argument("--no-bytecode", action="store_true",
                        help="keep this environment's PYTHONDONTWRITEBYTECODE for the children")
    args = parser.parse_args(argv)
    only = [x.strip() for x in args.only.split(",") if x.strip()]
    if not only or any(x not in TABLES for x in only):
        raise SystemExit(f"--only={args.only!r}: expected comma-separated names of {', '.join(TABLES)}")
    for name in ("reps", "doctor_reps"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')}={getattr(args, name)}: expected a positive integer")
    reps = 1 if args.smoke else args.reps
    doctor_reps = 1 if args.smoke else args.doctor_reps
    warmup = 0 if args.smoke else 1
    bytecode = not args.no_bytecode
    cli = cli_command()
    print(f"CLI: {' '.join(cli)}; children: PYTHONDONTWRITEBYTECODE "
          f"{'unset (bytecode cached)' if bytecode else 'as in this environment'}; "
          f"{reps} interleaved rep(s) after {warmup} warm-up round(s)"
          + (f" (goals need >= {MIN_REPS})" if reps < MIN_REPS else ""))
    disabled = other_plugins_only()
    tables, absolutes = [], []
    run = {"cli": cli_table, "plan": plan_table, "registration": registration_table, "doctor": doctor_table}
    for threads in thread_counts(args.threads):
        ctx = dict(cli=cli, reps=reps, doctor_reps=doctor_reps, warmup=warmup, threads=threads,
                   bytecode=bytecode, disabled=disabled,
                   note=f"children: OMP_NUM_THREADS={threads} (the parent's threads are irrelevant: "
                        "the timed work is theirs)")
        for name in TABLES:
            if name in only:
                table, goal = run[name](**ctx)
                tables.append(table)
                if goal is not None:
                    absolutes.append(goal)
    ok = summary(tables, absolutes)
    if args.json:
        write_json(args.json, tables, {"absolute_goals": [
            {"label": a.label, "threads": a.table.threads, "median": a.median, "min": a.minimum, "bar": a.bar,
             "met": a.met} for a in absolutes], "smoke": bool(args.smoke), "quiet_load": QUIET_LOAD})
    return 0 if ok or args.smoke else 1


if __name__ == "__main__":
    raise SystemExit(main())
