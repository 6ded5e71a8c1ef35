"""Speculative decoding (EAGLE-family linear chains, topk 1) of whole short-conv models on Ascend:
LFM2, LFM2-MoE, LFM2-VL (text requests) and ZAYA1 (its CCA conv) through the plugin's verify paths
(:mod:`sglang_ascend_hybrid.integration.short_conv_verify`), driven as :mod:`tests.e2e.spec` drives
SGLang's EAGLE worker: prefills, TARGET_VERIFY steps of 4-token windows with drafts partly rejected,
SGLang's greedy acceptance, SGLang's NPU commit (``update_mamba_state_after_mtp_verify`` ->
``conv_state_rollback`` on the window-major draft pool, and the plugin's commit of ZAYA1's
``prev_hs``), radix-cache tracking of the verify steps and requests resumed from the tracked states;
eagerly and on the sidecar's graph-replay metadata (padded batches).

Asserted: the greedy tokens equal the same model's without speculative decoding and transformers'
(fp32: every token, logits within the harness's fp32 tolerance; bf16: decisive-equal), every
acceptance depth 0-3 happened, SGLang's commit ran per step, the pool has the draft window's
rows, and the verify went through the plugin (its verify ladder for LFM2, its CCA verify for
ZAYA1).  Negative controls: rollback skipped, and a verify that writes only the state rows (as a
plain extend would), fail the comparison."""

from __future__ import annotations

import dataclasses
import functools
from types import SimpleNamespace as NS

import pytest
import torch

from sglang_ascend_hybrid.integration import short_conv_verify
from tests.e2e import harness, spec
from tests.e2e.runner import built, run_family
from tests.support.release_subset import older_releases_run

PLAN = spec.SpecPlan()
VERIFY_STEPS = len(PLAN.batches) + len(PLAN.resume_wrong)
TRACKED_STEPS = len(PLAN.batches)
GRAPH_PLAN = dataclasses.replace(PLAN, graph_buckets=(1, 2, 4))
CONTROL_PLAN = spec.SpecPlan(batches=PLAN.batches[:3], wrong=PLAN.wrong[:3], track=False)
FP32, BF16 = torch.float32, torch.bfloat16
# conv states per layer in the pool: LFM2's one window, ZAYA1's conv_qk window and prev_hs lag
CONV_STATES = {"lfm2": 1, "lfm2_moe": 1, "lfm2_vl": 1, "zaya": 2}


def _state_rows(name: str) -> int:
    """The first conv state's rows without speculative decoding, from the config SGLang reads."""
    from sglang.srt.configs.hybrid_arch import mambaish_config

    cfg = built(name).config
    params = mambaish_config(NS(hf_config=cfg, hf_text_config=getattr(cfg, "text_config", cfg))).mamba2_cache_params
    return int(params.shape.conv[0][1])




CASES = [
    pytest.param("lfm2", FP32, PLAN, id="lfm2-fp32"),
    pytest.param("lfm2_moe", FP32, PLAN, id="lfm2_moe-fp32"),
    pytest.param("zaya", FP32, PLAN, id="zaya-fp32"),
    pytest.param("lfm2_vl", FP32, PLAN, id="lfm2_vl-fp32-text"),
    pytest.param("lfm2", BF16, PLAN, id="lfm2-bf16"),
    pytest.param("lfm2", FP32, GRAPH_PLAN, id="lfm2-fp32-graph-metadata"),
    pytest.param("zaya", FP32, GRAPH_PLAN, id="zaya-fp32-graph-metadata"),
]


@functools.lru_cache(maxsize=None)
def without_spec(name: str, dtype: torch.dtype):
    return run_family(name, dtype=dtype, plan=harness.StepPlan(decodes=PLAN.tokens_needed() - 1))


def _run(name, dtype, breakage=None, plan=PLAN):
    base = without_spec(name, dtype)
    return spec.run_spec(name, dtype=dtype, breakage=breakage, plan=plan,
                         known={r.name: r.tokens for r in base.reqs}, fallback=breakage is None)


def _count_verify(mp, calls):
    for module, fn in ((short_conv_verify, "causal_conv1d_verify"), (short_conv_verify, "cca_verify")):
        real = getattr(module, fn)

        def counted(*a, _real=real, _fn=fn, **k):
            calls[_fn] = calls.get(_fn, 0) + 1
            return _real(*a, **k)

        mp.setattr(module, fn, counted)


# older releases: LFM2 fp32 and bf16 (the other families repeat the same verify / commit path)
@pytest.mark.parametrize("name,dtype,plan", older_releases_run(CASES, keep=(0, 4)))
def test_speculative_decoding_matches_plain_decoding_and_transformers(name, dtype, plan):
    base = without_spec(name, dtype)
    verify_calls: dict = {}
    run, res = _run(name, dtype, breakage=lambda mp: _count_verify(mp, verify_calls), plan=plan)
    spec.assert_matches_plain(run, res, base, PLAN, fp32=dtype == FP32)
    accepted = [s.accepted for s in res.steps]
    assert {0, 1, 2, 3} <= set(accepted), accepted
    assert all(s.committed_step == s.accepted for s in res.steps), res.steps
    # SGLang's commit rolled back conv[0] once per step and per tracked step; ZAYA1's prev_hs too
    assert res.commit_calls.get("conv_state_rollback") == CONV_STATES[name] * (VERIFY_STEPS + TRACKED_STEPS), \
        res.commit_calls
    # the window-major draft pool: W - 1 state rows + draft - 1 rows
    assert res.pool_shapes["conv"][2] == _state_rows(name) + spec.DRAFT_TOKENS - 1, res.pool_shapes
    assert sorted(res.snapshots) == ["A", "B", "C"], res.snapshots
    assert all(len(r.generated) >= len(PLAN.resume_wrong) for r in res.resumed), [r.generated for r in res.resumed]
    # the verify ran through the plugin, every step and conv layer
    served = verify_calls.get("cca_verify" if name == "zaya" else "causal_conv1d_verify", 0)
    assert served >= VERIFY_STEPS, verify_calls


# --------------------------------------------------------------------------- negative controls


def conv_rollback_skipped(mp):
    """conv_state_rollback does nothing: the draft window keeps the rejected drafts' inputs."""
    mp.setattr(spec, "conv_state_rollback", lambda *a, **k: None)


def verify_writes_state_rows_only(mp):
    """The verify leaves the draft window's earlier rows as they were (a plain extend's write-back
    of the last W-1 rows): the rollback then restores stale rows."""
    from sglang_ascend_hybrid.ops.conv import torch_impl

    real = torch_impl.verify_rows_torch

    def only_state_rows(x, conv_window, weight, *a, **k):
        keep = conv_window.clone()
        out = real(x, conv_window, weight, *a, **k)
        s = weight.shape[1] - 1
        conv_window[:, :conv_window.shape[1] - s] = keep[:, :conv_window.shape[1] - s]
        return out

    from sglang_ascend_hybrid.ops.conv import dispatch

    mp.setattr(dispatch, "verify_rows_torch", only_state_rows)


@pytest.mark.parametrize("breakage", [conv_rollback_skipped, verify_writes_state_rows_only],
                         ids=["rollback-skipped", "verify-writes-state-rows-only"])
def test_broken_verify_or_commit_fails_the_comparison(breakage):
    run, _ = _run("lfm2", FP32, breakage=breakage, plan=CONTROL_PLAN)
    cmp = run.compare()
    assert not cmp.fp32_ok(), f"a broken verify / commit still matched transformers: {cmp}"
    assert cmp.max_gap > 100 * harness.FP32_LOGIT_TOL, str(cmp)
