"""GDN prefill on CPU: the plugin's torch chunked path against the pure-torch competitors (its performance goal).

    .venv/bin/python benchmarks/bench_gdn.py [--threads 1,2] [--reps 7] [--smoke] [--json PATH]

Everything runs in one process on the shared harness (``benchmarks/harness.py``): methods
interleaved repetition by repetition, at 1 and 2 threads, medians and minima, an A/A row
(the subject against itself) and the CPU time other processes used while each table ran.

Shapes: Hv = 16 value heads, Hk = 8 key heads, K = V = 128, fp32, l2-normalised q and k,
gates ``logsigmoid(randn + 2)``, ``beta ~ U(0, 1)``, zero initial states, final states
returned by every method.

Tables
------
* **T = 4096, one sequence.**  The subject (``chunk_gdn_torch``), FLA's
  ``naive_chunk_gated_delta_rule`` and transformers' ``torch_chunk_gated_delta_rule``
  (qwen3_next), both given keys repeated per value head (as the models do), and the
  **matmul probe**.
* **varlen, 16 sequences** of random lengths in 1..512 (seed 1; about 4k tokens).  The
  competitors have no varlen form, so each is given its two best user-written forms: a loop
  over the sequences, and one padded batch (sequences padded at the end with ``g = 0`` and
  ``beta = 0``, so outputs and final states are exact; the padding index is built once,
  outside the timing).  The goal is set against the faster form of each competitor in that
  run (by median); the slower form is reported.

The matmul probe
----------------
The dense matmul FLOPs the subject itself issues are counted per call by a dispatch mode
over ``mm``/``bmm``/``baddbmm``/``addmm`` (``2 M N K`` per matrix product; the elementwise
work and the small inverse are not counted beyond their matmuls).  The probe is one
``torch.bmm`` over ``[n, 64, 128] x [n, 128, 128]`` blocks (the shape of the hand-over's
``q S`` and ``w S`` at 64-token chunks; on CPU the subject computes at 32-token chunks, fewer FLOPs
in smaller matmuls than the probe's, which run slower per FLOP) with ``n`` chosen for the same FLOP count;
goal: ``probe time / subject
time >= 0.70``.  Note honestly: at T = 4096 that probe is about 5,000 blocks (about 700 MB of
operands), so it streams from memory and runs below the in-cache matmul speed.  The table
therefore also has an informational **cache-resident probe** (the same FLOPs as a loop of
``bmm`` over 16 blocks, the hand-over's batch, on operands that stay in cache): its ratio is
printed as a note, not as a goal.

Allocators
----------
``--allocator caching`` (default) keeps freed memory for reuse (``harness.keep_freed_memory``,
process-wide), as an NPU's caching allocator does; ``--allocator plain`` leaves PyTorch's CPU
allocator as it is (it hands multi-MB blocks back to the OS, so every fresh one page-faults,
about 0.5 ms per MB here, as any CPU run of these methods pays).  The competitors allocate far
more fresh memory per call than the subject (whose CPU workspaces persist), so their times and
the ratios differ between the two: run both.

The ATen op count of one subject call (``harness.count_torch_ops``) is printed with its goal
(at most 5,000 at T = 4096), with the competitors' counts for information.  Before timing,
every method's output and final state are compared with the subject's (max difference).
At the end: the head planner's plans for the Qwen3.5/3.6 head table.
"""

from __future__ import annotations

import inspect
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

# this checkout's package and benchmarks, ahead of any installed copy
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from fla.ops.gated_delta_rule.naive import naive_chunk_gated_delta_rule  # noqa: E402
from transformers.models.qwen3_next.modeling_qwen3_next import torch_chunk_gated_delta_rule as _tr_entry  # noqa: E402

from benchmarks.harness import (  # noqa: E402
    Goal,
    arguments,
    count_torch_ops,
    measure,
    report,
    setup,
    summary,
    thread_counts,
    write_json,
)
from sglang_ascend_hybrid.ops.gdn.prefill.planner import plan_for  # noqa: E402
from sglang_ascend_hybrid.ops.gdn.torch_impl import chunk_gdn_torch, l2norm  # noqa: E402

# transformers wraps its torch function in a hub-kernel dispatcher that hands the call to FLA's
# Triton kernel when fla is installed: the benchmark calls the torch function underneath.
torch_chunk_gated_delta_rule = inspect.unwrap(_tr_entry)
assert torch_chunk_gated_delta_rule.__code__.co_filename.endswith("modeling_qwen3_next.py")

SUBJECT = "torch chunked"
PLAIN, KEPT = "plain CPU allocator", "freed memory kept"
OP_GOAL = 5000           # ATen ops per subject call at T = 4096
PROBE_BAR = 0.70         # probe time / subject time
SPEEDUP_BAR = 2.0        # competitor time / subject time
AGREE_TOL = 2e-3         # max |difference| to the subject before timing (fp32, K = V = 128)


class _MatmulFlops(TorchDispatchMode):
    """Dense matmul FLOPs dispatched (2 M N K per product, batched ones included)."""

    def __init__(self):
        super().__init__()
        self.flops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in ("mm", "bmm"):
            a, b = args[0], args[1]
        elif name in ("baddbmm", "baddbmm_", "addmm", "addmm_", "addbmm", "addbmm_"):
            a, b = args[1], args[2]
        else:
            a = b = None
        if a is not None:
            self.flops += 2 * a.numel() * b.shape[-1]
        return func(*args, **(kwargs or {}))


def matmul_flops(fn) -> int:
    with _MatmulFlops() as mode:
        fn()
    return mode.flops


def inputs(lens, hv, hk, dk, dv, seed=0):
    gen = torch.Generator().manual_seed(seed)
    T = sum(lens)
    q = l2norm(torch.randn(1, T, hk, dk, generator=gen))
    k = l2norm(torch.randn(1, T, hk, dk, generator=gen))
    v = torch.randn(1, T, hv, dv, generator=gen)
    g = F.logsigmoid(torch.randn(1, T, hv, generator=gen) + 2.0)
    beta = torch.rand(1, T, hv, generator=gen)
    cu = torch.tensor([0] + list(lens)).cumsum(0)
    return q, k, v, g, beta, cu


# ------------------------------------------------ the methods (all return o [T, Hv, V], final [N, Hv, V, K])

def subject(q, k, v, g, beta, cu):
    o, final, _ = chunk_gdn_torch(q, k, v, g, beta, cu_seqlens=cu)
    return o[0], final


def _expand(q, k, hv):  # keys repeated per value head, as the models do before these kernels
    r = hv // q.shape[2]
    return q.repeat_interleave(r, 2), k.repeat_interleave(r, 2)


def fla_naive(q, k, v, g, beta):
    o, s = naive_chunk_gated_delta_rule(q, k, v, g, beta, output_final_state=True)
    return o, s.transpose(-1, -2)  # key-first -> value-first


def transformers_chunk(q, k, v, g, beta):
    o, s = torch_chunk_gated_delta_rule(q, k, v, g, beta, output_final_state=True)
    return o, s.transpose(-1, -2)


def per_sequence(kernel, bounds):
    """A loop over the sequences of the packed batch."""
    def run(q, k, v, g, beta, cu):
        qe, ke = _expand(q, k, v.shape[2])
        outs, finals = [], []
        for a, b in zip(bounds, bounds[1:]):
            o, s = kernel(qe[:, a:b], ke[:, a:b], v[:, a:b], g[:, a:b], beta[:, a:b])
            outs.append(o[0])
            finals.append(s)
        return torch.cat(outs), torch.cat(finals)
    return run


def padded_batch(kernel, bounds):
    """One batch padded at the end: padding has g = 0 and beta = 0 (state untouched, so the
    real tokens' outputs and the final states are exact).  Index built once, outside the timing."""
    lens = [b - a for a, b in zip(bounds, bounds[1:])]
    n, L = len(lens), max(lens)
    rows = torch.tensor([a + min(i, max(b - a - 1, 0)) for a, b in zip(bounds, bounds[1:]) for i in range(L)])
    valid = torch.tensor([[i < m for i in range(L)] for m in lens])
    real = valid.reshape(-1).nonzero().squeeze(1)

    def run(q, k, v, g, beta, cu):
        qe, ke = _expand(q, k, v.shape[2])
        pad = [x[0, rows].view((n, L) + tuple(x.shape[2:])) for x in (qe, ke, v, g, beta)]
        pad[3] = pad[3] * valid[..., None]      # g = 0 on the padding
        pad[4] = pad[4] * valid[..., None]      # beta = 0 on the padding
        o, s = kernel(*pad)
        return o.reshape((n * L,) + tuple(o.shape[2:]))[real], s
    return run


def _probe(flops, block=(64, 128, 128)):
    """One bmm over [n, 64, 128] x [n, 128, 128] blocks with ``flops`` FLOPs in all."""
    m, kk, nn = block
    n = max(1, round(flops / (2 * m * kk * nn)))
    a, b = torch.randn(n, m, kk), torch.randn(n, kk, nn)
    out = torch.empty(n, m, nn)
    return n, (lambda: torch.bmm(a, b, out=out))


def _cache_probe(n, block=(64, 128, 128), batch=16):
    """The same FLOPs as n blocks, as bmm's of ``batch`` blocks on operands that stay in cache."""
    m, kk, nn = block
    a, b, out = torch.randn(batch, m, kk), torch.randn(batch, kk, nn), torch.empty(batch, m, nn)
    full, rest = divmod(n, batch)

    def run():
        for _ in range(full):
            torch.bmm(a, b, out=out)
        if rest:
            torch.bmm(a[:rest], b[:rest], out=out[:rest])
    return run


def _agreement(methods, args):
    ref_o, ref_s = methods[0][1](*args)
    worst = 0.0
    for name, fn in methods[1:]:
        o, s = fn(*args)
        do, ds = (o - ref_o).abs().max().item(), (s - ref_s).abs().max().item()
        worst = max(worst, do, ds)
        print(f"   agreement: max |{name} - {methods[0][0]}| = {do:.2e} (o), {ds:.2e} (final state)")
    ok = worst <= AGREE_TOL
    print(f"   agreement: {'OK' if ok else 'DISAGREE'} (worst {worst:.2e}, tolerance {AGREE_TOL:g})")
    return ok


def single_table(size, threads, reps, check, allocator):
    lens, (hv, hk, dk, dv) = size["single"], size["heads"]
    args = inputs(lens, hv, hk, dk, dv)
    bounds = [0, sum(lens)]
    competitors = [("FLA naive chunk", per_sequence(fla_naive, bounds)),
                   ("transformers chunk", per_sequence(transformers_chunk, bounds))]
    sub = (SUBJECT, subject)
    flops = matmul_flops(lambda: subject(*args))
    n, probe = _probe(flops)
    methods = [(SUBJECT, lambda: subject(*args))] + [(nm, (lambda f=f: f(*args))) for nm, f in competitors] + [
        ("matmul probe", probe), ("cache-resident probe (info)", _cache_probe(n))]
    tag = f" [{allocator}]"
    goals = [Goal(f"T={sum(lens)} one sequence, matmul probe of the same FLOPs / subject{tag}", "matmul probe",
                  SUBJECT, PROBE_BAR),
             Goal(f"T={sum(lens)} one sequence, >= 2x FLA naive chunk{tag}", "FLA naive chunk", SUBJECT,
                  SPEEDUP_BAR),
             Goal(f"T={sum(lens)} one sequence, >= 2x transformers chunk{tag}", "transformers chunk", SUBJECT,
                  SPEEDUP_BAR)]
    notes = [f"T={sum(lens)} one sequence, Hv={hv} Hk={hk} K={dk} V={dv} fp32; subject issues {flops / 1e9:.3f} "
             f"GFLOP of matmuls per call; probe: one bmm of {n} x [64,128]x[128,128] blocks"]
    if check:
        _agreement([sub] + competitors, args)
    table = measure(f"GDN prefill, T={sum(lens)}, one sequence ({allocator})", methods, SUBJECT, goals, reps,
                    threads, notes=notes)
    med, mn = table.ratio("cache-resident probe (info)", SUBJECT)
    table.notes.append(f"info (no goal): cache-resident probe / subject = {med:.3f} (median), {mn:.3f} (min); "
                       f"subject at {flops / table.median(SUBJECT) / 1e9:.1f} GFLOP/s (median)")
    return table


def varlen_table(size, threads, reps, check, allocator):
    lens, (hv, hk, dk, dv) = size["varlen"], size["heads"]
    args = inputs(lens, hv, hk, dk, dv, seed=2)
    bounds = [int(x) for x in args[-1].tolist()]
    competitors = [("FLA naive loop", per_sequence(fla_naive, bounds)),
                   ("FLA naive padded", padded_batch(fla_naive, bounds)),
                   ("transformers loop", per_sequence(transformers_chunk, bounds)),
                   ("transformers padded", padded_batch(transformers_chunk, bounds))]
    if check:
        _agreement([(SUBJECT, subject)] + competitors, args)
    methods = [(SUBJECT, lambda: subject(*args))] + [(nm, (lambda f=f: f(*args))) for nm, f in competitors]
    notes = [f"{len(lens)} sequences, lengths {min(lens)}..{max(lens)} (random in 1..512, seed 1), "
             f"{sum(lens)} tokens; goals against each competitor's faster form in this run (by median)"]
    table = measure(f"GDN prefill, varlen batch of {len(lens)} ({allocator})", methods, SUBJECT, (), reps, threads,
                    notes=notes)
    for family in ("FLA naive", "transformers"):
        forms = [f"{family} loop", f"{family} padded"]
        best = min(forms, key=table.median)
        label = f"varlen {len(lens)} sequences, >= 2x {family} (faster form = {best.split()[-1]}) [{allocator}]"
        table.goals.append(Goal(label, best, SUBJECT, SPEEDUP_BAR))
    return table


def op_counts(size):
    """ATen ops per call: the subject's goal at the single-sequence size, the rest for information."""
    lens, (hv, hk, dk, dv) = size["single"], size["heads"]
    args = inputs(lens, hv, hk, dk, dv)
    count, by_op = count_torch_ops(lambda: subject(*args))
    ok = count <= OP_GOAL
    print(f"\n== ATen op count (harness.count_torch_ops), T={sum(lens)} one sequence")
    print(f"   VERDICT {'MEETS' if ok else 'BELOW'}: op count: {SUBJECT} issues {count} ATen ops per call "
          f"(goal <= {OP_GOAL})")
    print("   most frequent: " + ", ".join(f"{k} {v}" for k, v in list(by_op.items())[:6]))
    bounds = [0, sum(lens)]
    info = {"subject": count}
    for name, fn in (("transformers chunk", per_sequence(transformers_chunk, bounds)),
                     ("FLA naive chunk", per_sequence(fla_naive, bounds))):
        info[name] = count_torch_ops(lambda: fn(*args))[0]
        print(f"   info: {name} issues {info[name]} ATen ops per call")
    vl = size["varlen"]
    vargs = inputs(vl, hv, hk, dk, dv, seed=2)
    info["subject varlen"] = count_torch_ops(lambda: subject(*vargs))[0]
    print(f"   info: {SUBJECT} on the varlen batch ({len(vl)} sequences, {sum(vl)} tokens) issues "
          f"{info['subject varlen']} ATen ops per call")
    return ok, info


def planner_table():
    print("\nHead planner on the current mega-kernel table (max overhead from "
          "SGLANG_ASCEND_HYBRID_GDN_MAX_OVERHEAD):")
    print(f"  {'global Hv':>9s}  {'TP':>3s}  {'pair':>8s}  {'strategy':9s}  {'launches':18s}  overhead  plan time")
    for hv in (16, 32, 48, 64):
        for tp in (1, 2, 4, 8, 16):
            pair = (hv // tp, 16 // tp)
            t0 = time.perf_counter()
            plan = plan_for(*pair, 128, torch.float16)
            us = (time.perf_counter() - t0) * 1e6
            ov = "-" if plan.strategy == "none" else f"{plan.overhead:.3f}"
            print(f"  {hv:9d}  {tp:3d}  {str(pair):>8s}  {plan.strategy:9s}  {str(list(plan.launches)):18s}  "
                  f"{ov:>8s}  {us:7.0f} us")


def main(argv=None):
    p = arguments(__doc__.splitlines()[0])
    args = p.parse_args(argv)
    threads = thread_counts(args.threads)
    gen = torch.Generator().manual_seed(1)
    if args.smoke:
        size = {"single": [256], "varlen": torch.randint(1, 100, (4,), generator=gen).tolist(),
                "heads": (4, 2, 32, 32)}
        reps = min(args.reps, 2)
    else:
        size = {"single": [4096], "varlen": torch.randint(1, 512, (16,), generator=gen).tolist(),
                "heads": (16, 8, 128, 128)}
        reps = args.reps
    ops_ok, ops_info = op_counts(size)
    # --allocator caching (default): freed memory kept for reuse (harness.keep_freed_memory), as an
    # NPU's caching allocator does; --allocator plain: PyTorch's CPU allocator hands multi-MB blocks
    # back to the OS, so every fresh one page-faults, as a CPU run of these methods does.  The
    # competitors allocate much more fresh memory per call than the subject, so the two differ:
    # run both (docs/performance.md shows both).
    line = setup(args)
    print(line)
    allocator = KEPT if line.startswith("allocator: caching") else PLAIN
    tables = []
    for i, t in enumerate(threads):
        tables.append(single_table(size, t, reps, check=i == 0, allocator=allocator))
        report(tables[-1])
        tables.append(varlen_table(size, t, reps, check=i == 0, allocator=allocator))
        report(tables[-1])
    ok = summary(tables)
    print(f"   {'MEETS' if ops_ok else 'BELOW'}  op count: {ops_info['subject']} ATen ops per call "
          f"(bar <= {OP_GOAL})")
    if args.json:
        write_json(args.json, tables, {"op_counts": ops_info, "op_goal": OP_GOAL, "op_goal_met": ops_ok,
                                       "sizes": size, "smoke": args.smoke})
    planner_table()
    return 0 if (ok and ops_ok) or args.smoke else 1


if __name__ == "__main__":
    raise SystemExit(main())
