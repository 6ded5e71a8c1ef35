"""Short conv (LFM2's ``causal_conv1d_fn`` / ``causal_conv1d_update``): the plugin's torch path
against the straightforward PyTorch ways to write it, side by side on a CPU.

Run:  .venv/bin/python benchmarks/bench_short_conv.py [--threads 1,2] [--reps 7] [--smoke] [--json PATH]

Every table is measured by :mod:`benchmarks.harness`: the methods run interleaved (order
rotated every repetition), at each thread count, with the plugin also run a second time as an
A/A control; medians and minima are reported and a goal is met only when both ratios clear the
bar.  Before anything is timed, every method's output and conv-state pool are checked equal
(fp32: 1e-4; fp16 / bf16: within one rounding of the output dtype) to the plugin's.

Workload (the states live in a window-major pool ``[slots, W-1, dim]``, the NPU layout, and
every method gets the transposed ``[slots, dim, W-1]`` view the model code gets):

* prefill, fp32 and bf16: 128 sequences of mixed lengths totalling 8192 tokens, dim 2048,
  width 4; every other sequence resumes a cached state (``has_initial_state``).
  - ``loop``: per sequence, take its state (or zeros), ``cat`` with its tokens, one depthwise
    ``F.conv1d``, write the output slice and the last W-1 columns back;
  - ``padded``: all sequences padded to the longest as one ``[batch, dim, W-1+maxlen]``
    batch (history in front, tokens scattered in with one boolean-mask assignment), one
    ``F.conv1d``, unpadded with one mask index, new states gathered with one ``gather`` and
    written with one ``index_copy_``;
  - ``plugin``: ``causal_conv1d_fn(..., check_values=False)`` (the torch rung, as the
    serving hook calls it);
  - ``bandwidth probe``: ``copy_`` of the fewest bytes the op must move (read x and the
    cached states it resumes, write out and the new states) into an existing buffer, i.e.
    the memory-bandwidth limit; goal: probe / plugin >= 0.25;
  - ``alloc+copy probe`` (no goal): the same copy into a freshly allocated buffer.  Any op
    that returns a new tensor pays for the first touch of its output's pages (page faults),
    which the bandwidth probe does not; this row shows that floor.  With 4 KiB pages it
    is several times the probe; ``THP_MEM_ALLOC_ENABLE=1`` in the environment makes
    PyTorch back large CPU allocations with transparent huge pages (where the kernel
    allows it on request), which cuts it for every method alike.  The table says which.
* decode, fp32 and bf16, batch 64 and 256, one token per sequence, dim 2048, width 4:
  - ``batched conv1d``: gather the states, ``cat`` with x, one grouped ``F.conv1d``, write
    the states back with ``index_copy_`` (the four-line version);
  - ``plugin``: ``causal_conv1d_update(..., check_values=False)`` (graph-capture safe).
  Decode tables run at least ``DECODE_REPS`` (31) interleaved repetitions: a step is well under a
  millisecond, where the machine's noise is largest relative to the call.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from benchmarks.harness import Goal, measure, run  # noqa: E402
from sglang_ascend_hybrid.integration.conv_state_layout import cuda_layout_view  # noqa: E402
from sglang_ascend_hybrid.ops.conv.api import causal_conv1d_fn, causal_conv1d_update  # noqa: E402

DECODE_REPS = 31
FULL = dict(dim=2048, width=4, total=8192, seqs=128, decode_batches=(64, 256))
SMOKE = dict(dim=32, width=4, total=96, seqs=8, decode_batches=(4, 8))
DTYPES = (torch.float32, torch.bfloat16)


# --------------------------------------------------------------------------- baselines


def loop_prefill(x, weight, bias, qsl, slots, has_init, states):
    """Per sequence: state (or zeros) + tokens -> one depthwise F.conv1d."""
    s = weight.shape[1] - 1
    out = torch.empty_like(x)
    bounds, slot_ids, init = qsl.tolist(), slots.tolist(), has_init.tolist()
    w = weight.unsqueeze(1)
    for i in range(len(bounds) - 1):
        a, b = bounds[i], bounds[i + 1]
        hist = states[slot_ids[i], :, :s] if init[i] else x.new_zeros(x.shape[0], s)
        full = torch.cat([hist, x[:, a:b]], dim=1)
        out[:, a:b] = F.conv1d(full.unsqueeze(0), w, bias, groups=x.shape[0])[0]
        states[slot_ids[i], :, :s] = full[:, -s:]
    return out


def padded_prefill(x, weight, bias, qsl, slots, has_init, states):
    """All sequences padded to the longest, one F.conv1d, unpad."""
    s = weight.shape[1] - 1
    dim = x.shape[0]
    lens = (qsl[1:] - qsl[:-1]).long()
    batch, longest = lens.shape[0], int(lens.max())
    mask = torch.arange(longest)[None, :] < lens[:, None]                 # [batch, longest]
    buf = x.new_zeros(batch, dim, s + longest)
    cached = states[:, :, :s].index_select(0, slots)
    buf[:, :, :s] = torch.where(has_init[:, None, None], cached, torch.zeros((), dtype=x.dtype))
    buf.permute(1, 0, 2)[:, :, s:][:, mask] = x                           # tokens in
    out = F.conv1d(buf, weight.unsqueeze(1), bias, groups=dim).permute(1, 0, 2)[:, mask]
    last = (lens[:, None] + torch.arange(s)[None, :])[:, None, :].expand(batch, dim, s)
    states[:, :, :s].index_copy_(0, slots, buf.gather(2, last))
    return out


def batched_decode(x, weight, bias, slots, states):
    """Gather, cat, one grouped F.conv1d, index_copy_ back (the four-line version)."""
    s = weight.shape[1] - 1
    full = torch.cat([states[:, :, :s].index_select(0, slots), x.unsqueeze(-1)], dim=-1)
    out = F.conv1d(full, weight.unsqueeze(1), bias, groups=x.shape[1])[..., 0]
    states[:, :, :s].index_copy_(0, slots, full[:, :, 1:])
    return out


# --------------------------------------------------------------------------- workloads


def _lengths(total: int, seqs: int, gen: torch.Generator) -> torch.Tensor:
    lens = torch.randint(1, 2 * total // seqs, (seqs,), generator=gen)
    lens = (lens.float() * total / lens.sum()).floor().clamp(min=1).long()
    lens[-1] += total - int(lens.sum())
    return lens


def _pool(slots: int, width: int, dim: int, dtype, gen) -> torch.Tensor:
    return torch.randn(slots, width - 1, dim, generator=gen).to(dtype)   # window-major, like the NPU


def _check(name: str, got, ref, dtype) -> None:
    if dtype == torch.float32:
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4, msg=lambda m: f"{name}: {m}")
    else:   # one rounding of the output dtype apart (both accumulate in fp32)
        eps = torch.finfo(dtype).eps
        torch.testing.assert_close(got.float(), ref.float(), rtol=2 * eps,
                                   atol=2 * eps * float(ref.float().abs().max()),
                                   msg=lambda m: f"{name}: {m}")


def prefill_table(cfg, dtype, threads, reps, gen):
    dim, width, total, seqs = cfg["dim"], cfg["width"], cfg["total"], cfg["seqs"]
    s = width - 1
    lens = _lengths(total, seqs, gen)
    qsl = torch.cat([torch.zeros(1, dtype=torch.long), lens.cumsum(0)]).to(torch.int32)
    slots = torch.randperm(seqs + 32, generator=gen)[:seqs]
    has_init = torch.arange(seqs) % 2 == 0
    x = torch.randn(dim, total, generator=gen).to(dtype)
    weight = (torch.randn(dim, width, generator=gen) * 0.5).to(dtype)
    bias = (torch.randn(dim, generator=gen) * 0.1).to(dtype)
    pool = _pool(seqs + 32, width, dim, dtype, gen)

    def plugin(states):
        return causal_conv1d_fn(x, weight, bias, query_start_loc=qsl, cache_indices=slots,
                                has_initial_state=has_init, conv_states=states, activation=None,
                                check_values=False)

    pools = {n: pool.clone() for n in ("plugin", "loop", "padded")}
    ref = plugin(cuda_layout_view(pools["plugin"]))
    for name, fn in (("loop", loop_prefill), ("padded", padded_prefill)):
        got = fn(x, weight, bias, qsl, slots, has_init, cuda_layout_view(pools[name]))
        _check(f"prefill {name} output", got, ref, dtype)
        torch.testing.assert_close(pools[name], pools["plugin"], rtol=0, atol=0)

    # Fewest bytes: read x and the resumed states, write out and every sequence's new state.
    esize = x.element_size()
    state_bytes = dim * s * esize
    moved = 2 * x.numel() * esize + (int(has_init.sum()) + seqs) * state_bytes
    src = torch.ones(moved // 2, dtype=torch.uint8)
    dst = torch.empty_like(src)
    views = {n: cuda_layout_view(p) for n, p in pools.items()}
    methods = [
        ("loop", lambda: loop_prefill(x, weight, bias, qsl, slots, has_init, views["loop"])),
        ("padded", lambda: padded_prefill(x, weight, bias, qsl, slots, has_init, views["padded"])),
        ("plugin", lambda: plugin(views["plugin"])),
        ("bandwidth probe", lambda: dst.copy_(src)),
        ("alloc+copy probe", lambda: torch.empty_like(src).copy_(src)),
    ]
    goals = [Goal(f"prefill {_name(dtype)} vs loop", "loop", "plugin", 1.5),
             Goal(f"prefill {_name(dtype)} vs padded", "padded", "plugin", 1.5),
             Goal(f"prefill {_name(dtype)} bandwidth", "bandwidth probe", "plugin", 0.25)]
    notes = [f"{seqs} sequences, {total} tokens (longest {int(lens.max())}), dim {dim}, width {width}, "
             f"{_name(dtype)}, half resuming a cached state, window-major pool",
             f"bandwidth probe: copy of {moved / 2 ** 20:.1f} MiB moved (read + write) into an existing buffer",
             f"THP_MEM_ALLOC_ENABLE={os.environ.get('THP_MEM_ALLOC_ENABLE', 'unset')}"]
    return measure(f"prefill {_name(dtype)}", methods, "plugin", goals, reps, threads, notes=notes)


def decode_table(cfg, dtype, batch, threads, reps, gen):
    dim, width = cfg["dim"], cfg["width"]
    x = torch.randn(batch, dim, generator=gen).to(dtype)
    weight = (torch.randn(dim, width, generator=gen) * 0.5).to(dtype)
    bias = (torch.randn(dim, generator=gen) * 0.1).to(dtype)
    pool = _pool(batch + 64, width, dim, dtype, gen)
    slots = torch.randperm(batch + 64, generator=gen)[:batch]

    def plugin(states):
        return causal_conv1d_update(x, states, weight, bias, activation=None,
                                    conv_state_indices=slots, check_values=False)

    a, b = pool.clone(), pool.clone()
    ref = plugin(cuda_layout_view(a))
    got = batched_decode(x, weight, bias, slots, cuda_layout_view(b))
    _check("decode batched conv1d output", got, ref, dtype)
    torch.testing.assert_close(a, b, rtol=0, atol=0)

    va, vb = cuda_layout_view(a), cuda_layout_view(b)
    methods = [("batched conv1d", lambda: batched_decode(x, weight, bias, slots, vb)),
               ("plugin", lambda: plugin(va))]
    goals = [Goal(f"decode {_name(dtype)} batch {batch} vs batched conv1d", "batched conv1d", "plugin", 1.2)]
    notes = [f"batch {batch}, one token each, dim {dim}, width {width}, {_name(dtype)}, window-major pool"]
    return measure(f"decode {_name(dtype)} batch {batch}", methods, "plugin", goals, reps, threads,
                   warmup=3, notes=notes)


def _name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def tables_at(args, threads, reps):
    cfg = SMOKE if args.smoke else FULL
    for dtype in DTYPES:
        yield prefill_table(cfg, dtype, threads, reps, torch.Generator().manual_seed(0))
    # a decode step takes well under a millisecond here, where the machine's noise is largest
    # relative to the call: at least DECODE_REPS repetitions (a smoke run keeps its 2)
    decode_reps = reps if args.smoke else max(reps, DECODE_REPS)
    for dtype in DTYPES:
        for batch in cfg["decode_batches"]:
            yield decode_table(cfg, dtype, batch, threads, decode_reps, torch.Generator().manual_seed(1))


def json_extra(args) -> dict:
    cfg = SMOKE if args.smoke else FULL
    return {"config": {k: list(v) if isinstance(v, tuple) else v for k, v in cfg.items()}, "smoke": args.smoke}


def main(argv=None) -> int:
    return run(__doc__.splitlines()[0], tables_at, argv, json_extra)


if __name__ == "__main__":
    raise SystemExit(main())
