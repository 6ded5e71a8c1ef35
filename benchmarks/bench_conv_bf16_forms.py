"""Why the bf16 short-conv bandwidth goal is out of reach of eager torch ops on a CPU: the
ways to compute the bf16 depthwise stream with the kernels' arithmetic (fp32 products and sums,
one rounding) side by side with the bandwidth probe, each without the work on segment starts and
states that the real rung adds.

Run:  .venv/bin/python benchmarks/bench_conv_bf16_forms.py [--threads 1,2] [--reps 7] [--smoke]

One sequence of 8192 tokens, dim 2048, width 4, bf16, no bias (LFM2's short conv has none):

* ``rung``: ``causal_conv1d_fn_torch`` itself (one sequence, no states): the subject;
* ``block loop``: the rung's core alone: per block of channels, widen to fp32, the four shifted
  multiply-adds, round once (what the rung spends before any segment work);
* ``Toeplitz bmm``: the stream cut into 16-token chunks, each chunk's 19 inputs (3 carried in) copied
  into a window buffer (one overlapping copy), then one batched bf16 matmul per block against a
  per-channel ``[19, 16]`` banded matrix of the taps: oneDNN multiplies bf16 exactly, accumulates in
  fp32 and rounds once, the kernels' arithmetic with the sum in another order (checked before timing:
  within one bf16 unit of the rung; the notes say how many outputs differ at all);
* ``bf16 taps``: the four multiply-adds in bf16 (each rounds: *not* the kernels' arithmetic, shown as
  the floor of what elementwise ops cost);
* ``bandwidth probe``: a copy of x's bytes into an existing buffer (read x, write out), the bar.

Each form's "bandwidth" row is probe time / form time against the goal's 0.25; the forms are not
the rung, so their verdicts only say whether a rung built on them could meet the goal at all.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from benchmarks.harness import Goal, measure, run  # noqa: E402
from sglang_ascend_hybrid.ops.conv.torch_impl import (  # noqa: E402
    _BLOCK_ELEMS,
    _stream_taps,
    causal_conv1d_fn_torch,
)

FULL = dict(dim=2048, total=8192, width=4)
SMOKE = dict(dim=32, total=256, width=4)
CHUNK = 16


def block_loop(x, w32, out, wide, acc):
    """Widen a block, the rung's four shifted multiply-adds (``_stream_taps``) in fp32, round once."""
    dim, total = x.shape
    step = max(1, min(dim, _BLOCK_ELEMS // total))
    for c0 in range(0, dim, step):
        c1 = min(c0 + step, dim)
        ab = acc[:c1 - c0]
        _stream_taps(ab, wide[:c1 - c0].copy_(x[c0:c1]), w32[c0:c1], None)
        out[c0:c1].copy_(ab)
    return out


def toeplitz(weight, chunk):
    """Per channel ``[chunk + W-1, chunk]``: window input ``j + k`` feeds output ``j`` with tap ``k``."""
    dim, width = weight.shape
    m = torch.zeros(dim, (chunk + width - 1) * chunk, dtype=weight.dtype)
    j = torch.arange(chunk)
    for k in range(width):
        m[:, (j + k) * chunk + j] = weight[:, k:k + 1]
    return m.view(dim, chunk + width - 1, chunk)


def toeplitz_bmm(x, mats, out, win):
    """Chunk windows (3 inputs carried in, zeros before token 0) and one bf16 bmm per block."""
    dim, total = x.shape
    s, chunks = mats.shape[1] - CHUNK, total // CHUNK
    step = max(1, min(dim, _BLOCK_ELEMS // total))
    for c0 in range(0, dim, step):
        c1 = min(c0 + step, dim)
        wb = win[:c1 - c0]
        src = x.as_strided((c1 - c0, chunks - 1, CHUNK + s), (total, CHUNK, 1), c0 * total + CHUNK - s)
        wb[:, 1:].copy_(src)
        wb[:, 0, :s].zero_()
        wb[:, 0, s:].copy_(x[c0:c1, :CHUNK])
        torch.bmm(wb, mats[c0:c1], out=out[c0:c1].view(c1 - c0, chunks, CHUNK))
    return out


def forms_table(cfg, threads, reps):
    dim, total, width = cfg["dim"], cfg["total"], cfg["width"]
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(dim, total, generator=gen).to(torch.bfloat16)
    weight = (torch.randn(dim, width, generator=gen) * 0.5).to(torch.bfloat16)
    w32 = weight.float()
    qsl = torch.tensor([0, total], dtype=torch.int32)
    step = max(1, min(dim, _BLOCK_ELEMS // total))
    outs = {n: torch.empty_like(x) for n in ("loop", "bmm", "bf16")}
    wide, acc = torch.empty(step, total), torch.empty(step, total)
    mats = toeplitz(weight, CHUNK)
    win = torch.empty(step, total // CHUNK, CHUNK + width - 1, dtype=torch.bfloat16)
    src, dst = torch.ones(x.numel() * 2, dtype=torch.uint8), torch.empty(x.numel() * 2, dtype=torch.uint8)

    rung = causal_conv1d_fn_torch(x, weight, None, qsl, check_values=False)
    loop = block_loop(x, w32, outs["loop"], wide, acc)
    bmm = toeplitz_bmm(x, mats, outs["bmm"], win)
    s = width - 1   # the first W-1 outputs are segment-start outputs (the rung overwrites them)
    if not torch.equal(loop[:, s:], rung[:, s:]):
        raise SystemExit("the block loop differs from the rung: the forms are not comparable")
    ulp = rung[:, s:].float().abs() * 2.0 ** -7 + 1e-30                   # one bf16 unit, at most
    if not bool(((bmm[:, s:].float() - rung[:, s:].float()).abs() <= ulp).all()):
        raise SystemExit("the Toeplitz bmm is more than one bf16 unit from the rung")
    differ = int((bmm[:, s:] != rung[:, s:]).sum())

    methods = [
        ("rung", lambda: causal_conv1d_fn_torch(x, weight, None, qsl, check_values=False)),
        ("block loop", lambda: block_loop(x, w32, outs["loop"], wide, acc)),
        ("Toeplitz bmm", lambda: toeplitz_bmm(x, mats, outs["bmm"], win)),
        ("bf16 taps", lambda: _stream_taps(outs["bf16"], x, weight, None)),
        ("bandwidth probe", lambda: dst.copy_(src)),
    ]
    goals = [Goal(f"{name}: bandwidth", "bandwidth probe", name, 0.25)
             for name in ("rung", "block loop", "Toeplitz bmm", "bf16 taps")]
    notes = [f"one sequence of {total} tokens, dim {dim}, width {width}, bf16, no bias; the forms leave out "
             "the rung's segment-start outputs and states",
             "past the first W-1 tokens: block loop bit-identical to the rung; Toeplitz bmm within one bf16 unit, "
             f"{differ} of {rung[:, s:].numel()} outputs differ (sum order); bf16 taps round every tap "
             "(not the kernels' arithmetic)"]
    return measure("bf16 short-conv stream, by form", methods, "rung", goals, reps, threads, notes=notes)


def tables_at(args, threads, reps):
    yield forms_table(SMOKE if args.smoke else FULL, threads, reps)


def main(argv=None) -> int:
    return run(__doc__.splitlines()[0], tables_at, argv)


if __name__ == "__main__":
    raise SystemExit(main())
