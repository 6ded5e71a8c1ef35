"""Speculative decoding through SGLang's real speculative worker on the emulated Ascend device.

- LFM2 (fp32 target) with STANDALONE speculative decoding and a tiny random full-attention draft
  (:func:`tier.draft_checkpoint`): SGLang's tree building (``build_tree_kernel_efficient``), greedy
  verify (``verify_tree_greedy``), cache-location update, the plugin's short-conv verify and SGLang's
  conv-state rollback (``conv_state_rollback``) on the emulated device.  The draft is random, so most
  drafts are rejected: every verify rolls the conv state back.
- Qwen3.5 with its MTP layer and NEXTN (the seed deployment's algorithm): a checkpoint variant with
  ``mtp_num_hidden_layers: 1`` and random ``mtp.*`` weights (transformers ignores them).

Speculative decoding must not change greedy tokens: each run equals transformers and the run of the
same configuration without speculative decoding.  The two speculative runs with the radix cache on are
the older releases' runtime tier; the plain comparators run in the base release (in fp32 both runs
equal transformers' greedy tokens, so the older releases compare with transformers alone), for CI time.
"""

from __future__ import annotations

import json
import os
import tempfile

import pytest
import torch

from tests.runtime import checkpoints, tier

# xdist groups per test, not per module (xdist joins every group mark of a test into one name): the LFM2
# runs share test_short_conv.py's group (the plain LFM2 fp32 run), the Qwen3.5 runs test_gdn.py's (the
# plain Qwen3.5 fp32 run of the MTP checkpoint is that module's fp32 model run too)
pytestmark = [pytest.mark.runtime]

SPEC_FLAGS = {"speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}


def _standalone() -> dict:
    return {"speculative_algorithm": "STANDALONE", "speculative_draft_model_path": tier.draft_checkpoint(),
            **SPEC_FLAGS}


def _accepts(served) -> list:
    return [(g["spec_verify_ct"], g["spec_accept_length"]) for g in served.requests()]


def _assert_speculative_served(r: tier.Run) -> None:
    """Every request went through verify rounds, each committing at least one token."""
    got = r.served.requests()
    assert all(g["spec_verify_ct"] > 0 for g in got), _accepts(r.served)
    # each verify round commits >= 1 token; a request's tokens after its first come from verify rounds
    assert all(g["spec_accept_length"] >= 1.0 for g in got), _accepts(r.served)


def _assert_equals_plain(r: tier.Run, plain: tier.Run) -> None:
    assert [g["output_ids"] for g in r.served.requests()] == [g["output_ids"] for g in plain.served.requests()]


# ----------------------------------------------------------------------------------------- LFM2 STANDALONE


# the LFM2 tests join test_short_conv.py's worker group, whose plain LFM2 fp32 run they compare with
# (tier caches runs per worker process)
@pytest.mark.xdist_group("runtime-short-conv")
def test_lfm2_standalone_matches_transformers():
    r = tier.run("lfm2", "float32", engine=_standalone())
    tier.assert_served_whole(r)
    tier.assert_matches_transformers(r)
    _assert_speculative_served(r)
    assert "sglang-ascend-hybrid: --attention-backend ascend_hybrid runs on SGLang's Ascend stack" in r.served.log
    assert "Lfm2Config on NPU uses the Ascend short-conv backend" in r.served.log
    print("lfm2 STANDALONE accepts (spec_verify_ct, spec_accept_length):", _accepts(r.served))


@pytest.mark.base_release_only
@pytest.mark.xdist_group("runtime-short-conv")
def test_lfm2_standalone_equals_the_plain_run():
    _assert_equals_plain(tier.run("lfm2", "float32", engine=_standalone()), tier.run("lfm2", "float32"))


@pytest.mark.xdist_group("runtime-short-conv")
def test_lfm2_standalone_runs_the_plugins_verify_and_sglangs_spec_ops():
    served = tier.run("lfm2", "float32", engine=_standalone()).served
    # fp32 is outside every NPU conv kernel's contract: the plugin's torch rung serves the verify
    assert ("causal_conv1d_verify", "torch") in served.rungs()
    assert {"torch.ops.npu.build_tree_kernel_efficient",
            "sgl_kernel_npu.sample.verify_tree_greedy:verify_tree_greedy",
            "sgl_kernel_npu.mamba.mamba_state_update_triton:conv_state_rollback"} <= served.device_ops()
    assert all(g["cached_tokens"] >= 128 for g in served.rounds[1])  # radix hits under speculation


# ----------------------------------------------------------------------------------------- Qwen3.5 NEXTN

_MTP_CHECKPOINTS: dict = {}


def mtp_checkpoint(dtype: str) -> tuple[str, str]:
    """Family ``qwen3_5`` with one MTP layer: ``mtp_num_hidden_layers: 1`` in the text config and random
    ``mtp.*`` weights named as real Qwen3.5 checkpoints hold them (SGLang's ``models/qwen3_5_mtp.py``
    ``load_weights``: ``mtp.fc``, ``mtp.pre_fc_norm_{embedding,hidden}``, ``mtp.layers.0.*`` -- a
    full-attention decoder layer -- and ``mtp.norm``).  The reference folder is the plain model's."""
    if dtype not in _MTP_CHECKPOINTS:
        from safetensors.torch import load_file, save_file

        dest = tempfile.mkdtemp(prefix=f"runtime-qwen3_5-mtp-{dtype}-")
        model_dir, ref_dir = checkpoints.write("qwen3_5", dest, getattr(torch, dtype))
        cfg_path = os.path.join(model_dir, "config.json")
        with open(cfg_path, encoding="utf-8") as fh:
            config = json.load(fh)
        text = config.get("text_config", config)
        text["mtp_num_hidden_layers"] = 1
        with open(cfg_path, "w", encoding="utf-8") as fh:
            json.dump(config, fh, indent=1)

        path = os.path.join(model_dir, "model.safetensors")
        state = load_file(path)
        attn_layer = next(k.split(".layers.")[1].split(".")[0] for k in state if ".self_attn.q_proj." in k)
        prefix = next(k.split("layers.")[0] for k in state if ".self_attn.q_proj." in k) + f"layers.{attn_layer}."
        g = torch.Generator().manual_seed(7)

        def rand_like(t: torch.Tensor) -> torch.Tensor:
            return (torch.randn(t.shape, generator=g) * 0.05).to(t.dtype)

        hidden = int(text["hidden_size"])
        wdt = getattr(torch, dtype)
        mtp = {"mtp." + "layers.0." + k[len(prefix):]: rand_like(v) for k, v in state.items() if k.startswith(prefix)}
        mtp["mtp.fc.weight"] = rand_like(torch.empty(hidden, 2 * hidden, dtype=wdt))
        for name in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
            mtp[f"mtp.{name}.weight"] = rand_like(torch.empty(hidden, dtype=wdt))
        state.update(mtp)
        save_file({k: v.contiguous() for k, v in state.items()}, path)
        _MTP_CHECKPOINTS[dtype] = (model_dir, ref_dir)
    return _MTP_CHECKPOINTS[dtype]


def _run_mtp(dtype: str, engine: dict) -> tier.Run:
    # tier.run serves the checkpoint it holds for (family, dtype): hand it the MTP variant's
    tier._CHECKPOINTS.setdefault(("qwen3_5_mtp", dtype), mtp_checkpoint(dtype))
    return tier.run("qwen3_5_mtp", dtype, engine=engine)


NEXTN = {"speculative_algorithm": "NEXTN", **SPEC_FLAGS}  # the config's fp32 SSM pool


@pytest.mark.base_release_only
@pytest.mark.xdist_group("runtime-gdn")
def test_qwen3_5_plain_fp32_serves_on_the_ascend_stack_and_the_plugins_gdn_ladders():
    """The NEXTN run's comparator (the MTP checkpoint without speculative decoding: SGLang loads no MTP
    layer) is itself a whole GDN run: chunked prefill, radix hits, transformers, the plugin's GDN prefill
    and decode ladders, SGLang's Ascend GDN device ops."""
    from tests.runtime.test_gdn import EAGER_DECODE_OPS, GDN_DEVICE_OPS, qwen3_5_attention_ops

    r = _run_mtp("float32", {})
    tier.assert_served_whole(r)
    tier.assert_matches_transformers(r)
    assert "Qwen3_5ForConditionalGeneration keeps its SSM state in float32" in r.served.log
    assert {"gdn_prefill", "gdn_serving_decode"} <= {op for op, _ in r.served.rungs()}, r.served.rungs()
    want = GDN_DEVICE_OPS | EAGER_DECODE_OPS | qwen3_5_attention_ops()
    assert want <= r.served.device_ops(), sorted(want - r.served.device_ops())


@pytest.mark.xdist_group("runtime-gdn")
def test_qwen3_5_nextn_fp32_matches_transformers():
    r = _run_mtp("float32", NEXTN)
    tier.assert_served_whole(r)
    tier.assert_matches_transformers(r)
    _assert_speculative_served(r)
    assert "Qwen3_5ForConditionalGeneration keeps its SSM state in float32" in r.served.log
    assert {"gdn_prefill", "gdn_verify"} <= {op for op, _ in r.served.rungs()}, sorted(r.served.rungs())
    print("qwen3_5 NEXTN accepts (spec_verify_ct, spec_accept_length):", _accepts(r.served))


@pytest.mark.base_release_only
@pytest.mark.xdist_group("runtime-gdn")
def test_qwen3_5_nextn_fp32_equals_the_plain_run():
    _assert_equals_plain(_run_mtp("float32", NEXTN), _run_mtp("float32", {}))


# The seed deployment of this project (Qwen3.6-27B: --tp-size 2 --speculative-algorithm NEXTN
# --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --dtype bfloat16
# --mamba-ssm-dtype bfloat16 --disable-radix-cache, NPU graphs on), on the tiny Qwen3.5 with its MTP layer
SEED = {"speculative_algorithm": "NEXTN", **SPEC_FLAGS, "tp_size": 2, "mamba_ssm_dtype": "bfloat16",
        "disable_radix_cache": True, **tier.GRAPHS}


@pytest.mark.base_release_only
@pytest.mark.xdist_group("runtime-spec")
def test_seed_deployment_serves_and_matches_transformers():
    r = _run_mtp("bfloat16", SEED)
    served = r.served
    want = [req for batch in tier.ROUNDS for req in batch]
    assert [len(g["output_ids"]) for g in served.requests()] == [req.max_new_tokens for req in want]
    assert all(g["cached_tokens"] == 0 for g in served.requests())  # radix cache off
    tier.assert_matches_transformers(r)
    assert "TP0]" in served.log and "TP1]" in served.log
    verify_pids = {x["pid"] for x in served.records if x["kind"] == "rung" and x["name"] == "gdn_verify"}
    assert len(verify_pids) == 2, sorted(served.rungs())  # both ranks verify on the plugin's ladder
    assert all(g["spec_verify_ct"] for g in served.requests()), _accepts(served)
    print("seed deployment accepts (spec_verify_ct, spec_accept_length):", _accepts(served))
