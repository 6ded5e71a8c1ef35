"""Speculative decoding (MTP / NEXTN, topk 1) of whole GDN models through the plugin
(:mod:`tests.e2e.spec`): prefills, then TARGET_VERIFY steps of 4-token windows (and one run of
16-token windows, past the NPU verify op's 8) through the plugin's verify hook, SGLang's greedy
acceptance and SGLang's commit
(``update_mamba_state_after_mtp_verify`` -> ``move_intermediate_cache`` / ``conv_state_rollback``)
with some drafts rejected, radix-cache tracking of the verify steps, and requests resumed from the
tracked states -- on the pool SGLang builds with speculative decoding on (SGLang 0.5.20: a
transposed view of the temporal state); eagerly, and on the linear backend's graph-replay metadata
(``init_cuda_graph_state`` / ``init_forward_metadata_out_graph``, padded batches; no graph captured).

Asserted: the greedy tokens equal those of the same model without speculative decoding and
transformers' (fp32: every token and logit within 1e-3; bf16: transformers' tolerance of
tests/e2e/test_models_bf16.py, and the run without speculative decoding agreed with up to the
first token transformers itself calls a near tie); the acceptance was partial (rollback ran);
the resumed requests, which start from the states SGLang's commit tracked, match transformers."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import pytest
import sglang
import torch

from sglang_ascend_hybrid.emulators import mamba_state_update
from sglang_ascend_hybrid.ops.gdn import contract as gdn_contract
from sglang_ascend_hybrid.ops.gdn import pool_layout
from sglang_ascend_hybrid.ops.gdn.contract import OP_NPU_RECURRENT, RECURRENT_MAX_TOKENS
from tests.e2e import device, harness, spec
from tests.e2e.runner import built_bf16, run_family
from tests.support.release_subset import older_releases_run

PLAN = spec.SpecPlan()
GDN_LAYERS = 3  # linear_attention x3, full_attention
ROWS = 8  # harness.Engine's request rows: the pool's mamba_spec_state_size
CONV_WIDTH = 4  # the GDN layers' conv kernel
VERIFY_STEPS = len(PLAN.batches) + len(PLAN.resume_wrong)
FP32, BF16 = torch.float32, torch.bfloat16
# SGLang 0.5.20 hands the GDN layers temporal_state.transpose(-1, -2) when speculative decoding is on
# (mem_cache/memory_pool.py ~739-746); later releases keep the allocation's order
# (read from the installed source, not from its version)
TRANSPOSED_POOL = "temporal_state = temporal_state.transpose(-1, -2)" in (
    Path(sglang.__file__).parent / "srt" / "mem_cache" / "memory_pool.py").read_text()



# the same plan on the linear backend's graph-replay metadata, batches padded to the next of these
# sizes (3 requests -> 4: one padding row; 2 -> 2)
GRAPH_PLAN = dataclasses.replace(PLAN, graph_buckets=(1, 2, 4))

CASES = [
    pytest.param("qwen3_5", FP32, FP32, PLAN, id="qwen3_5-fp32"),
    pytest.param("qwen3_next", FP32, FP32, PLAN, id="qwen3_next-fp32"),
    pytest.param("qwen3_5", BF16, BF16, PLAN, id="qwen3_5-bf16-bf16pool"),
    pytest.param("qwen3_5", BF16, FP32, PLAN, id="qwen3_5-bf16-fp32pool"),
    # (Qwen3-Next bf16 with a bf16 pool: its verify rungs are Qwen3.5's above; served whole by the runtime
    # tier's Qwen3-Next run. Left out for CI time.)
    pytest.param("qwen3_5", FP32, FP32, GRAPH_PLAN, id="qwen3_5-fp32-graph-metadata"),
    pytest.param("qwen3_5", BF16, BF16, GRAPH_PLAN, id="qwen3_5-bf16-bf16pool-graph-metadata"),
]


def _device(dtype):
    return device.gdn_fp32 if dtype == FP32 else device.npu_emulators


@functools.lru_cache(maxsize=None)
def without_spec(name: str, dtype: torch.dtype, ssm_dtype: torch.dtype):
    """The same requests greedy without speculative decoding (harness.StepPlan's prefills, then
    enough DECODE steps to supply every planned draft)."""
    return run_family(name, dtype=dtype, device=spec.fast_split(_device(dtype)), ssm_dtype=ssm_dtype,
                      plan=harness.StepPlan(decodes=PLAN.tokens_needed() - 1))


# negative controls: three verify steps (partial acceptance in each), no tracking; their histories
# leave the greedy path, so their drafts are the plain run's tokens at the same positions
CONTROL_PLAN = spec.SpecPlan(batches=PLAN.batches[:3], wrong=PLAN.wrong[:3], track=False)


def _run(name, dtype, ssm_dtype, breakage=None, plan=PLAN):
    base = without_spec(name, dtype, ssm_dtype)
    return spec.run_spec(name, dtype=dtype, ssm_dtype=ssm_dtype, device=_device(dtype), breakage=breakage,
                         plan=plan, known={r.name: r.tokens for r in base.reqs}, fallback=breakage is None)


def _first_tie_only(spec_req, base_req, hf) -> str:
    """'' when ``spec_req``'s tokens equal ``base_req``'s up to the first difference and transformers'
    top-1 / top-2 margin there (same history on both sides) is at most harness.BF16_MARGIN, else why not."""
    n = min(len(spec_req.generated), len(base_req.generated))
    diff = next((i for i in range(n) if spec_req.generated[i] != base_req.generated[i]), None)
    if diff is None:
        return ""
    top2 = harness.reference_logits(hf, base_req)[diff].topk(2).values
    margin = float(top2[0] - top2[1])
    return "" if margin <= harness.BF16_MARGIN else (
        f"{spec_req.name}: token {diff} differs ({spec_req.generated[diff]} vs {base_req.generated[diff]}) "
        f"where transformers' margin is {margin:.3f}")


# older releases: Qwen3.5 fp32 and bf16 with the bf16 pool (0.5.20's transposed spec pool is met by both)
@pytest.mark.parametrize("name,dtype,ssm_dtype,plan", older_releases_run(CASES, keep=(0, 2)))
def test_speculative_decoding_matches_plain_decoding_and_transformers(name, dtype, ssm_dtype, plan):
    base = without_spec(name, dtype, ssm_dtype)
    run, res = _run(name, dtype, ssm_dtype, plan=plan)
    a_b_c = spec.assert_matches_plain(run, res, base, PLAN, fp32=dtype == FP32)
    if dtype != FP32:
        hf = built_bf16(name).hf
        problems = [p for p in (_first_tie_only(g, w, hf) for g, w in zip(a_b_c, base.reqs)) if p]
        assert not problems, problems
    # the acceptance was partial: chains cut at every depth, whole chains, none; the commit copied
    # the last accepted step (the chain's accepted drafts) every time
    accepted = [s.accepted for s in res.steps]
    assert {0, 1, 2, 3} <= set(accepted), accepted
    assert all(s.committed_step == s.accepted for s in res.steps), res.steps
    # SGLang's commit ran once per verify step, plus once per step carrying track slots
    tracked_steps = len(PLAN.batches)
    assert res.commit_calls == {"move_intermediate_cache": VERIFY_STEPS + tracked_steps,
                                "conv_state_rollback": VERIFY_STEPS + tracked_steps}, res.commit_calls
    # the pool as SGLang builds it with speculative decoding on this release: the temporal state (a
    # transposed view on 0.5.20), the per-draft-token scratch [layers, rows + 1, draft, Hv, ., .] and
    # window-major conv states W - 1 + draft - 1 rows long
    assert res.layout == (pool_layout.TRANSPOSED_VIEW if TRANSPOSED_POOL else pool_layout.VALUE_FIRST)
    layers, _, hv, d1, d2 = res.pool_shapes["temporal"]
    assert res.pool_shapes["intermediate_ssm"] == (layers, ROWS + 1, spec.DRAFT_TOKENS, hv, d1, d2), res.pool_shapes
    assert res.pool_shapes["conv"][2] == CONV_WIDTH - 1 + spec.DRAFT_TOKENS - 1, res.pool_shapes
    # radix tracking: every request crossed the track grid and a request resumed from its last tracked
    # state (compared with transformers above, with the others) generated tokens
    assert sorted(res.snapshots) == ["A", "B", "C"], res.snapshots
    assert all(len(r.generated) >= len(PLAN.resume_wrong) for r in res.resumed), [r.generated for r in res.resumed]
    # the verify steps went through the plugin's verify ladder
    text = run.log_text()
    if ssm_dtype == BF16:
        assert "runs on torch.ops.npu.recurrent_gated_delta_rule" in text, text
        assert run.device_calls.get(OP_NPU_RECURRENT) == GDN_LAYERS * VERIFY_STEPS, run.device_calls
    else:
        assert "runs on the torch verify path" in text, text
        assert not (run.device_calls or {}).get(OP_NPU_RECURRENT), run.device_calls


# --------------------------------------------------------------------------- negative controls


def logical_pool_view(mp):
    """The plugin's GDN hooks read the pool through the view SGLang hands them (the behaviour
    before pool_layout): every pool counts as value first in its logical order."""
    mp.setattr(pool_layout, "layout_of", lambda t, name="ssm_states": pool_layout.VALUE_FIRST)


def commit_skipped(mp):
    """move_intermediate_cache copies nothing: the pool keeps the state from before the verify."""
    mp.setattr(mamba_state_update, "emulate_move_intermediate_cache", lambda ssm_states, *a, **k: ssm_states)


def conv_rollback_skipped(mp):
    """conv_state_rollback does nothing: the conv window keeps the rejected drafts' inputs."""
    mp.setattr(spec, "conv_state_rollback", lambda *a, **k: None)


def commit_last_window_step(mp):
    """The commit copies the window's last step whatever was accepted (no rollback of the SSM or
    the conv state): wrong exactly where drafts were rejected."""
    from sglang.srt.hardware_backend.npu.attention.ascend_hybrid_linear_attn_backend import (
        AscendHybridLinearAttnBackend,
    )

    real = AscendHybridLinearAttnBackend.update_mamba_state_after_mtp_verify

    def update(self, last_correct_step_indices, *args, **kwargs):
        return real(self, torch.full_like(last_correct_step_indices, spec.DRAFT_TOKENS - 1), *args, **kwargs)

    mp.setattr(AscendHybridLinearAttnBackend, "update_mamba_state_after_mtp_verify", update)


@pytest.mark.parametrize("breakage", [commit_skipped, conv_rollback_skipped, commit_last_window_step],
                         ids=["commit-skipped", "conv-rollback-skipped", "commit-last-window-step"])
def test_broken_commit_fails_the_comparison(breakage):
    run, _ = _run("qwen3_5", FP32, FP32, breakage=breakage, plan=CONTROL_PLAN)
    cmp = run.compare()
    assert not cmp.fp32_ok(), f"a broken commit still matched transformers: {cmp}"
    assert cmp.max_gap > 100 * harness.FP32_LOGIT_TOL, str(cmp)


def test_hooks_reading_the_logical_pool_view_fail_on_a_transposed_pool():
    """The bug pool_layout fixes: on SGLang 0.5.20 (transposed pool view) hooks that index the
    view logically hand every later step a transposed state; on releases whose pool is value
    first the same change is inert (the run still matches)."""
    run, res = _run("qwen3_5", FP32, FP32, breakage=logical_pool_view, plan=CONTROL_PLAN)
    cmp = run.compare()
    if TRANSPOSED_POOL:
        assert res.layout == pool_layout.TRANSPOSED_VIEW
        assert not cmp.fp32_ok(), f"hooks reading the logical view still matched transformers: {cmp}"
        assert cmp.max_gap > 100 * harness.FP32_LOGIT_TOL, str(cmp)
    else:
        assert res.layout == pool_layout.VALUE_FIRST
        assert cmp.fp32_ok(), str(cmp)


# --------------------------------------------------------------------------- deep MTP windows

# 16 draft tokens (the root + 15 drafts), past the NPU verify op's 8 (MAX_MTP): two verify steps,
# no radix tracking (SGLang's extra-buffer tracking wants an interval >= the draft tokens).  Step 1:
# A accepts 9 drafts (a commit past the op's rows), B all 15, C none; step 2, from those states: C 12,
# A none, B 1.
DEEP_DRAFT = 16
DEEP_PLAN = spec.SpecPlan(draft_tokens=DEEP_DRAFT, batches=(("A", "B", "C"), ("C", "A", "B")),
                          wrong=({"A": (9,), "C": (0,)}, {"A": (0,), "B": (1,), "C": (12,)}), track=False,
                          resume_wrong=())


@pytest.mark.base_release_only  # the verify ladder at 16 drafts; the release path runs in the cases above
def test_sixteen_draft_tokens_match_plain_decoding_with_drafts_partly_rejected():
    """Qwen3.5 fp32 (the config's fp32 pool): the verify ladder's torch rung at 16 tokens per request,
    SGLang's speculative conv update on a window of W - 1 + 15 rows, its commit of steps 0 .. 15 and
    conv rollback by up to 15 rows give the plain greedy run's tokens and transformers' logits."""
    assert DEEP_DRAFT > RECURRENT_MAX_TOKENS
    base = run_family("qwen3_5", dtype=FP32, device=spec.fast_split(_device(FP32)), ssm_dtype=FP32,
                      plan=harness.StepPlan(decodes=DEEP_PLAN.tokens_needed() - 1))
    run, res = spec.run_spec("qwen3_5", dtype=FP32, ssm_dtype=FP32, device=_device(FP32), plan=DEEP_PLAN,
                             known={r.name: r.tokens for r in base.reqs}, fallback=False)
    assert base.compare().fp32_ok(), str(base.compare())
    assert run.compare().fp32_ok(), str(run.compare())
    assert max(len(r.generated) for r in run.reqs) > DEEP_DRAFT
    for got, want in zip(run.reqs, base.reqs):
        assert got.generated == want.generated[:len(got.generated)], (got.name, got.generated, want.generated)
    accepted = [(s.name, s.accepted) for s in res.steps]
    assert accepted == DEEP_PLAN.planned_accepts() == [("A", 9), ("B", 15), ("C", 0), ("C", 12), ("A", 0), ("B", 1)]
    assert all(s.committed_step == s.accepted for s in res.steps), res.steps
    steps = len(DEEP_PLAN.batches)
    assert res.commit_calls == {"move_intermediate_cache": steps, "conv_state_rollback": steps}, res.commit_calls
    layers, _, hv, d1, d2 = res.pool_shapes["temporal"]
    assert res.pool_shapes["intermediate_ssm"] == (layers, ROWS + 1, DEEP_DRAFT, hv, d1, d2), res.pool_shapes
    assert res.pool_shapes["conv"][2] == CONV_WIDTH - 1 + DEEP_DRAFT - 1, res.pool_shapes
    assert "runs on the torch verify path" in run.log_text()
    assert not (run.device_calls or {}).get(OP_NPU_RECURRENT), run.device_calls


# 16 draft tokens on graph-replay metadata with one bucket of 7 requests: every verify step computes the gates
# of 7 x 16 = 112 tokens, which sgl-kernel-npu's fused_gdn_gating_kernel_without_sigmoid cannot tile for the
# 6 value heads of Qwen3.6-27B at TP=8 (blocks of 3; the same failure as 25..36 requests of 4 draft tokens)
GATES_PLAN = dataclasses.replace(DEEP_PLAN, graph_buckets=(7,))


@pytest.mark.base_release_only  # the patch's route on every release: tests/integration/test_verify_gates_hook.py
def test_verify_gates_the_kernel_cannot_tile_are_served_and_match_plain_decoding():
    """SGLang's verify step calls the without-sigmoid gating kernel on token counts its tiling refuses (the
    emulator raises the kernel's error there); the plugin's gdn-verify-gates hook serves them on
    fused_gdn_gating_npu and the run equals plain decoding and transformers."""
    tokens, heads = GATES_PLAN.graph_buckets[0] * DEEP_DRAFT, 6
    assert gdn_contract.without_sigmoid_tiling_reason(tokens, heads) is not None   # upstream fails here
    base = run_family("qwen3_5", dtype=FP32, device=spec.fast_split(_device(FP32)), ssm_dtype=FP32,
                      plan=harness.StepPlan(decodes=GATES_PLAN.tokens_needed() - 1))
    run, res = spec.run_spec("qwen3_5", dtype=FP32, ssm_dtype=FP32, device=_device(FP32), plan=GATES_PLAN,
                             known={r.name: r.tokens for r in base.reqs}, fallback=False)
    assert run.compare().fp32_ok(), str(run.compare())
    for got, want in zip(run.reqs, base.reqs):
        assert got.generated == want.generated[:len(got.generated)], (got.name, got.generated, want.generated)
    assert [(s.name, s.accepted) for s in res.steps] == GATES_PLAN.planned_accepts()
    assert (f"cannot use the without_sigmoid kernel: it tiles {tokens} tokens x {heads} heads"
            in run.log_text()), run.log_text()
    # one gating launch per GDN layer and verify step, on the sibling kernel
    assert run.device_calls.get(gdn_contract.OP_GATING) == GDN_LAYERS * len(GATES_PLAN.batches), run.device_calls
