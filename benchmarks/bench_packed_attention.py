"""Cost of the packed-attention wrapper on a CPU, measured side by side.

Run:  .venv/bin/python benchmarks/bench_packed_attention.py

1. No one-sided sequences, CPU reference path: ``fused_infer_attention_varlen``
   vs ``packed_attention_reference`` called directly (target: <= 1.05), next to
   an A/A control (the reference against itself) showing the machine's noise.
2. No one-sided sequences, device path (CPU emulator standing in for the NPU op):
   wrapper vs the op called directly with upstream's arguments.
3. 10% of sequences one-sided, device path: wrapper (compaction + op + scatter)
   vs the op called directly on already-compacted inputs, i.e. the compaction
   cost as a ratio.

Repetitions are interleaved (the order alternates) and medians compared.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from itertools import pairwise
from pathlib import Path

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from sglang_ascend_hybrid.emulators.fused_infer_attention import (  # noqa: E402
    OP_NAME,
    emulators,
    npu_fused_infer_attention_score,
)
from sglang_ascend_hybrid.ops import seam  # noqa: E402
from sglang_ascend_hybrid.ops.packed_attention import (  # noqa: E402
    fused_infer_attention_varlen,
    packed_attention_reference,
    packed_case,
    random_lengths,
)

NUM_SEQS = 40
MAX_LEN = 40
HEADS = (8, 2)
HEAD_DIM = 64
REPS = 41


def side_by_side(a, b, reps=REPS):
    """Median seconds of a and b and the median of the per-repetition ratios a/b,
    alternating which of the pair runs first (robust to a noisy shared machine)."""
    for _ in range(3):  # warm up (allocator, caches, first-call logging)
        a(), b()
    ta, tb = [], []
    for i in range(reps):
        for fn, sink in ((a, ta), (b, tb)) if i % 2 == 0 else ((b, tb), (a, ta)):
            start = time.perf_counter()
            fn()
            sink.append(time.perf_counter() - start)
    ratio = statistics.median(x / y for x, y in zip(ta, tb))
    return statistics.median(ta), statistics.median(tb), ratio, min(ta) / min(tb)


def make(one_sided_fraction, dtype, seed):
    q_lens, k_lens = random_lengths(NUM_SEQS, max_len=MAX_LEN,
                                    one_sided_fraction=one_sided_fraction, seed=seed)
    return packed_case(q_lens, k_lens, num_heads=HEADS[0], num_kv_heads=HEADS[1],
                       head_dim=HEAD_DIM, dtype=dtype, seed=seed)


def op_kwargs(q_ends, k_ends, scale):
    return dict(num_heads=HEADS[0], num_key_value_heads=HEADS[1], scale=scale,
                input_layout="TND", actual_seq_lengths=q_ends, actual_seq_lengths_kv=k_ends,
                softmax_lse_flag=True)


def compacted(case):
    """Inputs of the op restricted to two-sided sequences (precomputed)."""
    q_rows, k_rows, q_ends, k_ends = [], [], [], []
    for (qs, qe), (ks, ke) in zip(pairwise(case.q_bounds), pairwise(case.k_bounds)):
        if qe > qs and ke > ks:
            q_rows += range(qs, qe)
            k_rows += range(ks, ke)
            q_ends.append(len(q_rows))
            k_ends.append(len(k_rows))
    return (case.q[q_rows].contiguous(), case.k[k_rows].contiguous(),
            case.v[k_rows].contiguous(), q_ends, k_ends)


def main():
    torch.set_num_threads(1)
    rows = []

    # 1. reference path, no one-sided sequences
    case = make(0.0, torch.float32, seed=1)
    wrapper = lambda: fused_infer_attention_varlen(*case.args(), **case.kwargs())  # noqa: E731
    direct = lambda: packed_attention_reference(case.q, case.k, case.v, case.q_bounds,  # noqa: E731
                                                case.k_bounds, case.scale)
    rows.append(("reference path, no one-sided: wrapper / reference", *side_by_side(wrapper, direct)))
    rows.append(("noise floor: reference / reference (A/A control)", *side_by_side(direct, direct)))

    with seam.install_emulators(emulators()):
        # 2. device path (emulated op), no one-sided sequences
        case = make(0.0, torch.bfloat16, seed=2)
        ends = lambda b: [e for s, e in pairwise(b) if e > s]  # noqa: E731
        kw = op_kwargs(ends(case.q_bounds), ends(case.k_bounds), case.scale)
        wrapper = lambda: fused_infer_attention_varlen(*case.args(), **case.kwargs())  # noqa: E731
        direct = lambda: seam.call(OP_NAME, case.q, case.k, case.v, **kw)  # noqa: E731
        rows.append(("device path, no one-sided: wrapper / op", *side_by_side(wrapper, direct)))

        # 3. device path, 10% one-sided: compaction cost
        case = make(0.10, torch.bfloat16, seed=3)
        n_one_sided = sum((qe > qs) != (ke > ks) for (qs, qe), (ks, ke) in
                          zip(pairwise(case.q_bounds), pairwise(case.k_bounds)))
        qc, kc, vc, q_ends, k_ends = compacted(case)
        kw = op_kwargs(q_ends, k_ends, case.scale)
        wrapper = lambda: fused_infer_attention_varlen(*case.args(), **case.kwargs())  # noqa: E731
        direct = lambda: npu_fused_infer_attention_score(qc, kc, vc, **kw)  # noqa: E731
        rows.append((f"device path, {n_one_sided}/{NUM_SEQS} one-sided: wrapper (compact) / op",
                     *side_by_side(wrapper, direct)))

    print(f"packed attention on CPU: {NUM_SEQS} seqs, len <= {MAX_LEN}, heads {HEADS}, "
          f"head_dim {HEAD_DIM}, {REPS} interleaved reps, medians, 1 thread")
    for name, ta, tb, ratio, ratio_min in rows:
        print(f"  {name:<58s} {ta * 1e3:7.3f} ms / {tb * 1e3:7.3f} ms   ratio {ratio:.3f}  "
              f"(best-of ratio {ratio_min:.3f}, median difference {(ta - tb) * 1e6:+8.1f} us)")
    print("ratio = median over repetitions of (wrapper time / direct time); best-of ratio = "
          "fastest wrapper run / fastest direct run (least sensitive to other load). "
          "Target for the first row: <= 1.05")


if __name__ == "__main__":
    main()
