"""Host time the plugin's hooks add per layer call, against SGLang's own call of its kernel.

    .venv/bin/python benchmarks/bench_hook_overhead.py [--reps 15] [--threads 1,2] [--json out.json]

Every device op is a *stub* behind the seam (:mod:`sglang_ascend_hybrid.ops.seam`): it does no
math, counts its calls and returns a preallocated tensor of the op's output shape.  What is timed
is therefore the host work around the kernel: argument parsing, shape / dtype checks, the ladder's
choice, views, casts, and the small torch ops a hook adds (on an NPU each of those is one more
launch; here it runs on CPU tensors of the serving shapes).  One table per verb, at 1 and 2 threads
(``benchmarks/harness.py``), methods interleaved:

* ``upstream``: SGLang's own call path (0.5.23) transcribed, its kernels the same stubs:
  ``AscendGDNAttnBackend.chunk_gdn`` (two ``l2norm_fwd`` launches, the fp32 cast of g, the chunk
  indices from ``prepare_chunk_indices``, a hit of its ``tensor_cache`` as in every layer after a
  step's first (:class:`RecentCallCache`), ``h = k.new_empty(...)``, ``torch.ops.npu.chunk_gated_delta_rule``),
  ``TritonGDNKernel.decode`` (one call of the sgl-kernel-npu Triton decode entry),
  ``forward_extend``'s target-verify gates (``fused_gdn_gating_kernel_without_sigmoid`` and SGLang's views of
  g / beta) then ``fused_recurrent_gated_delta_rule_update`` (casts, the graph-mode index tensors,
  ``torch.ops.npu.recurrent_gated_delta_rule``), ``causal_conv1d_fn`` / ``causal_conv1d_update`` off
  CUDA (the Triton entry, here the stub, with ``seq_lens_cpu``);
* ``plugin``: the plugin's AROUND hook called the way SGLang's HookRegistry calls it
  (``hook(original, self, *args)``), serving the call on the rung a real deployment takes:

  ``gdn extend``          ``ascend_chunk_gdn`` -> q / k on ``l2norm_fwd`` (the l2norm ladder's
                          ``npu_l2norm``, as upstream) -> prefill ladder -> ``npu_chunk`` (A3, bf16 pool)
  ``gdn decode triton``   ``ascend_gdn_decode`` -> ``triton_decode`` (its layout probe found the
                          installed entry value-first; the verdict is recorded, not probed)
  ``gdn decode npu_recurrent`` ``ascend_gdn_decode`` -> ``npu_recurrent`` (the probe found the entry
                          key-first, the sgl-kernel-npu source's addressing; bf16 pool): the op
                          runs on the pool in place; this route also computes the gates, on
                          sgl-kernel-npu's ``fused_gdn_gating_npu`` (the decode gates ladder's
                          ``npu_gating``; the Triton entry computes them itself)
  ``gdn verify``          ``ascend_verify_gates`` -> verify-gates ladder -> ``without_sigmoid`` (the kernel
                          SGLang calls, handed as the original), then ``ascend_verify_update`` (graph mode) ->
                          verify ladder -> ``npu_recurrent``
  ``conv prefill``        ``causal_conv1d_fn_around`` -> ``torch.ops.npu.causal_conv1d`` (run mode 0)
  ``conv decode``         ``causal_conv1d_update_around`` -> ``torch.ops.npu.causal_conv1d`` (run mode 1)

Shapes: Qwen3.6-27B at TP=8 per rank (6 value heads, 2 key heads, K = V = 128, bf16), decode and
verify batch 8 (verify 4 tokens per request), extend 128 tokens in 2 requests (96 + 32); LFM2 conv
dim 1024, width 3, bf16, decode batch 8, prefill 128 tokens in 2 requests.

Each verb's plugin method is one layer call of a step whose earlier layers already ran (the same
metadata tensors every call), as every layer after a step's first is; what the plugin derives once
per step (``ops/step_cache.py``, the extend hook's host copy of the offsets) is therefore kept.

Each repetition calls a method ``--inner`` times (default 200); times are per call.  Goal per verb
and thread count: ``plugin - upstream <= 30 us`` (a difference goal, on the medians and on the
minima).  Conv prefill is also checked against ``upstream + x copy``: the op takes x token-major while
SGLang hands it dim-major, so the plugin must add one transposed copy (no released kernel takes x as
SGLang hands it), a launch whose copying is device time on an NPU and host time here; that goal is the
plugin's host work beyond the copy.  GDN decode and verify are also checked against ``upstream + zeroing``:
the recurrent op and the Triton decode entry leave the rows of padded requests (verify: also the rows past a
request's length) unwritten, so the plugin zeroes them with one ``masked_fill_``, a launch whose fill is device
time on an NPU and host time here (about 10 us of it at verify's output size); that goal is the plugin's host
work beyond the fill (the baseline includes the fill's launch, about 1 us).  Before timing, every verb is
checked once: the plugin's output is the stub's (its recognisable values), each call ran its verb's stub
once, and no matmul-class ATen op ran (no real math); the ATen op count of one call of each method is
printed beside the table (each op is one launch on an NPU).
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from benchmarks import harness  # noqa: E402
from sglang_ascend_hybrid.integration import conv_hooks, gdn_hooks  # noqa: E402
from sglang_ascend_hybrid.ops import probes, seam  # noqa: E402
from sglang_ascend_hybrid.ops.conv import contract as conv_contract  # noqa: E402
from sglang_ascend_hybrid.ops.gdn import contract as gdn_contract  # noqa: E402
from sglang_ascend_hybrid.ops.gdn.decode import contract as decode_contract  # noqa: E402
from sglang_ascend_hybrid.ops.gdn.decode import probe as decode_probe  # noqa: E402

GOAL_ADDED_S = 30e-6          # at most 30 us added per layer call
INNER = 200                   # calls per repetition and method
HV, HK, K, V = 6, 2, 128, 128  # Qwen3.6-27B per rank at TP=8
DECODE_BATCH, DRAFT = 8, 4
EXTEND_LENS = (96, 32)
CONV_DIM, CONV_WIDTH = 1024, 3  # LFM2
SLOTS = 32                    # pool slots per layer
BF16 = torch.bfloat16
ENTRY = "optimized"           # the decode entry SGLang 0.5.21+ imports
MATH_OPS = ("aten.mm", "aten.bmm", "aten.addmm", "aten.matmul", "aten.baddbmm", "aten.einsum",
            "aten.convolution", "aten._softmax", "aten.linalg_vector_norm")


class Stub:
    """A device op that does no math: counts its calls and returns preallocated output(s)."""

    def __init__(self, name: str, output):
        self.name, self.output, self.calls = name, output, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.output


class ShapedStub(Stub):
    """A stub of an op whose output has its input's shape (``l2norm_fwd``): a preallocated output per
    input shape (a view of the one buffer made on the first call of each shape, so that a call costs
    what the other stubs' calls cost, not a view op the real kernel does not make)."""

    def __init__(self, name: str, output):
        super().__init__(name, output)
        self.shaped: dict = {}

    def __call__(self, x, *args, **kwargs):
        self.calls += 1
        out = self.shaped.get(x.shape)
        if out is None:
            out = self.shaped[x.shape] = self.output.view(x.shape)
        return out


def _marked(*shape, dtype=BF16) -> torch.Tensor:
    """A preallocated stub output with recognisable values (so the plugin's result can be traced to it)."""
    n = 1
    for s in shape:
        n *= s
    return (torch.arange(n, dtype=torch.float32).remainder(251) / 8 + 1).to(dtype).reshape(shape)


@dataclass
class Verb:
    name: str
    rung: str
    upstream: Callable[[], object]
    plugin: Callable[[], object]
    stubs: dict                            # seam name -> Stub
    expect: Callable[[object], bool]       # the plugin's result is the stub's output
    counted: tuple                         # the stubs each plugin call must call once
    setup: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext
    notes: list = field(default_factory=list)
    # (name, fn): a piece of the plugin's call timed beside it, e.g. a copy that is device work on an NPU
    context: list = field(default_factory=list)
    # names of context entries the goal is also checked against (a second baseline: upstream plus a device
    # op the plugin must add, whose copying is device time on an NPU)
    baselines: tuple = ()


ZEROING_NOTE = ("zeroing: the plugin's masked_fill_ of the {what} alone (one bf16 {shape} output, as the op leaves "
                "them unwritten); on an NPU one launch whose fill is device time, here host time; 'upstream + "
                "zeroing': that fill (its launch included), then upstream's call")


def _zeroing(upstream, out: torch.Tensor, mask: torch.Tensor):
    """The plugin's zeroing of the rows a kernel leaves unwritten, alone and before upstream's call: a device
    launch whose fill the CPU does here (``out.masked_fill_(mask, 0)`` on the served output's shape)."""
    def zeroing():
        return out.masked_fill_(mask, 0.0)

    def with_zeroing():
        return zeroing(), upstream()

    return zeroing, with_zeroing


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _r(gen, *shape, dtype=BF16):
    return torch.randn(*shape, generator=gen).to(dtype)


# ----------------------------------------------------------------------------- GDN extend


class RecentCallCache:
    """Upstream's ``prepare_chunk_indices`` as every layer calls it: sgl-kernel-npu ``fla/utils.py`` wraps it in
    ``tensor_cache``, which keeps the 4 most recent calls (args, kwargs, result), searches them oldest first
    (a tensor argument matched by identity, any other by ``==`` and type; the kwargs likewise) and moves a hit
    to the newest place.  ``fn`` stands for the function (it runs on a miss only)."""

    SIZE = 4

    def __init__(self, fn):
        self.fn, self.entries = fn, []

    @staticmethod
    def _same(a, b) -> bool:
        return a is b if isinstance(a, torch.Tensor) else (a == b and type(a) is type(b))

    def __call__(self, *args, **kwargs):
        for i, (last_args, last_kwargs, result) in enumerate(self.entries):
            if (len(args) == len(last_args) and len(kwargs) == len(last_kwargs)
                    and all(self._same(a, b) for a, b in zip(args, last_args))
                    and all(k in last_kwargs and self._same(v, last_kwargs[k]) for k, v in kwargs.items())):
                self.entries = self.entries[:i] + self.entries[i + 1:] + [(args, kwargs, result)]
                return result
        result = self.fn(*args, **kwargs)
        if len(self.entries) >= self.SIZE:
            self.entries = self.entries[1:]
        self.entries.append((args, kwargs, result))
        return result


def gdn_extend() -> Verb:
    gen = _gen(1)
    T = sum(EXTEND_LENS)
    N = len(EXTEND_LENS)
    q, k = _r(gen, T, HK, K), _r(gen, T, HK, K)
    v = _r(gen, T, HV, V)
    g = torch.nn.functional.logsigmoid(torch.randn(1, T, HV, generator=gen))
    beta = torch.rand(1, T, HV, generator=gen).to(BF16)
    cu = torch.tensor((0, *EXTEND_LENS), dtype=torch.int32).cumsum(0).to(torch.int32)
    pool = _r(gen, SLOTS, HV, V, K) * 0.1
    cache = torch.tensor([3, 7])
    initial = pool[cache]
    chunk_indices = torch.tensor([[s, c] for s, n in enumerate(EXTEND_LENS) for c in range(-(-n // 64))])
    # upstream's per-layer prepare_chunk_indices(cu_seqlens, 64): a hit on this step's entry, the newest of the
    # 4 its cache holds in steady state (three earlier steps' offsets before it)
    prepare_chunk_indices = RecentCallCache(lambda cu_seqlens, chunk_size: chunk_indices)
    for earlier in (cu.clone(), cu.clone(), cu.clone(), cu):
        prepare_chunk_indices(earlier, 64)
    chunk = Stub(gdn_contract.OP_NPU_CHUNK, (_marked(T, HV, V), _marked(N, HV, V, K)))
    l2 = ShapedStub(gdn_contract.OP_L2NORM, q)   # sgl-kernel-npu's Triton l2norm_fwd
    backend = SimpleNamespace(forward_metadata=SimpleNamespace(has_mamba_track_mask=False),
                              actual_seq_lengths=torch.diff(cu).to(torch.int32),
                              req_to_token_pool=SimpleNamespace(mamba_pool=SimpleNamespace(
                                  mamba_cache=SimpleNamespace(temporal=pool.unsqueeze(0)))))

    def upstream():   # AscendGDNAttnBackend.chunk_gdn, kernels stubbed
        qn, kn = l2(q), l2(k)
        gf = g.to(torch.float32)
        scale = kn.shape[-1] ** -0.5
        indices = prepare_chunk_indices(cu, 64)
        h = kn.new_empty(len(indices), v.shape[-2], v.shape[-1], kn.shape[-1])
        o, last = chunk(qn, kn, v, beta=beta, initial_state=initial, actual_seq_lengths=backend.actual_seq_lengths,
                        scale=scale, chunk_state=h, g=gf)
        return o, last, h

    def plugin():
        return gdn_hooks.ascend_chunk_gdn(upstream, backend, q, k, v, g, beta, initial, cu)

    def expect(out):
        o, final, h = out
        return (torch.equal(o, chunk.output[0].reshape(T, HV, V)) and torch.equal(final, chunk.output[1])
                and tuple(h.shape) == (len(chunk_indices), HV, V, K))

    return Verb("gdn extend", "npu_chunk", upstream, plugin, {gdn_contract.OP_NPU_CHUNK: chunk, l2.name: l2}, expect,
                (chunk,), lambda: seam.install_device_facts(chip="A3"),
                [f"{T} tokens in {N} requests, Hv {HV} Hk {HK} K {K} V {V}, bf16 pool (A3)"])


# ----------------------------------------------------------------------------- GDN decode


def _decode_inputs(pool_dtype):
    gen = _gen(2)
    B = DECODE_BATCH
    return dict(q=_r(gen, 1, B, HK, K), k=_r(gen, 1, B, HK, K), v=_r(gen, 1, B, HV, V), a=_r(gen, B, HV),
                b=_r(gen, B, HV), A_log=torch.randn(HV, generator=gen), dt_bias=_r(gen, HV),
                ssm_states=(_r(gen, SLOTS, HV, V, K) * 0.1).to(pool_dtype),
                cache_indices=torch.randperm(SLOTS, generator=gen)[:B].to(torch.int32),
                query_start_loc=torch.arange(B + 1, dtype=torch.int32))


@contextlib.contextmanager
def _decode_verdict(layout: str, pool_dtype):
    """The decode-layout probe's verdict for the serving signature, recorded (the stub cannot be probed)."""
    sig = decode_probe.signature(ENTRY, BF16, pool_dtype, K, V)
    seam.record_verdict(decode_probe.PROBE.name, sig,
                        probes.Verdict(decode_probe.PROBE.name, sig, layout, layout == decode_contract.VALUE_FIRST,
                                       "recorded by bench_hook_overhead"))
    try:
        yield
    finally:
        seam.forget_verdicts()


def _installed_entry(entry):
    """The decode entry the installed SGLang imports, as the hook asks for it (read from its source)."""
    @contextlib.contextmanager
    def cm():
        saved = decode_contract.installed_decode_entry
        decode_contract.installed_decode_entry = lambda: entry
        try:
            yield
        finally:
            decode_contract.installed_decode_entry = saved
    return cm()


def gdn_decode(route: str) -> Verb:
    B = DECODE_BATCH
    triton = route == "triton_decode"
    pool_dtype = torch.float32 if triton else BF16   # the Triton route keeps an fp32 pool; the op is bf16-only
    x = _decode_inputs(pool_dtype)
    entry_stub = Stub(decode_contract.DECODE_ENTRIES[ENTRY], _marked(B, HV, V))     # optimized: [N, HV, V]
    stubs = {decode_contract.DECODE_ENTRIES[ENTRY]: entry_stub}
    if not triton:
        stubs[gdn_contract.OP_NPU_RECURRENT] = Stub(gdn_contract.OP_NPU_RECURRENT, _marked(B, 1, HV, V))
        # fused_gdn_gating_npu: (g fp32 [1, B, Hv], sigmoid(b) [1, B, Hv])
        stubs[gdn_contract.OP_GATING] = Stub(gdn_contract.OP_GATING, (_marked(1, B, HV, dtype=torch.float32),
                                                                      _marked(1, B, HV)))
    served = stubs[decode_contract.DECODE_ENTRIES[ENTRY] if triton else gdn_contract.OP_NPU_RECURRENT]
    counted = (served,) if triton else (served, stubs[gdn_contract.OP_GATING])

    def upstream():   # TritonGDNKernel.decode: one call of the Triton entry
        return entry_stub(A_log=x["A_log"], dt_bias=x["dt_bias"], q=x["q"], k=x["k"], v=x["v"], a=x["a"], b=x["b"],
                          initial_state_source=x["ssm_states"], initial_state_indices=x["cache_indices"],
                          cu_seqlens=x["query_start_loc"], use_qk_l2norm_in_kernel=True, softplus_beta=1.0,
                          softplus_threshold=20.0)

    def plugin():
        return gdn_hooks.ascend_gdn_decode(upstream, None, x["q"], x["k"], x["v"], x["a"], x["b"], A_log=x["A_log"],
                                           dt_bias=x["dt_bias"], ssm_states=x["ssm_states"],
                                           cache_indices=x["cache_indices"], query_start_loc=x["query_start_loc"])

    def expect(o):
        return torch.equal(o.reshape(B, HV, V), served.output.reshape(B, HV, V))

    layout = decode_contract.VALUE_FIRST if triton else decode_contract.KEY_FIRST

    @contextlib.contextmanager
    def setup():
        with _installed_entry(ENTRY), _decode_verdict(layout, pool_dtype):
            yield

    dtype = str(pool_dtype).replace("torch.", "")
    zeroing, with_zeroing = _zeroing(upstream, _marked(B, HV, V), torch.zeros(B, 1, 1, dtype=torch.bool))
    return Verb(f"gdn decode {route}", route, upstream, plugin, stubs, expect, counted, setup,
                [f"batch {B}, Hv {HV} Hk {HK} K {K} V {V}, {dtype} pool, entry {ENTRY!r} probed {layout}",
                 ZEROING_NOTE.format(what="padded requests' rows", shape=f"[{B}, {HV}, {V}]")],
                context=[("zeroing", zeroing), ("upstream + zeroing", with_zeroing)],
                baselines=("upstream + zeroing",))


# ----------------------------------------------------------------------------- GDN verify


def gdn_verify() -> Verb:
    gen = _gen(3)
    B, S = DECODE_BATCH, DRAFT
    mix = _r(gen, B, S, 2 * HK * K + HV * V)
    pool = _r(gen, SLOTS, HV, V, K) * 0.1
    scratch = torch.zeros((B + 1) * S, HV, V, K, dtype=BF16)   # SGLang's [size + 1, S] scratch, rows flat
    a, b = _r(gen, B * S, HV), _r(gen, B * S, HV)   # the step's gating inputs, [B * S, Hv]
    A_log, dt_bias = torch.randn(HV, generator=gen), torch.randn(HV, generator=gen)
    cache = torch.randperm(SLOTS, generator=gen)[:B].to(torch.int32)
    backend = SimpleNamespace(graph_mode=True, forward_metadata=SimpleNamespace(
        mamba_cache_indices_gdn=torch.arange(B * S, dtype=torch.int32).view(B, S)))
    op = Stub(gdn_contract.OP_NPU_RECURRENT, _marked(B, S, HV, V))
    # sgl-kernel-npu's fused_gdn_gating_kernel_without_sigmoid: (g [1, B * S, Hv] fp32, b as given)
    gating = Stub(gdn_contract.OP_GATING_WITHOUT_SIGMOID, (torch.randn(1, B * S, HV, generator=gen), b))

    def gates(gating_call):
        """forward_extend's target-verify branch up to the update call: the gates, SGLang's views of them."""
        g, beta = gating_call(A_log, a, b, dt_bias)
        return beta.unsqueeze(0).view(B, -1, HV), g.view(B, -1, HV)

    def update(beta, g):   # AscendGDNAttnBackend.fused_recurrent_gated_delta_rule_update (graph mode), op stubbed
        b16, gf = beta.to(BF16), g.to(torch.float32)
        scale = 1 / (K ** 0.5)
        inter = scratch.view(-1, HV, K, V)
        nat = torch.full([B], 1, dtype=torch.int32, device=cache.device)
        lens = torch.full([B], S, dtype=torch.int32, device=cache.device)
        idx = backend.forward_metadata.mamba_cache_indices_gdn
        out = op(mix, pool, beta=b16, scale=scale, actual_seq_lengths=lens, ssm_state_indices=idx.view(B, S),
                 nk=HK, nv=HV, intermediate_state=inter, cache_indices=cache, num_accepted_tokens=nat, g=gf)
        inter.view(-1, S, HV, K, V)
        return out

    def upstream():   # the gating kernel, then the update
        return update(*gates(gating))

    def plugin():   # the gdn-verify-gates hook around the gating kernel, then the gdn-verify-ladder hook
        beta, g = gates(lambda *args: gdn_hooks.ascend_verify_gates(gating, *args))
        return gdn_hooks.ascend_verify_update(update, backend, mix, HK, HV, K, V, pool, beta,
                                              g, cache, intermediate_state=scratch)

    def expect(out):
        return torch.equal(out, op.output)

    zeroing, with_zeroing = _zeroing(upstream, _marked(B, S, HV, V), torch.zeros(B, S, 1, 1, dtype=torch.bool))
    return Verb("gdn verify", "npu_recurrent", upstream, plugin, {op.name: op}, expect, (op, gating), notes=[
        f"batch {B} x {S} draft tokens, Hv {HV} Hk {HK} K {K} V {V}, bf16 pool and scratch, graph mode; the step's "
        f"gates first ({B * S} tokens: the without-sigmoid kernel tiles them, the verify-gates ladder's first rung)",
        ZEROING_NOTE.format(what="rows past each request's length and padded requests' rows",
                            shape=f"[{B}, {S}, {HV}, {V}]")],
        context=[("zeroing", zeroing), ("upstream + zeroing", with_zeroing)],
        baselines=("upstream + zeroing",))


# ----------------------------------------------------------------------------- conv


def _conv_pool(gen):
    """One layer of the window-major NPU conv pool ``[slots, W-1, dim]`` as the model sees it: ``[slots, dim, W-1]``."""
    return _r(gen, SLOTS, CONV_WIDTH - 1, CONV_DIM).transpose(1, 2)


def conv_prefill() -> Verb:
    gen = _gen(4)
    T = sum(EXTEND_LENS)
    x = _r(gen, CONV_DIM, T)
    weight = _r(gen, CONV_DIM, CONV_WIDTH)
    state = _conv_pool(gen)
    qsl = torch.tensor((0, *EXTEND_LENS), dtype=torch.int32).cumsum(0).to(torch.int32)
    cache = torch.tensor([5, 9], dtype=torch.int32)
    has_init = torch.tensor([True, False])
    op = Stub(conv_contract.OP_ACLNN, _marked(T, CONV_DIM))           # run mode 0: [T, dim]
    kwargs = dict(query_start_loc=qsl, cache_indices=cache, has_initial_state=has_init, conv_states=state,
                  activation=None)

    def upstream():   # sglang ... causal_conv1d.causal_conv1d_fn off CUDA: the Triton entry (stubbed)
        kw = dict(kwargs)
        if "seq_lens_cpu" not in kw:
            kw["seq_lens_cpu"] = (qsl[1:] - qsl[:-1]).cpu().tolist()
        return op(x, weight, None, **kw)

    def plugin():
        return conv_hooks.causal_conv1d_fn_around(upstream, x, weight, None, **kwargs)

    def expect(out):
        return torch.equal(out, op.output.t())

    return Verb("conv prefill", "npu_aclnn", upstream, plugin, {op.name: op}, expect, (op,), notes=[
        f"LFM2 dim {CONV_DIM} width {CONV_WIDTH}, {T} tokens in {len(EXTEND_LENS)} requests, bf16, window-major pool",
        "x copy: the plugin's transposed copy of x alone (SGLang hands [dim, T] contiguous, the op takes [T, dim] "
        "contiguous: no released kernel takes x as SGLang hands it); on an NPU one launch whose copying is device "
        "time, here host time; 'upstream + x copy': that copy, then upstream's call"],
        context=[("x copy", lambda: x.t().contiguous()),
                 ("upstream + x copy", lambda: (x.t().contiguous(), upstream()))],
        baselines=("upstream + x copy",))


def conv_decode() -> Verb:
    gen = _gen(5)
    B = DECODE_BATCH
    x = _r(gen, B, CONV_DIM)
    weight = _r(gen, CONV_DIM, CONV_WIDTH)
    state = _conv_pool(gen)
    cache = torch.randperm(SLOTS, generator=gen)[:B].to(torch.int32)
    op = Stub(conv_contract.OP_ACLNN, _marked(B, 1, CONV_DIM))        # run mode 1: [B, L, dim]

    def upstream():   # causal_conv1d_update off CUDA: the Triton entry (stubbed)
        return op(x, state, weight, bias=None, activation=None, cache_seqlens=None, conv_state_indices=cache,
                  pad_slot_id=-1)

    def plugin():
        return conv_hooks.causal_conv1d_update_around(upstream, x, state, weight, None, activation=None,
                                                      conv_state_indices=cache)

    def expect(out):
        return torch.equal(out, op.output.transpose(1, 2)[..., 0])

    return Verb("conv decode", "npu_aclnn", upstream, plugin, {op.name: op}, expect, (op,), notes=[
        f"LFM2 dim {CONV_DIM} width {CONV_WIDTH}, batch {B}, bf16, window-major pool"])


def verbs() -> list[Verb]:
    return [gdn_extend(), gdn_decode("triton_decode"), gdn_decode("npu_recurrent"), gdn_verify(), conv_prefill(),
            conv_decode()]


# ----------------------------------------------------------------------------- checks and tables


@contextlib.contextmanager
def serving(verb: Verb):
    """The verb's stubs behind the seam (and its device facts / probe verdict)."""
    with verb.setup(), seam.install_emulators(verb.stubs):
        yield


def check(verb: Verb) -> dict:
    """One plugin call: its result is the stub's output, each counted stub ran once, no real math ran.
    Returns what was seen (ATen op counts of both methods, the stubs' calls); raises on a failure."""
    before = [s.calls for s in verb.counted]
    n_plugin, by_op = harness.count_torch_ops(verb.plugin)
    calls = [s.calls - b for s, b in zip(verb.counted, before)]
    if calls != [1] * len(verb.counted):
        raise AssertionError(f"{verb.name}: the plugin call ran its stubs {calls} times, expected once each "
                             f"({[s.name for s in verb.counted]}): not the {verb.rung} rung")
    math = sorted(op for op in by_op if op in MATH_OPS)
    if math:
        raise AssertionError(f"{verb.name}: real math ran in the plugin call: {math}")
    if not verb.expect(verb.plugin()):
        raise AssertionError(f"{verb.name}: the plugin's result is not the stub's output")
    n_upstream, _ = harness.count_torch_ops(verb.upstream)
    return {"plugin_aten_ops": n_plugin, "upstream_aten_ops": n_upstream, "plugin_ops_by_name": by_op,
            "stub_calls": {s.name: s.calls for s in verb.counted}}


def _loop(fn, inner):
    def run():
        for _ in range(inner):
            fn()
    return run


def table(verb: Verb, threads: int, reps: int, inner: int) -> harness.Table:
    with serving(verb):
        seen = check(verb)
        goals = [harness.Goal(f"{verb.name}: plugin adds <= {GOAL_ADDED_S * 1e6:g} us per layer call", "plugin",
                              "upstream", GOAL_ADDED_S, at_least=False, difference=True)]
        goals += [harness.Goal(f"{verb.name}: plugin adds <= {GOAL_ADDED_S * 1e6:g} us per layer call beyond {name}",
                               "plugin", name, GOAL_ADDED_S, at_least=False, difference=True)
                  for name in verb.baselines]
        t = harness.measure(f"hook overhead, {verb.name} (plugin rung: {verb.rung})",
                            [("upstream", _loop(verb.upstream, inner)), ("plugin", _loop(verb.plugin, inner)),
                             *[(name, _loop(fn, inner)) for name, fn in verb.context]],
                            "plugin", goals, reps=reps, threads=threads, notes=list(verb.notes))
    t.times = {name: [x / inner for x in ts] for name, ts in t.times.items()}   # per call
    t.notes.append(f"per call ({inner} calls per repetition); ATen ops per call: plugin {seen['plugin_aten_ops']}, "
                   f"upstream {seen['upstream_aten_ops']}; stubs ran, no matmul-class op: checked")
    return t


def tables_at(args, threads, reps):
    if args.inner < 1:
        raise SystemExit(f"--inner={args.inner}: expected a positive number of calls per repetition")
    inner = min(args.inner, 2) if args.smoke else args.inner
    for verb in verbs():
        yield table(verb, threads, reps, inner)


def add_arguments(parser) -> None:
    parser.add_argument("--inner", type=int, default=INNER,
                        help=f"calls of each method per repetition (default {INNER}; --smoke: 2)")


def main(argv=None) -> int:
    return harness.run(__doc__.splitlines()[0], tables_at, argv, add_arguments=add_arguments)


if __name__ == "__main__":
    raise SystemExit(main())
