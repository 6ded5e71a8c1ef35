"""More edges of the GDN hooks (:mod:`sglang_ascend_hybrid.integration.gdn_hooks`) and the STANDALONE
draft check: the Triton prefill entry hook's defaults, the verify hook on a backend that says nothing
about graph mode, this rank's key heads for one value head, and the text of the draft refusal."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace as NS

import pytest
import torch

from sglang_ascend_hybrid.envs import ENV
from sglang_ascend_hybrid.integration import gdn_hooks
from sglang_ascend_hybrid.integration import short_conv_verify as scv
from sglang_ascend_hybrid.ops.gdn import prefill
from sglang_ascend_hybrid.ops.gdn import verify as gv
from tests.integration.test_gdn_hooks_edges import _fla_inputs, _refusing_entry
from tests.ops.gdn.verify.test_gdn_verify import DK, DV, NK, NV, _case, _max_rel, _oracle


@pytest.fixture(autouse=True)
def _fresh_ladders(monkeypatch):
    monkeypatch.delenv(ENV.DEBUG_CHECKS.name, raising=False)
    prefill.forget_refusals()
    yield
    prefill.forget_refusals()


# ---------------------------------------------------------------- sgl_chunk_gated_delta_rule_npu


def test_entry_hook_keeps_the_entrys_default_of_no_qk_l2norm():
    """A caller that leaves ``use_qk_l2norm_in_kernel`` out gets the entry's default, False: the entry
    receives it, and the ladder serving a refused call uses q and k as given."""
    q, k, v, g, beta, cu, h0 = _fla_inputs([5, 3], 1, 2, 8, 8, seed=48)
    seen = []
    gdn_hooks.sgl_chunk_gated_delta_rule_npu(lambda *a, **kw: seen.append(kw), q, k, v, g, beta, initial_state=h0,
                                             cu_seqlens=cu)
    assert seen[0]["use_qk_l2norm_in_kernel"] is False

    refusing, calls = _refusing_entry()
    default = gdn_hooks.sgl_chunk_gated_delta_rule_npu(refusing, q, k, v, g, beta, initial_state=h0, cu_seqlens=cu)
    assert len(calls) == 1   # the entry refused: the ladder served
    explicit = gdn_hooks.sgl_chunk_gated_delta_rule_npu(refusing, q, k, v, g, beta, initial_state=h0, cu_seqlens=cu,
                                                        use_qk_l2norm_in_kernel=False)
    normalised = gdn_hooks.sgl_chunk_gated_delta_rule_npu(refusing, q, k, v, g, beta, initial_state=h0,
                                                          cu_seqlens=cu, use_qk_l2norm_in_kernel=True)
    assert all(torch.equal(a, b) for a, b in zip(default, explicit))
    assert not torch.allclose(default[0].float(), normalised[0].float(), atol=1e-2)


# ---------------------------------------------------------------- ascend_verify_update


def test_verify_hook_on_a_backend_without_graph_mode_reads_its_eager_tensors():
    """No ``graph_mode`` attribute means eager: the backend's own accepted counts, lengths and state
    indices (here request 1 resumes from its third scratch row), never the graph metadata."""
    c = _case(2, 3, seed=31, dtype=torch.float32, pool_dtype=torch.float32, accepted=[2, 3])
    c["inter"] = torch.randn(c["inter"].shape, generator=torch.Generator().manual_seed(32)) * 0.3
    backend = NS(num_accept_tokens=c["nat"], actual_seq_lengths=c["lengths"], ssm_state_indices=c["idx"].reshape(-1))
    pool, inter = c["pool"].clone(), c["inter"].clone()
    out = gdn_hooks.ascend_verify_update(None, backend, c["mix"], NK, NV, DK, DV, pool, c["beta"], c["g"], c["cache"],
                                         intermediate_state=inter)
    ref_out, _, ref_inter = _oracle(c)
    assert out.shape == (2, 3, NV, DV)
    assert _max_rel(out, ref_out) < 1e-5 and _max_rel(inter, ref_inter) < 1e-5
    assert torch.equal(pool, c["pool"]) and gv.verify_rungs() == ("npu_recurrent", "torch")


# ---------------------------------------------------------------- this rank's key heads


@pytest.mark.parametrize("hv,hk,value_heads,want", [
    (1, 1, 1, 1),        # one value head and one key head (a tiny or fully split model)
    (1, 2, 1, 2),
    (32, 16, 8, 4),      # 8 of 32 value heads on this rank
    (0, 1, 1, None),     # the config does not say
    (3, 2, 2, None),     # not a whole number of key heads
])
def test_per_rank_key_heads_follow_the_configs_ratio(hv, hk, value_heads, want):
    runner = NS(model_config=NS(hf_text_config=NS(linear_num_value_heads=hv, linear_num_key_heads=hk)))
    assert gdn_hooks._per_rank_key_heads(runner, value_heads) == want


# ---------------------------------------------------------------- the STANDALONE draft refusal


def test_standalone_draft_refusal_says_what_draft_to_use_instead(tmp_path):
    (tmp_path / "config.json").write_text('{"architectures": ["Lfm2ForCausalLM"]}', encoding="utf-8")
    args = NS(speculative_algorithm="STANDALONE", speculative_eagle_topk=1, speculative_num_draft_tokens=4,
              speculative_draft_model_path=str(tmp_path))
    with pytest.raises(ValueError) as exc:
        scv.check_speculative(args)
    assert str(exc.value) == (
        f"sglang-ascend-hybrid: --speculative-algorithm STANDALONE with --speculative-draft-model-path {tmp_path} "
        "(Lfm2ForCausalLM): SGLang gives a STANDALONE draft model no conv or linear-attention state backend, so a "
        "draft with short-conv or GDN layers cannot run; use a draft model of full-attention layers only (e.g. a "
        "small Llama / Qwen3 model with the same vocabulary)")


def test_a_draft_config_is_read_as_utf8_under_an_ascii_locale(tmp_path):
    """config.json is UTF-8 whatever the server's locale: under an ASCII C locale (no coercion, no UTF-8
    mode) a draft config with non-ASCII text still names its architecture, and the draft is refused."""
    (tmp_path / "config.json").write_text('{"architectures": ["Lfm2ForCausalLM"], "_name_or_path": "Mod\u00e8le"}',
                                          encoding="utf-8")
    env = dict(os.environ, LC_ALL="C", LANG="C", PYTHONUTF8="0", PYTHONCOERCECLOCALE="0")
    code = ("import locale, sys\n"
            "from sglang_ascend_hybrid.integration.short_conv_verify import _architecture_of\n"
            "print(locale.getpreferredencoding(False), _architecture_of(sys.argv[1]))")
    run = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[2], timeout=120)
    assert run.returncode == 0, run.stderr
    encoding, arch = run.stdout.split()
    assert arch == "Lfm2ForCausalLM", encoding  # (on this project's machines the C locale is ASCII)
