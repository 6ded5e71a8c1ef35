"""GDN on CPU: the torch chunked path vs FLA's naive chunk vs a token-by-token recurrence.

    .venv/bin/python benchmarks/bench_gdn.py

Hv=16, Hk=8, K=V=128, fp32, 2 threads; a single sequence of T=4096 and a varlen
batch of 16 sequences; every method is run in the same process, interleaved,
and the median of the repeats is reported with the ratios.  Then the head
planner's plan and overhead for every row of the Qwen3.5/3.6 table.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F

torch.set_num_threads(2)

from fla.ops.gated_delta_rule.naive import naive_chunk_gated_delta_rule  # noqa: E402

from sglang_ascend_hybrid.ops.gdn.planner import plan_for  # noqa: E402
from sglang_ascend_hybrid.ops.gdn.reference import chunk_gdn_torch, l2norm  # noqa: E402

HV, HK, K, V = 16, 8, 128, 128


def _inputs(lens, seed=0):
    gen = torch.Generator().manual_seed(seed)
    T = sum(lens)
    q = l2norm(torch.randn(1, T, HK, K, generator=gen))
    k = l2norm(torch.randn(1, T, HK, K, generator=gen))
    v = torch.randn(1, T, HV, V, generator=gen)
    g = F.logsigmoid(torch.randn(1, T, HV, generator=gen) + 2.0)
    beta = torch.rand(1, T, HV, generator=gen)
    cu = torch.tensor([0] + lens).cumsum(0)
    return q, k, v, g, beta, cu


def torch_chunked(q, k, v, g, beta, cu):
    return chunk_gdn_torch(q, k, v, g, beta, cu_seqlens=cu)[:2]


def fla_naive_chunk(q, k, v, g, beta, cu):
    qe, ke = q.repeat_interleave(HV // HK, 2), k.repeat_interleave(HV // HK, 2)
    outs = []
    b = cu.tolist()
    for s in range(len(b) - 1):
        sl = slice(b[s], b[s + 1])
        outs.append(naive_chunk_gated_delta_rule(qe[:, sl], ke[:, sl], v[:, sl], g[:, sl], beta[:, sl],
                                                 output_final_state=True)[0])
    return torch.cat(outs, 1)


def token_recurrence(q, k, v, g, beta, cu):
    """Batched over heads, one token at a time (the shape of a decode loop)."""
    scale = K ** -0.5
    qe, ke = q[0].repeat_interleave(HV // HK, 1), k[0].repeat_interleave(HV // HK, 1)
    out = torch.empty(q.shape[1], HV, V)
    b = cu.tolist()
    for s in range(len(b) - 1):
        S = torch.zeros(HV, V, K)
        for t in range(b[s], b[s + 1]):
            S.mul_(g[0, t].exp()[:, None, None])
            u = beta[0, t][:, None] * (v[0, t] - torch.bmm(S, ke[t].unsqueeze(-1)).squeeze(-1))
            S.add_(u.unsqueeze(-1) * ke[t].unsqueeze(-2))
            out[t] = torch.bmm(S, (qe[t] * scale).unsqueeze(-1)).squeeze(-1)
    return out


def _time(fn, args, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench(name, lens, repeats=3):
    args = _inputs(lens)
    # sanity: the three agree
    o_t = torch_chunked(*args)[0][0]
    err = (o_t - fla_naive_chunk(*args)[0]).abs().max().item()
    methods = [("torch chunked", torch_chunked), ("FLA naive chunk", fla_naive_chunk),
               ("token recurrence", token_recurrence)]
    times = {m: [] for m, _ in methods}
    for _ in range(repeats):  # interleaved so load changes hit every method alike
        for m, fn in methods:
            times[m].append(_time(fn, args, 1))
    med = {m: statistics.median(t) for m, t in times.items()}
    base = med["torch chunked"]
    print(f"\n{name}: T={sum(lens)} ({len(lens)} sequences), Hv={HV} Hk={HK} K=V={K} fp32, "
          f"max |torch - FLA| = {err:.2e}")
    for m in med:
        print(f"  {m:18s} {med[m] * 1e3:9.1f} ms   {med[m] / base:6.2f}x the torch chunked time")
    return med


# The goals (issue 4) are set for the single T=4096 sequence: at least this many times
# faster than each method.  The varlen batch is reported against the same bars, as
# information.
GOALS = {"FLA naive chunk": 2.0, "token recurrence": 5.0}
GOAL_CASE = "single sequence"


def verdict(results):
    """One line for the goals (T=4096), one informative line for the other cases."""
    for case, med in results.items():
        checks = []
        for m, goal in GOALS.items():
            ratio = med[m] / med["torch chunked"]
            checks.append((ratio >= goal, f"{ratio:.2f}x vs {m} (bar {goal:g}x)"))
        ok = all(c for c, _ in checks)
        label = "VERDICT (goal)" if case == GOAL_CASE else "info"
        print(f"\n{label}: {case}: {'meets' if ok else 'BELOW'} the bars -- "
              + "; ".join(("" if c else "below: ") + text for c, text in checks), end="")
    print()


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


if __name__ == "__main__":
    results = {"single sequence": bench("single sequence", [4096])}
    gen = torch.Generator().manual_seed(1)
    lens = torch.randint(1, 512, (16,), generator=gen).tolist()
    results["varlen batch"] = bench("varlen batch", lens)
    verdict(results)
    planner_table()
