"""Cost of the packed-attention wrapper on a CPU, measured side by side.

    .venv/bin/python benchmarks/bench_packed_attention.py [--reps 7] [--threads 1,2] [--json out.json]

The device op is the CPU emulator of ``npu_fused_infer_attention_score`` behind the seam (what
the NPU would run); bf16, 8 query and 8 KV heads (MHA, as the diffusion models calling this op
have), head dim 128.  Tables (``benchmarks/harness.py``: interleaved, medians and minima, A/A):

1. compaction at scale (the performance goal): 31k query tokens, 10 % of sequences one-sided
   (half KV-only, half query-only); the wrapper (compaction + op + restoring the query-only rows)
   against the op called directly on inputs compacted beforehand, outside the timing.
   Goal: wrapper / op <= 1.05.
2. no one-sided sequence, device path: wrapper vs the op called with upstream's arguments
   (the fast path adds nothing but boundary handling).  Goal <= 1.05.
3. no one-sided sequence, CPU reference path: wrapper vs ``packed_attention_torch`` called
   directly.  Goal <= 1.05.
"""

from __future__ import annotations

import os
import sys
from itertools import pairwise
from pathlib import Path

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from benchmarks import harness  # noqa: E402
from sglang_ascend_hybrid.emulators.fused_infer_attention import (  # noqa: E402
    OP_NAME,
    emulators,
    npu_fused_infer_attention_score,
)
from sglang_ascend_hybrid.ops import seam  # noqa: E402
from sglang_ascend_hybrid.ops.attention.api import fused_infer_attention_varlen  # noqa: E402
from sglang_ascend_hybrid.ops.attention.cases import packed_case, random_lengths  # noqa: E402
from sglang_ascend_hybrid.ops.attention.torch_impl import packed_attention_torch  # noqa: E402

HEADS, KV_HEADS, HEAD_DIM = 8, 8, 128
GOAL = 1.05


def make(num_seqs, max_len, one_sided_fraction, dtype, seed):
    q_lens, k_lens = random_lengths(num_seqs, max_len=max_len, one_sided_fraction=one_sided_fraction, seed=seed)
    return packed_case(q_lens, k_lens, num_heads=HEADS, num_kv_heads=KV_HEADS, head_dim=HEAD_DIM,
                       dtype=dtype, seed=seed)


def op_kwargs(q_ends, k_ends, scale):
    return dict(num_heads=HEADS, num_key_value_heads=KV_HEADS, scale=scale, input_layout="TND",
                actual_seq_lengths=q_ends, actual_seq_lengths_kv=k_ends, softmax_lse_flag=True)


def compacted(case):
    """The op's inputs restricted to the two-sided sequences (built once, outside the timing)."""
    q_rows, k_rows, q_ends, k_ends = [], [], [], []
    for (qs, qe), (ks, ke) in zip(pairwise(case.q_bounds), pairwise(case.k_bounds)):
        if qe > qs and ke > ks:
            q_rows += range(qs, qe)
            k_rows += range(ks, ke)
            q_ends.append(len(q_rows))
            k_ends.append(len(k_rows))
    return (case.q[q_rows].contiguous(), case.k[k_rows].contiguous(), case.v[k_rows].contiguous(),
            q_ends, k_ends)


def compaction_table(threads, reps, smoke):
    num_seqs, max_len = (24, 16) if smoke else (275, 242)
    case = make(num_seqs, max_len, 0.10, torch.bfloat16, seed=3)
    n_one_sided = sum((qe > qs) != (ke > ks) for (qs, qe), (ks, ke) in
                      zip(pairwise(case.q_bounds), pairwise(case.k_bounds)))
    qc, kc, vc, q_ends, k_ends = compacted(case)
    kw = op_kwargs(q_ends, k_ends, case.scale)
    with seam.install_emulators(emulators()):
        wrapper = lambda: fused_infer_attention_varlen(*case.args(), **case.kwargs())  # noqa: E731
        direct = lambda: npu_fused_infer_attention_score(qc, kc, vc, **kw)  # noqa: E731
        out_w = wrapper()[0]
        rows = [r for (qs, qe), (ks, ke) in zip(pairwise(case.q_bounds), pairwise(case.k_bounds))
                if qe > qs and ke > ks for r in range(qs, qe)]
        err = float((out_w[rows].float() - direct()[0].float()).abs().max())
        return harness.measure(
            f"packed attention, {case.q.shape[0]} query tokens, {n_one_sided}/{num_seqs} sequences one-sided",
            [("wrapper (compacting)", wrapper), ("op on compacted inputs", direct)], "wrapper (compacting)",
            [harness.Goal(f"compaction, {n_one_sided}/{num_seqs} one-sided at {case.q.shape[0]} query tokens",
                          "wrapper (compacting)", "op on compacted inputs", GOAL, at_least=False)],
            reps=reps, threads=threads,
            notes=[f"max |wrapper - op| over the two-sided rows: {err:.2e}"])


def fast_path_table(threads, reps, smoke):
    case = make(*((16, 16) if smoke else (64, 128)), 0.0, torch.bfloat16, seed=2)
    kw = op_kwargs([e for s, e in pairwise(case.q_bounds) if e > s],
                   [e for s, e in pairwise(case.k_bounds) if e > s], case.scale)
    with seam.install_emulators(emulators()):
        wrapper = lambda: fused_infer_attention_varlen(*case.args(), **case.kwargs())  # noqa: E731
        direct = lambda: seam.call(OP_NAME, case.q, case.k, case.v, **kw)  # noqa: E731
        return harness.measure(
            f"packed attention, no one-sided sequence, device path ({case.q.shape[0]} query tokens)",
            [("wrapper", wrapper), ("op", direct)], "wrapper",
            [harness.Goal("device path without one-sided sequences", "wrapper", "op", GOAL, at_least=False)],
            reps=reps, threads=threads)


def reference_table(threads, reps, smoke):
    case = make(*((16, 16) if smoke else (64, 128)), 0.0, torch.float32, seed=1)
    wrapper = lambda: fused_infer_attention_varlen(*case.args(), **case.kwargs())  # noqa: E731
    direct = lambda: packed_attention_torch(case.q, case.k, case.v, case.q_bounds,  # noqa: E731
                                                case.k_bounds, case.scale)
    return harness.measure(
        f"packed attention, no one-sided sequence, CPU reference path ({case.q.shape[0]} query tokens)",
        [("wrapper", wrapper), ("reference", direct)], "wrapper",
        [harness.Goal("reference path without one-sided sequences", "wrapper", "reference", GOAL,
                      at_least=False)],
        reps=reps, threads=threads)


def tables_at(args, threads, reps):
    for make_table in (compaction_table, fast_path_table, reference_table):
        yield make_table(threads, reps, args.smoke)


def main(argv=None) -> int:
    return harness.run(__doc__.splitlines()[0], tables_at, argv)


if __name__ == "__main__":
    raise SystemExit(main())
