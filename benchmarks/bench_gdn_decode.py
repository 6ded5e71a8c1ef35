"""GDN decode on CPU: the torch rung of the decode ladder vs the implementation it replaced.

    .venv/bin/python benchmarks/bench_gdn_decode.py [--reps 7] [--threads 1,2] [--json out.json]

One decode step of batch 256 (Hv 16, Hk 8, K = V = 128; an fp32 pool of 264 slots, rows picked
in random order, as a serving batch does), through the public op
``recurrent_gated_delta_rule(..., backend="torch", check_values=False)`` (the serving decode path:
capture-safe, no host sync).  Rows, side by side in one process (``benchmarks/harness.py``):

* ``torch rung``: the plugin's blocked in-place step (``ops/gdn/pool_step.py``);
* ``previous``: the implementation it replaced, kept here verbatim as the baseline (gather the
  rows, ``reference.naive_recurrent_step`` out of place, ``scatter_agreeing`` back);
* ``2-pass floor``: gathering the same rows into a preallocated buffer and scattering them back,
  i.e. one read and one write of every state row, the minimum any step must move.

Goal: the torch rung at least 3x faster than ``previous``.  Bytes: the 2-pass
minimum per step is ``2 * B * Hv * V * K * 4``; the table reports the time of each method as
a multiple of the floor and the bandwidth it implies.  A bf16 pool is measured the same way.
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
from sglang_ascend_hybrid.ops.gdn.api import recurrent_gated_delta_rule  # noqa: E402
from sglang_ascend_hybrid.ops.gdn.naive import naive_recurrent_step  # noqa: E402
from sglang_ascend_hybrid.ops.gdn.torch_impl import l2norm  # noqa: E402

HV, HK, K, V = 16, 8, 128, 128
GOAL_SPEEDUP = 3.0


def case(batch: int, pool_dtype: torch.dtype, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    slots_in_pool = batch + 8
    q = torch.randn(1, batch, HK, K, generator=gen).bfloat16()
    k = torch.randn(1, batch, HK, K, generator=gen).bfloat16()
    v = torch.randn(1, batch, HV, V, generator=gen).bfloat16()
    g = F.logsigmoid(torch.randn(1, batch, HV, generator=gen) + 2)
    beta = torch.rand(1, batch, HV, generator=gen).bfloat16()
    pool = (torch.randn(slots_in_pool, HV, V, K, generator=gen) * 0.1).to(pool_dtype)
    idx = torch.randperm(slots_in_pool, generator=gen)[:batch].to(torch.int32)
    return q, k, v, g, beta, pool, idx


def scatter_agreeing(target, rows, valid, values):
    """The previous implementation's scatter, verbatim: padding rows get the value row 0 ends with
    (a pass over ``values``), then one ``index_copy_``."""
    owns0 = valid & (rows == 0)
    owner = owns0.to(torch.int32).argmax()
    fill = torch.where(owns0.any(), values.index_select(0, owner.view(1))[0], target[0].to(values.dtype))
    mask = valid.view(-1, *([1] * (values.dim() - 1)))
    torch.where(mask, values, fill, out=values)
    target.index_copy_(0, torch.where(valid, rows, torch.zeros_like(rows)),
                       values if values.dtype == target.dtype else values.to(target.dtype))


def previous_decode(q, k, v, g, beta, *, state_pool, state_indices, scale=None):
    """The replaced torch decode path, verbatim in substance: gather, out-of-place step, scatter."""
    B, Hv, Vd = v.shape[1], v.shape[2], v.shape[3]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    out = torch.zeros(1, B, Hv, Vd, dtype=q.dtype)
    idx = state_indices.long()
    live = idx >= 0
    slots = idx.clamp(min=0)
    o, new = naive_recurrent_step(l2norm(q[0]), l2norm(k[0]), v[0], g[0], beta[0], state_pool.index_select(0, slots),
                            scale=scale)
    scatter_agreeing(state_pool, slots, live, new.float())
    out[0] = torch.where(live.view(B, 1, 1), o.to(q.dtype), out[0])
    return out


def torch_rung(q, k, v, g, beta, *, state_pool, state_indices):
    return recurrent_gated_delta_rule(q, k, v, g, beta, state_pool=state_pool, state_indices=state_indices,
                                      backend="torch", check_values=False, use_qk_l2norm=True)


def check_agreement(args) -> float:
    q, k, v, g, beta, pool, idx = args
    a, b = pool.clone(), pool.clone()
    oa = torch_rung(q, k, v, g, beta, state_pool=a, state_indices=idx)
    ob = previous_decode(q, k, v, g, beta, state_pool=b, state_indices=idx)
    return max(float((oa.float() - ob.float()).abs().max()), float((a.float() - b.float()).abs().max()))


def table(batch: int, pool_dtype: torch.dtype, threads: int, reps: int) -> harness.Table:
    args = case(batch, pool_dtype)
    q, k, v, g, beta, pool, idx = args
    err = check_agreement(args)
    pools = {name: pool.clone() for name in ("rung", "previous", "floor")}
    rows = idx.long()
    buf = torch.empty(batch, *pool.shape[1:], dtype=pool.dtype)

    def floor():
        torch.index_select(pools["floor"], 0, rows, out=buf)
        pools["floor"].index_copy_(0, rows, buf)

    methods = [
        ("torch rung", lambda: torch_rung(q, k, v, g, beta, state_pool=pools["rung"], state_indices=idx)),
        ("previous", lambda: previous_decode(q, k, v, g, beta, state_pool=pools["previous"], state_indices=idx)),
        ("2-pass floor", floor),
    ]
    min_bytes = 2 * batch * HV * V * K * pool.element_size()
    dtype = str(pool_dtype).replace("torch.", "")
    t = harness.measure(
        f"GDN decode step, batch {batch}, {dtype} pool", methods, "torch rung",
        [harness.Goal(f"decode batch {batch} {dtype}: >= {GOAL_SPEEDUP:g}x faster than the previous "
                      "implementation", "previous", "torch rung", GOAL_SPEEDUP)],
        reps=reps, threads=threads,
        notes=[f"max |torch rung - previous| over outputs and states: {err:.2e}",
               f"2-pass minimum: {min_bytes / 1e6:.1f} MB per step (read + write every state row once)"])
    for name in ("torch rung", "previous", "2-pass floor"):
        med = t.median(name)
        t.notes.append(f"{name:>12}: {med / t.median('2-pass floor'):5.2f}x the floor's time, "
                       f"{min_bytes / med / 1e9:6.2f} GB/s of the 2-pass minimum")
    return t


def tables_at(args, threads, reps):
    for pool_dtype in (torch.float32, torch.bfloat16):
        yield table(8 if args.smoke else 256, pool_dtype, threads, reps)


def main(argv=None) -> int:
    return harness.run(__doc__.splitlines()[0], tables_at, argv)


if __name__ == "__main__":
    raise SystemExit(main())
