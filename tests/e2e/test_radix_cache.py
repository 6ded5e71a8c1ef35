"""Radix-cache hits through SGLang's real radix tree and scheduler batch code are lossless.

Each case runs, on one engine (page 128, the mamba ``extra_buffer`` strategy, two
ping-pong track slots per request), with :class:`tests.e2e.radix.RadixScheduler`:

* request A: a 300-token prompt (one extend, or chunked 192 + 108) and a few decode
  tokens, tracked and cached by SGLang's own code (checkpoint at the end of prefill,
  release at finish);
* request B sharing the first ``shared`` tokens of A: SGLang's ``match_prefix`` decides
  how much it reuses (asserted), the model runner's copy-on-write restores the tracked
  state, B extends the rest and decodes;
* the cache flushed, request B again: no hit (matched prefix 0), computed from scratch.

B's greedy tokens and per-step logits must equal the cache-free B's.
"""

from __future__ import annotations

import time

import pytest
import torch

from tests.e2e import device, harness, npu_standins, radix
from tests.e2e.runner import run_family
from tests.support.release_subset import older_releases_run

A_LEN, A_DECODES, B_DECODES = 300, 3, 3
# B's own tokens after the shared prefix: few, so B's logits depend on the restored state
# (these random tiny models forget fast: with 20 new tokens a hit that skips the state copy
# moves the logits by only ~0.03, inside the bf16 tolerance; with 4, by 1.5 to 7)
B_NEW = 4
# case: (A's prefill chunk, tokens B shares with A, the prefix match_prefix must return)
CASES = {
    "page_boundary": (None, 256, 256),  # A's one extend tracks 256 (from h: 300 is off the 64 grid)
    "inside_page": (192, 200, 128),  # A's chunks track 128 only (108 < 128); B ends inside page 2
    "inside_chunk": (192, 160, 128),  # B ends inside the 64-token state chunk [128, 192)
}
A_TRACKED = {None: [256], 192: [128]}  # what the batch code tracks for A (no decode reaches 512)
FP32_LOGITS = 1e-5


def _tokens(n: int, seed: int, vocab: int = 160) -> list:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(1, vocab, (n,), generator=gen).tolist()


def run_radix(name: str, case: str, *, dtype=torch.float32, ssm_dtype=None, device_ctx=None, breakage=None):
    """(A, B with the cache, B without) of one case, all through the real tree."""
    chunk, shared, _ = CASES[case]
    a_prompt = _tokens(A_LEN, seed=1)
    b_prompt = a_prompt[:shared] + _tokens(B_NEW, seed=2)
    out = {}

    def plan_runner(engine, _plan):
        sched = radix.RadixScheduler(engine)
        out["A"] = sched.serve("A", a_prompt, A_DECODES + 1, chunk=chunk)
        out["B"] = sched.serve("B", b_prompt, B_DECODES + 1)
        sched.check_idle()
        sched.flush()
        out["B_fresh"] = sched.serve("B_fresh", b_prompt, B_DECODES + 1)
        sched.check_idle()
        return []

    t0 = time.time()
    with npu_standins.torch_model_kernels():
        run_family(name, dtype=dtype, device=device_ctx, ssm_dtype=ssm_dtype, plan_runner=plan_runner,
                   server_args=radix.SERVER_ARGS, engine_args=radix.ENGINE_ARGS, breakage=breakage)
    out["seconds"] = time.time() - t0
    return out


def _assert_lossless(out, case: str, logit_tol: float):
    chunk, _, expect = CASES[case]
    a, b, fresh = out["A"], out["B"], out["B_fresh"]
    assert a.matched == 0 and a.tracked == A_TRACKED[chunk], (a.matched, a.tracked)
    assert b.matched == expect, f"match_prefix gave B {b.matched} tokens, expected {expect}"
    assert fresh.matched == 0, fresh.matched
    assert len(b.generated) == len(fresh.generated) == B_DECODES + 1
    assert b.generated == fresh.generated, f"B with the cache {b.generated}, without {fresh.generated}"
    gap = max(float((x - y).abs().max()) for x, y in zip(b.logits, fresh.logits))
    assert gap <= logit_tol, f"B's logits differ from a cache-free B by {gap:.3g} (tolerance {logit_tol})"


@pytest.mark.parametrize("case", older_releases_run(sorted(CASES), keep=(0,)))
def test_gdn_fp32_radix_hits_are_lossless(case):
    _assert_lossless(run_radix("qwen3_5", case), case, FP32_LOGITS)


@pytest.mark.parametrize("case", older_releases_run(["page_boundary", "inside_page"], keep=(0,)))
def test_gdn_bf16_model_fp32_pool_radix_hits_are_lossless(case):
    """bf16 model on the NPU-op emulators (A3), fp32 SSM pool: the snapshot keeps the pool's precision.
    At the bf16 tolerance only ``page_boundary`` would catch a lost state (a hit that skips the
    copy-on-write moves its logits by ~1.5 and its tokens); ``inside_page`` recomputes 72 shared
    tokens after the 128 state, which washes a lost state down to ~0.05 (the fp32 cases catch it)."""
    out = run_radix("qwen3_5", case, dtype=torch.bfloat16, ssm_dtype=torch.float32,
                    device_ctx=device.npu_emulators)
    _assert_lossless(out, case, harness.BF16_LOGIT_TOL)


@pytest.mark.parametrize("case", ["page_boundary", "inside_chunk"])
def test_short_conv_fp32_radix_hits_are_lossless(case):
    """LFM2: the conv snapshots are the plugin's short-conv sidecar's (SGLang's own writes none)."""
    _assert_lossless(run_radix("lfm2", case), case, FP32_LOGITS)


@pytest.mark.parametrize("name,case", [("lfm2_moe", "inside_page"), ("zaya", "inside_chunk")],
                         ids=["lfm2_moe-inside_page", "zaya-inside_chunk"])
def test_other_short_conv_families_fp32_radix_hits_are_lossless(name, case):
    """LFM2-MoE (the conv sidecar under MoE layers) and ZAYA1 (its CCA conv window and the
    one-token prev_hs lag, snapshotted by the plugin's hooks around cca_extend / cca_decode)."""
    _assert_lossless(run_radix(name, case), case, FP32_LOGITS)


def test_short_conv_bf16_radix_hit_is_lossless_on_the_npu_conv_kernels():
    """LFM2, bf16 model and conv pool on the NPU conv-op emulators: the hit equals the cache-free run
    (a hit without the snapshot leaves the bf16 tolerance here; ZAYA1's bf16 logits move by only ~0.05
    without it, so its bf16 snapshot is checked against the fresh state in test_prefix_cache.py)."""
    out = run_radix("lfm2", "page_boundary", dtype=torch.bfloat16, device_ctx=device.npu_emulators)
    _assert_lossless(out, "page_boundary", harness.BF16_LOGIT_TOL)


@pytest.mark.parametrize("dtype,pool", older_releases_run([(torch.float32, None), (torch.bfloat16, torch.bfloat16)],
                                                          keep=(0,)),
                         ids=["fp32", "bf16_model-bf16_pool"])
def test_qwen3_next_radix_hits_are_lossless(dtype, pool):
    """Qwen3-Next's GDN layers (and its MoE) through the real tree: fp32, and bf16 with a bf16 pool
    on the NPU-op emulators (the chunk op serves the tracked prefill)."""
    out = run_radix("qwen3_next", "page_boundary", dtype=dtype, ssm_dtype=pool,
                    device_ctx=None if dtype == torch.float32 else device.npu_emulators)
    _assert_lossless(out, "page_boundary", FP32_LOGITS if dtype == torch.float32 else harness.BF16_LOGIT_TOL)


def _no_conv_snapshot(mp):
    from sglang_ascend_hybrid.integration import short_conv_track

    mp.setattr(short_conv_track, "before_prefill", lambda *args, **kwargs: None)


def test_short_conv_negative_control_without_the_sidecar_snapshot_fails():
    """No prefill snapshot: the tree still donates A's track slot at 256 (the tree cannot
    tell), B resumes from a stale conv state, and its logits leave the cache-free run's."""
    out = run_radix("lfm2", "page_boundary", breakage=_no_conv_snapshot)
    assert out["B"].matched == 256  # the hit itself still happens
    with pytest.raises(AssertionError, match="with the cache|differ from a cache-free B"):
        _assert_lossless(out, "page_boundary", FP32_LOGITS)
