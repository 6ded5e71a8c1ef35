"""Radix-cache hits are lossless: a request resuming from a tracked mamba snapshot gives the
tokens and logits of the same request computed without the cache.

Each case runs, in one engine with SGLang's extra-buffer pools (page 128, 64-token state
chunks, see :mod:`tests.e2e.prefix`):

* request A prefilled (in chunks, as chunked prefill would) with the scheduler's tracking
  fields, so SGLang's backend code (or the plugin's short-conv sidecar) writes snapshots;
* request B sharing the first ``shared`` tokens of A: it resumes from the deepest snapshot
  within them (asserted: the matched prefix length), extends the rest, decodes;
* request B again from scratch in fresh slots (the cache disabled for it);
* request C, a fresh prefill of exactly the matched prefix: the state it leaves is the state
  the snapshot must hold.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import pytest
import torch

from tests.e2e import device, harness, npu_standins, prefix
from tests.e2e.runner import run_family
from tests.support.release_subset import older_releases_run

DECODES = 3
# (A's prefill chunks, tokens B shares with A, the snapshot B must resume from)
CASES = {
    "page_boundary": ((300,), 256, 256),  # tracked from h (the chunk end is not a state boundary)
    "chunk_end": ((256,), 256, 256),  # tracked from the final state (boundary = chunk end)
    "inside_page": ((192, 108), 200, 128),  # tracked at 128 + 1 (_force_track_h), B ends in page 2
    "inside_chunk": ((192, 108), 160, 128),  # B ends inside the 64-token chunk [128, 192)
}
ROWS = dict(A=1, B=2, B_fresh=3, C=4)
SLOTS = dict(A=2, B=3, B_fresh=4, C=5)
TRACK_SLOTS = (7, 8)


def gdn_emu_ops() -> tuple:
    """The GDN prefill ops by seam name: (chunk op, Triton entry, mega kernel)."""
    from sglang_ascend_hybrid.ops.gdn.contract import OP_MEGA, OP_NPU_CHUNK, OP_TRITON

    return OP_NPU_CHUNK, OP_TRITON, OP_MEGA


def _tokens(n: int, seed: int, vocab: int = 160) -> list:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(1, vocab, (n,), generator=gen).tolist()


@dataclass
class PrefixRun:
    b: harness.Request
    b_fresh: harness.Request
    snapshot: list  # the matched snapshot's tensors
    fresh_state: list  # C's state after a fresh prefill of the matched prefix
    matched: int
    engine: object


def _run_case(case: str, engine) -> PrefixRun:
    chunks, shared, expect = CASES[case]
    sched = harness.Scheduler(engine)
    a_prompt = _tokens(sum(chunks), seed=1)
    b_prompt = a_prompt[:shared] + _tokens(20, seed=2)
    req = {name: sched.admit(harness.Request(name, list(p), ROWS[name], SLOTS[name]))
           for name, p in (("A", a_prompt), ("B", b_prompt), ("B_fresh", b_prompt))}
    snaps = prefix.prefill_tracked(sched, req["A"], chunks, TRACK_SLOTS)
    snap = prefix.matched_prefix(snaps, shared)
    assert snap is not None and snap.boundary == expect, (snaps, shared)
    snapshot = prefix.layer_states(engine, snap.slot)
    c = sched.admit(harness.Request("C", a_prompt[:snap.boundary], ROWS["C"], SLOTS["C"]))
    sched.extend([(c, snap.boundary)])
    fresh_state = prefix.layer_states(engine, c.slot)
    prefix.resume(sched, req["A"], req["B"], snap)
    sched.extend([(req["B"], len(b_prompt) - snap.boundary), (req["B_fresh"], len(b_prompt))])
    for _ in range(DECODES):
        sched.decode([req["B"], req["B_fresh"]])
    return PrefixRun(req["B"], req["B_fresh"], snapshot, fresh_state, snap.boundary, engine)


def run_prefix(name: str, case: str, *, dtype=torch.float32, ssm_dtype=None, device_ctx=None, breakage=None):
    out = {}

    def plan_runner(engine, _plan):
        out["run"] = _run_case(case, engine)
        return [out["run"].b]

    with npu_standins.torch_model_kernels():
        run = run_family(name, dtype=dtype, device=device_ctx, ssm_dtype=ssm_dtype, plan_runner=plan_runner,
                         server_args=prefix.SERVER_ARGS, breakage=breakage,
                         engine_args=dict(extra_buffer=True, max_context=prefix.MAX_CONTEXT, mamba_slots=10,
                                          rows=6))
    return run, out["run"]


def _max_gap(xs, ys) -> float:
    return max(float((x.float() - y.float()).abs().max()) for x, y in zip(xs, ys))


def _assert_lossless(r: PrefixRun, logit_tol: float, state_tol: float):
    assert r.b.generated == r.b_fresh.generated, (r.b.generated, r.b_fresh.generated)
    gap = _max_gap(r.b.logits, r.b_fresh.logits)
    assert gap <= logit_tol, f"B's logits differ from a cache-free B by {gap:.3g} (tolerance {logit_tol})"
    sgap = _max_gap(r.snapshot, r.fresh_state)
    assert sgap <= state_tol, f"snapshot differs from a fresh prefill's state by {sgap:.3g} (tolerance {state_tol})"


FP32_LOGITS, FP32_STATE = 1e-5, 1e-6


# Every case on the family with the per-rank head plan (Qwen3.6-27B at TP=8), one on the other
# family of each kind (CI time: each case is a whole model over several pages).
# (Qwen3.5's chunk_end and inside_chunk cases run through SGLang's real radix tree in test_radix_cache.py.)
GDN_CASES = [("qwen3_5", "page_boundary"), ("qwen3_5", "inside_page"), ("qwen3_next", "inside_page")]
SHORT_CONV_CASES = [("lfm2", case) for case in sorted(CASES)] + [("lfm2_moe", "inside_page")]


@pytest.mark.parametrize("name,case", older_releases_run(GDN_CASES, keep=(0,)))
def test_gdn_fp32_hits_are_lossless(name, case):
    run, r = run_prefix(name, case)
    _assert_lossless(r, FP32_LOGITS, FP32_STATE)


BF16_LOGITS = harness.BF16_LOGIT_TOL


def _bf16_state_tol(xs) -> float:
    """One bf16 rounding step of the largest state entry (a bf16 pool stores rounded states)."""
    return max(float(x.float().abs().max()) for x in xs) * 2 ** -8


# (Qwen3-Next's bf16 model on an fp32 pool is Qwen3.5's case on another model class, whose hits the fp32
# cases above and the runtime tier's Qwen3-Next run cover; left out for CI time)
@pytest.mark.parametrize("name,case,pool", older_releases_run([("qwen3_5", "page_boundary", torch.float32),
                                                                ("qwen3_5", "inside_page", torch.bfloat16)],
                                                               keep=(1,)),
                         ids=["qwen3_5-page_boundary-fp32_pool", "qwen3_5-inside_page-bf16_pool"])
def test_gdn_bf16_model_hits_are_lossless(name, case, pool):
    """bf16 model on the NPU-op emulators (A3): a bf16 pool's prefill takes the chunk op, an fp32
    pool's the torch rung (the 16-bit kernels would lower its precision); the snapshot is the
    fresh prefill's state in the pool's dtype: exact for fp32, within one rounding for bf16."""
    run, r = run_prefix(name, case, dtype=torch.bfloat16, ssm_dtype=pool, device_ctx=device.npu_emulators)
    state_tol = FP32_STATE if pool == torch.float32 else _bf16_state_tol(r.fresh_state)
    assert r.snapshot[-1].dtype == pool
    _assert_lossless(r, BF16_LOGITS, state_tol)


def _round_h_through_bf16(mp):
    """The plugin's earlier hook: per-chunk states rounded to the activation dtype."""
    from sglang_ascend_hybrid.integration import gdn_hooks

    real = gdn_hooks.chunk_with_states

    def rounded(*args, **kwargs):
        o, final, h = real(*args, **kwargs)
        return o, final, None if h is None else h.to(torch.bfloat16).float()

    mp.setattr(gdn_hooks, "chunk_with_states", rounded)


def test_negative_control_bf16_rounded_snapshot_on_an_fp32_pool_fails():
    run, r = run_prefix("qwen3_5", "page_boundary", dtype=torch.bfloat16, ssm_dtype=torch.float32,
                        device_ctx=device.npu_emulators, breakage=_round_h_through_bf16)
    with pytest.raises(AssertionError, match="snapshot differs"):
        _assert_lossless(r, BF16_LOGITS, FP32_STATE)


def _one_token_late(mp):
    """Conv snapshots one token past the boundary: SGLang's one home of the tracked length
    (``ForwardBatch.mamba_track_aligned_lens``, read by every conv-state snapshot) plus one."""
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch

    real = ForwardBatch.mamba_track_aligned_lens
    mp.setattr(ForwardBatch, "mamba_track_aligned_lens",
               lambda self: None if real(self) is None else real(self) + 1)


def test_negative_control_snapshot_one_token_late_fails():
    run, r = run_prefix("qwen3_5", "page_boundary", breakage=_one_token_late)
    with pytest.raises(AssertionError):
        _assert_lossless(r, FP32_LOGITS, FP32_STATE)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("inplace", [False, True])
def test_sigmoid_gate_stand_in_equals_the_triton_kernel(dtype, inplace):
    """Qwen3.5's attention output gate: the stand-in gives the Triton kernel's elements (both compute
    in fp32 and round once to the output dtype; their fp32 ``exp`` may differ in the last bit, so two
    units in the last place of the output dtype are allowed) for its 3-D strided gate and the flat form."""
    from sglang.kernels.ops.elementwise.elementwise import fused_sigmoid_mul

    gen = torch.Generator().manual_seed(3)
    T, heads, head_dim = 5, 4, 16
    both = torch.randn(T, heads, 2 * head_dim, generator=gen).to(dtype)
    gate = both[..., head_dim:]  # strided, as qwen3_5.py splits q and gate
    for g in (gate, gate.reshape(T, heads * head_dim).contiguous()):
        attn = torch.randn(T, heads * head_dim, generator=gen).to(dtype)
        want = fused_sigmoid_mul(attn.clone(), g, inplace=inplace)
        mine_in = attn.clone()
        got = npu_standins.sigmoid_gate_mul(mine_in, g, inplace=inplace)
        assert got.dtype == want.dtype and got.shape == want.shape
        ulp = 2 * torch.finfo(dtype).eps * want.float().abs()  # two units in the last place
        assert bool(((got.float() - want.float()).abs() <= ulp).all()), float((got.float() - want.float()).abs().max())
        assert torch.equal(mine_in, got if inplace else attn)  # in place only when asked
    with pytest.raises(ValueError, match="quant=True"):
        npu_standins.sigmoid_gate_mul(attn, gate, quant=True)


def test_projection_split_stand_ins_equal_the_triton_kernels():
    from sglang.kernels.ops.attention import triton_gdn_fused_proj as tk

    gen = torch.Generator().manual_seed(0)
    for hk, hv, dk, dv in ((2, 4, 32, 32), (2, 6, 16, 16)):
        T = 3
        qkvz = torch.randn(T, 2 * hk * dk + 2 * hv * dv, generator=gen)
        ba = torch.randn(T, 2 * hv, generator=gen)
        pairs = [(npu_standins.qkvzba_split_contiguous, tk.fused_qkvzba_split_reshape_cat_contiguous)]
        if (hv // hk) in (1, 2, 4):  # the interleaved kernel's ratios (qwen3_next.py)
            pairs.append((npu_standins.qkvzba_split_interleaved, tk.fused_qkvzba_split_reshape_cat))
        for ours, theirs in pairs:
            for x, y in zip(ours(qkvz, ba, hk, hv, dk, dv), theirs(qkvz, ba, hk, hv, dk, dv)):
                assert x.shape == y.shape and torch.equal(x, y), ours.__name__


@pytest.mark.parametrize("name,case", older_releases_run(SHORT_CONV_CASES, keep=(0,)))
def test_short_conv_fp32_hits_are_lossless(name, case):
    """The plugin's sidecar snapshots the conv window before each tracked boundary (prefill)."""
    run, r = run_prefix(name, case)
    _assert_lossless(r, FP32_LOGITS, FP32_STATE)  # a copy of the layer's inputs (fp32 matmul roundoff)


@pytest.mark.parametrize("name,case", [("lfm2", "page_boundary"), ("lfm2_moe", "inside_chunk")])
def test_short_conv_bf16_hits_are_lossless_on_the_npu_conv_kernels(name, case):
    run, r = run_prefix(name, case, dtype=torch.bfloat16, device_ctx=device.npu_emulators)
    _assert_lossless(r, BF16_LOGITS, _bf16_state_tol(r.fresh_state))


def test_short_conv_negative_control_snapshot_one_token_late_fails():
    run, r = run_prefix("lfm2", "page_boundary", breakage=_one_token_late)
    with pytest.raises(AssertionError):
        _assert_lossless(r, FP32_LOGITS, FP32_STATE)


def _no_conv_snapshot(mp):
    from sglang_ascend_hybrid.integration import short_conv_track

    mp.setattr(short_conv_track, "before_prefill", lambda x, conv_states: None)


def test_short_conv_negative_control_without_the_sidecar_snapshot_fails():
    """What SGLang's short-conv sidecar does on its own: no snapshot, the track slot is stale."""
    run, r = run_prefix("lfm2", "page_boundary", breakage=_no_conv_snapshot)
    with pytest.raises(AssertionError):
        _assert_lossless(r, FP32_LOGITS, FP32_STATE)


@pytest.mark.parametrize("case", ["page_boundary", "inside_chunk"])
def test_zaya_fp32_hits_are_lossless(case):
    """ZAYA1's CCA: the conv window of qk and the one-token prev_hs lag, snapshotted by the
    plugin's hooks around cca_extend / cca_decode."""
    run, r = run_prefix("zaya", case)
    _assert_lossless(r, FP32_LOGITS, FP32_STATE)


def test_zaya_bf16_hit_is_lossless():
    run, r = run_prefix("zaya", "inside_page", dtype=torch.bfloat16, device_ctx=device.npu_emulators)
    _assert_lossless(r, BF16_LOGITS, _bf16_state_tol(r.fresh_state))


# (how the rung is chosen, the pool): each prefill rung tracking can take (the mega kernel cannot:
# its chunks are 128 tokens), and the setting that sends an fp32 pool to the Triton path
RUNG_CASES = {
    "npu_chunk": (dict(SGLANG_ASCEND_HYBRID_GDN_BACKEND="npu_chunk"), torch.bfloat16),
    "triton": (dict(SGLANG_ASCEND_HYBRID_GDN_BACKEND="triton"), torch.bfloat16),
    "torch": (dict(SGLANG_ASCEND_HYBRID_GDN_BACKEND="torch"), torch.bfloat16),
    "triton_env_fp32_pool": (dict(GDN_ATTN_BACKEND_TRITON="1"), torch.float32),
}
RUNG_SERVES = {"npu_chunk": {gdn_emu_ops()[0]}, "triton": {gdn_emu_ops()[1]}, "torch": set(),
               "triton_env_fp32_pool": {gdn_emu_ops()[1]}}


# older releases: the chunk op and SGLang's own GDN_ATTN_BACKEND_TRITON route on an fp32 pool
@pytest.mark.parametrize("rung", older_releases_run(sorted(RUNG_CASES), keep=(0, 3)))
def test_gdn_hits_are_lossless_on_each_prefill_rung_tracking_can_take(rung, monkeypatch):
    """bf16 model; each rung forced (bf16 pool) or ``GDN_ATTN_BACKEND_TRITON=1`` on an fp32 pool:
    the snapshot is the fresh prefill's state (within one rounding for a bf16 pool; exact for the
    fp32 pool, whose tracked states the Triton path recomputes unrounded) and the hit equals the
    cache-free run."""
    env, pool = RUNG_CASES[rung]
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    run, r = run_prefix("qwen3_5", "page_boundary", dtype=torch.bfloat16, ssm_dtype=pool,
                        device_ctx=functools.partial(device.npu_emulators, triton=True))
    state_tol = FP32_STATE if pool == torch.float32 else _bf16_state_tol(r.fresh_state)
    assert r.snapshot[-1].dtype == pool
    _assert_lossless(r, BF16_LOGITS, state_tol)
    served = {op for op in gdn_emu_ops() if run.device_calls.get(op)}
    assert served == RUNG_SERVES[rung], run.device_calls


def test_gdn_mixed_batch_of_tracked_and_untracked_requests():
    """A (tracked) prefilled in one batch with an untracked request D: D's state is not copied
    anywhere and A's snapshot is still the fresh prefill's."""
    out = {}

    def plan_runner(engine, _plan):
        sched = harness.Scheduler(engine)
        a = sched.admit(harness.Request("A", _tokens(300, seed=1), 1, 2))
        d = sched.admit(harness.Request("D", _tokens(40, seed=3), 2, 3))
        before = prefix.layer_states(engine, 8)
        sched.extend([(d, 40), (a, 300)], track={"A": (300, 7)})
        out["untouched"] = _max_gap(prefix.layer_states(engine, 8), before)
        out["snapshot"] = prefix.layer_states(engine, 7)
        c = sched.admit(harness.Request("C", a.prompt[:256], 4, 5))
        sched.extend([(c, 256)])
        out["fresh"] = prefix.layer_states(engine, 5)
        return [a]

    with npu_standins.torch_model_kernels():
        run_family("qwen3_5", plan_runner=plan_runner, server_args=prefix.SERVER_ARGS,
                   engine_args=dict(extra_buffer=True, max_context=prefix.MAX_CONTEXT, mamba_slots=10, rows=6))
    assert out["untouched"] == 0.0
    assert _max_gap(out["snapshot"], out["fresh"]) <= FP32_STATE
