"""Short-conv torch path vs a straightforward per-sequence loop, on a CPU, side by side.

Run:  .venv/bin/python benchmarks/bench_short_conv.py

1. Prefill: mixed sequence lengths totalling 8192 tokens, dim 2048, width 3, half of
   the sequences resuming a cached prefix, states in a window-major pool (the NPU
   layout, seen through the transposed view the model gets).
2. Decode: batch 64, one token each, same pool layout.

"loop" is the obvious implementation: for each sequence, gather its state, concatenate,
run a depthwise ``F.conv1d`` and write the state back.  "vectorised" is the plugin's
``causal_conv1d_fn`` / ``causal_conv1d_update`` (their torch rung: the CPU path).
Repetitions alternate the order; medians are compared (ratio = loop / vectorised,
> 1 means the plugin is faster).  Both results are checked equal before timing.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from sglang_ascend_hybrid.backends.conv_state_layout import cuda_layout_view  # noqa: E402
from sglang_ascend_hybrid.ops.causal_conv1d import causal_conv1d_fn, causal_conv1d_update  # noqa: E402

DIM, WIDTH, TOTAL, SLOTS, DECODE_BATCH, REPS = 2048, 3, 8192, 160, 64, 7


def loop_prefill(x, weight, bias, qsl, slots, has_init, states):
    s = weight.shape[1] - 1
    out = torch.empty_like(x)
    bounds = qsl.tolist()
    for i in range(len(bounds) - 1):
        a, b = bounds[i], bounds[i + 1]
        slot = int(slots[i])
        init = states[slot, :, :s] if bool(has_init[i]) else x.new_zeros(x.shape[0], s)
        full = torch.cat([init, x[:, a:b]], dim=1)
        out[:, a:b] = F.conv1d(full.unsqueeze(0), weight.unsqueeze(1), bias, groups=x.shape[0])[0]
        states[slot, :, :s] = full[:, -s:]
    return out


def loop_decode(x, weight, bias, slots, states):
    s = weight.shape[1] - 1
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        slot = int(slots[i])
        full = torch.cat([states[slot, :, :s], x[i, :, None]], dim=1)
        out[i] = F.conv1d(full.unsqueeze(0), weight.unsqueeze(1), bias, groups=full.shape[0])[0, :, 0]
        states[slot, :, :s] = full[:, -s:]
    return out


def _time(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def compare(name, loop_fn, vec_fn):
    loop_t, vec_t = [], []
    for rep in range(REPS):
        order = [(loop_t, loop_fn), (vec_t, vec_fn)]
        for bucket, fn in (order if rep % 2 == 0 else order[::-1]):
            bucket.append(_time(fn))
    lm, vm = statistics.median(loop_t), statistics.median(vec_t)
    print(f"{name:<46} loop {lm * 1e3:9.2f} ms   vectorised {vm * 1e3:9.2f} ms   "
          f"ratio (loop/vectorised) {lm / vm:6.2f}x")
    return lm / vm


def main() -> int:
    torch.manual_seed(0)
    torch.set_num_threads(max(1, min(4, torch.get_num_threads())))
    gen = torch.Generator().manual_seed(0)
    lens = torch.randint(1, 2 * TOTAL // 128, (128,), generator=gen)
    lens = (lens.float() * TOTAL / lens.sum()).floor().clamp(min=1).long()
    lens[-1] += TOTAL - int(lens.sum())
    qsl = torch.cat([torch.zeros(1, dtype=torch.long), lens.cumsum(0)]).to(torch.int32)
    batch = lens.numel()
    slots = torch.randperm(SLOTS - 1, generator=gen)[:batch] + 1
    has_init = torch.arange(batch) % 2 == 0
    x = torch.randn(DIM, TOTAL, generator=gen)
    weight = torch.randn(DIM, WIDTH, generator=gen)
    bias = torch.randn(DIM, generator=gen)
    pool = torch.randn(SLOTS, WIDTH - 1, DIM, generator=gen)  # window-major, like the NPU pool

    a, b = pool.clone(), pool.clone()
    ref = loop_prefill(x, weight, bias, qsl, slots, has_init, cuda_layout_view(a))
    got = causal_conv1d_fn(x, weight, bias, query_start_loc=qsl, cache_indices=slots,
                           has_initial_state=has_init, conv_states=cuda_layout_view(b), activation=None)
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(a, b)

    xd = torch.randn(DECODE_BATCH, DIM, generator=gen)
    dslots = slots[:DECODE_BATCH]
    a, b = pool.clone(), pool.clone()
    ref = loop_decode(xd, weight, bias, dslots, cuda_layout_view(a))
    got = causal_conv1d_update(xd, cuda_layout_view(b), weight, bias, conv_state_indices=dslots)
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(a, b)

    print(f"CPU, {torch.get_num_threads()} threads; dim {DIM}, width {WIDTH}, fp32, window-major pool")
    p = compare(f"prefill {batch} seqs / {TOTAL} tokens",
                lambda: loop_prefill(x, weight, bias, qsl, slots, has_init, cuda_layout_view(pool)),
                lambda: causal_conv1d_fn(x, weight, bias, query_start_loc=qsl, cache_indices=slots,
                                         has_initial_state=has_init, conv_states=cuda_layout_view(pool),
                                         activation=None))
    d = compare(f"decode batch {DECODE_BATCH}",
                lambda: loop_decode(xd, weight, bias, dslots, cuda_layout_view(pool)),
                lambda: causal_conv1d_update(xd, cuda_layout_view(pool), weight, bias,
                                             conv_state_indices=dslots))
    ok = p > 1.0 and d > 1.0
    print("vectorised path faster in both:", "yes" if ok else "NO")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
