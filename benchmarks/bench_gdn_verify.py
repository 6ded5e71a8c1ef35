"""GDN speculative verify on CPU: the plugin's torch verify rung vs the loops a user would write.

    .venv/bin/python benchmarks/bench_gdn_verify.py [--reps 7] [--threads 1,2] [--json out.json]

Batch 32, S = 4 draft tokens, Hv = 16, Hk = 8, K = V = 128, fp32 pool and scratch, bf16 mix_qkv
(as SGLang hands it over).  Compared side by side (``benchmarks/harness.py``: interleaved, medians
and minima, A/A row), every method writing every intermediate state into the scratch:

* ``verify rung``: ``ops/gdn/verify.verify_torch`` (the MTP fallback for fp32 pools);
* ``token loop``: per request, per token, the recurrence batched over heads (from the op's contract);
* ``batched token loop``: per token, all requests at once with ``reference.naive_recurrent_step``.

Goal: the rung ahead of both loops (ratio loop / rung >= 1), at 1 and 2 threads.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from benchmarks import harness  # noqa: E402
from sglang_ascend_hybrid.ops.gdn import verify as gv  # noqa: E402
from sglang_ascend_hybrid.ops.gdn.naive import naive_recurrent_step  # noqa: E402
from sglang_ascend_hybrid.ops.gdn.torch_impl import l2norm  # noqa: E402

BATCH, S, HV, HK, K, V = 32, 4, 16, 8, 128, 128


def _case(seed=0):
    B = BATCH
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
    B = mix.shape[0]
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


def batched_token_loop(mix, pool, scratch, beta, g, cache, lens, idx, nat):
    """Per token, all requests at once (the readable ``naive_recurrent_step``); writes every step's states."""
    B = mix.shape[0]
    q, k, v = torch.split(mix.float(), [HK * K, HK * K, HV * V], dim=-1)
    q, k, v = l2norm(q.view(B, S, HK, K)), l2norm(k.view(B, S, HK, K)), v.view(B, S, HV, V)
    state = pool.index_select(0, cache.long())
    out = torch.empty(B, S, HV, V)
    for t in range(S):
        out[:, t], state = naive_recurrent_step(q[:, t], k[:, t], v[:, t], g[:, t], torch.sigmoid(beta[:, t]), state)
        scratch.index_copy_(0, idx[:, t].long(), state)
    return out


def table(threads: int, reps: int, batch: int) -> harness.Table:
    global BATCH
    BATCH = batch
    case = _case()
    ref = token_loop(*case)
    err = max(float((verify_rung(*case).float() - ref).abs().max()),
              float((batched_token_loop(*case) - ref).abs().max()))
    methods = [(name, (lambda fn: lambda: fn(*case))(fn)) for name, fn in
               (("verify rung", verify_rung), ("token loop", token_loop), ("batched token loop", batched_token_loop))]
    return harness.measure(
        f"GDN verify, B={batch} S={S} Hv={HV} Hk={HK} K=V={K}, fp32 pool", methods, "verify rung",
        [harness.Goal("verify rung ahead of the per-request token loop", "token loop", "verify rung", 1.0),
         harness.Goal("verify rung ahead of the batched token loop", "batched token loop", "verify rung", 1.0)],
        reps=reps, threads=threads, notes=[f"max |method - token loop| over outputs: {err:.2e}"])


def main(argv=None) -> int:
    return harness.run(__doc__.splitlines()[0],
                       lambda args, threads, reps: [table(threads, reps, 2 if args.smoke else 32)], argv)


if __name__ == "__main__":
    raise SystemExit(main())
