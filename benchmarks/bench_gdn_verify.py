"""GDN speculative verify on CPU: the plugin's torch verify rung vs a token loop (the MTP issue).

    .venv/bin/python benchmarks/bench_gdn_verify.py [--repeats 9]

Batch 32, S = 4 draft tokens, Hv = 16, Hk = 8, K = V = 128, fp32 pool and scratch, bf16 mix_qkv
(as SGLang hands it over).  The token loop is what one would write from the op's contract: per
request, per token, the recurrence batched over heads, writing every intermediate state.  Both
run in one process, interleaved repetition by repetition, at 1 and at 2 threads; medians and
minima, with an A/A control row (the verify rung against itself) that shows the noise.  Check
the load (``uptime``) first: a ratio from a loaded machine is not a result.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.nn.functional as F

from sglang_ascend_hybrid.ops.gdn import verify as gv

B, S, HV, HK, K, V = 32, 4, 16, 8, 128, 128


def _case(seed=0):
    gen = torch.Generator().manual_seed(seed)
    mix = torch.randn(B, S, (2 * HK) * K + HV * V, generator=gen).bfloat16()
    pool = torch.randn(B + 1, HV, V, K, generator=gen) * 0.1
    scratch = torch.zeros((B + 1) * S, HV, V, K)
    beta = torch.randn(B, S, HV, generator=gen)
    g = F.logsigmoid(torch.randn(B, S, HV, generator=gen) + 2)
    cache = torch.arange(1, B + 1, dtype=torch.int32)
    lens = torch.full((B,), S, dtype=torch.int32)
    idx = torch.arange(B * S, dtype=torch.int32).view(B, S)
    nat = torch.ones(B, dtype=torch.int32)
    return mix, pool, scratch, beta, g, cache, lens, idx, nat


def verify_rung(mix, pool, scratch, beta, g, cache, lens, idx, nat):
    call = gv.VerifyCall(mix, pool, beta, g, K ** -0.5, lens, idx, HK, HV, intermediate_state=scratch,
                         cache_indices=cache, num_accepted_tokens=nat)
    return gv.verify_torch(call)


def token_loop(mix, pool, scratch, beta, g, cache, lens, idx, nat):
    """Per request and token, batched over heads; writes every intermediate state."""
    out = torch.empty(B, S, HV, V)
    r = HV // HK
    x = mix.float()
    for b in range(B):
        state = pool[int(cache[b])].clone()
        for t in range(S):
            q, k, v = torch.split(x[b, t], [HK * K, HK * K, HV * V])
            q = F.normalize(q.view(HK, K), dim=-1, eps=1e-6).repeat_interleave(r, 0) * K ** -0.5
            k = F.normalize(k.view(HK, K), dim=-1, eps=1e-6).repeat_interleave(r, 0)
            state.mul_(g[b, t].exp()[:, None, None])
            u = torch.sigmoid(beta[b, t])[:, None] * (v.view(HV, V) - torch.bmm(state, k.unsqueeze(-1)).squeeze(-1))
            state.add_(u.unsqueeze(-1) * k.unsqueeze(-2))
            out[b, t] = torch.bmm(state, q.unsqueeze(-1)).squeeze(-1)
            scratch[int(idx[b, t])] = state
    return out


def measure(threads: int, repeats: int) -> dict:
    torch.set_num_threads(threads)
    case = _case()
    ref = token_loop(*case)
    got = verify_rung(*case)
    err = float((got.float() - ref).abs().max())
    fns = {"verify rung": verify_rung, "token loop": token_loop, "verify rung (A/A)": verify_rung}
    times = {name: [] for name in fns}
    for fn in fns.values():  # warm-up
        fn(*case)
    for _ in range(repeats):  # interleaved
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn(*case)
            times[name].append(time.perf_counter() - t0)
    return {"threads": threads, "err": err, "times": times}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=9)
    args = ap.parse_args()
    print(f"load average: {os.getloadavg()}")
    print(f"GDN verify, B={B} S={S} Hv={HV} Hk={HK} K=V={K}, fp32 pool, {args.repeats} interleaved repeats")
    for threads in (1, 2):
        r = measure(threads, args.repeats)
        t = r["times"]
        med = {k: statistics.median(v) for k, v in t.items()}
        mins = {k: min(v) for k, v in t.items()}
        print(f"\n{threads} thread(s); max |verify - loop| = {r['err']:.2e}")
        for name in t:
            print(f"  {name:18s} median {med[name] * 1e3:8.2f} ms   min {mins[name] * 1e3:8.2f} ms")
        print(f"  ratio loop / verify rung: median {med['token loop'] / med['verify rung']:.2f}x, "
              f"min {mins['token loop'] / mins['verify rung']:.2f}x")
        print(f"  A/A control (verify / verify): median {med['verify rung (A/A)'] / med['verify rung']:.3f}, "
              f"min {mins['verify rung (A/A)'] / mins['verify rung']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
