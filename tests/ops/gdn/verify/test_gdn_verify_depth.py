"""GDN speculative verify deeper than the NPU op's buffers (speculative_num_draft_tokens 9 .. 16).

The op keeps ``MAX_MTP = 8`` tokens per request on chip and its host never checks S
(:data:`~sglang_ascend_hybrid.ops.gdn.contract.RECURRENT_MAX_TOKENS`); the ladder refuses it with that
reason and the torch rung verifies any depth.  Oracle: ``naive_verify.naive_gdn_verify`` (fp64).
"""

from __future__ import annotations

import logging

import pytest
import torch

from sglang_ascend_hybrid.emulators import gdn_npu_recurrent
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.errors import EmulatorContractViolation
from sglang_ascend_hybrid.ops.gdn import contract as caps
from sglang_ascend_hybrid.ops.gdn import verify as gv
from sglang_ascend_hybrid.ops.gdn.contract import OP_NPU_RECURRENT
from sglang_ascend_hybrid.ops.ladder import ForcedRungUnavailable
from tests.ops.gdn.verify.test_gdn_verify import (
    DK,
    DV,
    NK,
    NV,
    _call,
    _case,
    _commit,
    _hooked_verify,
    _max_rel,
    _oracle,
    _verify_backend,
)

MAX = caps.RECURRENT_MAX_TOKENS


@pytest.fixture
def gdn_backend_module(npu_stub_packages):
    """The real upstream Ascend GDN backend module (SGLang's verify method)."""
    from sglang.srt.hardware_backend.npu.attention import ascend_gdn_backend as mod

    return mod


def _depth_case(S, pool_dtype, *, seed):
    """Three requests at depth S: a full window from the pool, a shorter one starting from a scratch
    row (num_accepted_tokens > 1, past the op's 8 rows), and one of length 1; the scratch holds
    earlier states, so a wrong initial row shows."""
    c = _case(3, S, seed=seed, dtype=torch.float32, pool_dtype=pool_dtype, lens=[S, S - 3, 1],
              accepted=[1, S - 2, S])
    gen = torch.Generator().manual_seed(seed + 1)
    c["inter"] = (torch.randn(c["inter"].shape, generator=gen) * 0.3).to(pool_dtype)
    return c


@pytest.mark.parametrize("S,pool_dtype", [(MAX + 1, torch.float32), (12, torch.bfloat16), (16, torch.float32),
                                          (16, torch.bfloat16)])
def test_torch_verify_beyond_the_npu_depth_matches_the_fp64_oracle(S, pool_dtype):
    assert S > MAX
    c = _depth_case(S, pool_dtype, seed=S)
    ref_out, _, ref_inter = _oracle(c)
    pool, inter = c["pool"].clone(), c["inter"].clone()
    out = gv.recurrent_verify(_call(c, pool=pool, inter=inter), backend="torch")
    live = ~torch.isnan(ref_out)
    assert torch.equal(out[~live], torch.zeros_like(out[~live]))   # past each length: 0
    tol = 1e-5 if pool_dtype == torch.float32 else 1e-2
    assert _max_rel(out, ref_out) < tol
    assert _max_rel(inter, ref_inter) < tol and torch.equal(pool, c["pool"])
    # the oracle tells the initial rows apart: request 1 starts from scratch row S + S - 3
    wrong_start = dict(c, nat=torch.ones(3, dtype=torch.int32))
    assert _max_rel(out, _oracle(wrong_start)[0]) > 1e-2


def test_the_npu_predicate_refuses_more_than_eight_tokens_with_the_reason():
    bf16 = (torch.bfloat16,) * 3
    assert caps.recurrent_refusal_reason(NV, NK, DK, DV, MAX, bf16) is None
    for S in (MAX + 1, 12, 16):
        reason = caps.recurrent_refusal_reason(NV, NK, DK, DV, S, bf16)
        assert f"S={S} tokens per request" in reason and f"the {MAX} its on-chip buffers hold" in reason, reason
        assert "MAX_MTP" in reason and "not checked by the host" in reason
        assert gv._npu_reason(_call(_case(2, S))) == reason      # the verify rung's predicate says it
    assert "S=0" in caps.recurrent_refusal_reason(NV, NK, DK, DV, 0, bf16)
    # the emulator of the op holds the same limit: a window of 9 is a contract violation there
    c = _case(1, MAX + 1)
    with pytest.raises(EmulatorContractViolation, match=rf"S={MAX + 1} > {MAX}"):
        gdn_npu_recurrent.make_npu_recurrent_emulator()(c["mix"], c["pool"].clone(), c["beta"].bfloat16(), DK ** -0.5,
                                          c["lengths"], c["idx"], NK, NV, intermediate_state=c["inter"].clone(),
                                          cache_indices=c["cache"], num_accepted_tokens=c["nat"], g=c["g"])


def test_a_deep_bf16_window_falls_to_the_torch_rung_visibly_once(caplog):
    """All-bf16 tensors (the op's dtype) at S = 8 run on the op; at 16 the ladder refuses it, says why
    once for two calls, and the torch rung's result is the oracle's."""
    real = gdn_npu_recurrent.make_npu_recurrent_emulator()
    calls = []
    ops = {OP_NPU_RECURRENT: lambda *a, **k: calls.append(a[0].shape[1]) or real(*a, **k)}
    c8 = _case(2, MAX, seed=3)
    with seam.install_emulators(ops):
        gv.recurrent_verify(_call(c8, inter=c8["inter"].clone()))
    assert calls == [MAX]
    c = _case(2, 16, seed=4, lens=[16, 11])
    ref_out, _, ref_inter = _oracle(c)
    with seam.install_emulators(ops), caplog.at_level(logging.INFO):
        for _ in range(2):
            inter = c["inter"].clone()
            out = gv.recurrent_verify(_call(c, inter=inter))
        with pytest.raises(ForcedRungUnavailable, match="S=16 tokens per request"):
            gv.recurrent_verify(_call(c, inter=c["inter"].clone()), backend="npu_recurrent")
    assert calls == [MAX]                                            # the deep window never reached the op
    assert _max_rel(out, ref_out) < 2e-2 and _max_rel(inter, ref_inter) < 2e-2
    assert caplog.text.count("cannot use torch.ops.npu.recurrent_gated_delta_rule: S=16 tokens") == 1, caplog.text
    assert "runs on the torch verify path" in caplog.text


def test_hooked_verify_at_sixteen_tokens_then_commit_equals_the_oracle(gdn_backend_module, monkeypatch):
    """The real ``AscendGDNAttnBackend`` verify method (graph branch, a padded request) at S = 16 on the
    bf16 pool, then upstream's commit (``move_intermediate_cache``) of steps past the op's 8."""
    mod = gdn_backend_module
    B, S = 3, 16
    c = _case(B, S, seed=21)
    c["beta"] = c["beta"].bfloat16().float()
    c["cache"][2] = -1
    backend = _verify_backend(mod, c, graph_mode=True)
    backend.forward_metadata.mamba_cache_indices_gdn[2 * S:] = -1   # the padded request, as captured
    monkeypatch.setattr(mod.AscendGDNAttnBackend, "fused_recurrent_gated_delta_rule_update", _hooked_verify(mod))
    pool, inter = c["pool"].clone(), c["inter"].clone()
    seen = []
    real = gdn_npu_recurrent.make_npu_recurrent_emulator()
    with seam.install_emulators({OP_NPU_RECURRENT: lambda *a, **k: seen.append(1) or real(*a, **k)}):
        out = backend.fused_recurrent_gated_delta_rule_update(c["mix"], NK, NV, DK, DV, recurrent_state=pool,
                                                             beta=c["beta"].bfloat16(), g=c["g"],
                                                             cache_indices=c["cache"],
                                                             intermediate_state=inter.view(B + 1, S, NV, DV, DK))
    assert not seen
    live = dict(c, mix=c["mix"][:2], beta=c["beta"][:2], g=c["g"][:2], cache=c["cache"][:2],
                lengths=c["lengths"][:2], idx=c["idx"][:2], nat=c["nat"][:2])
    ref_out, _, ref_inter = _oracle(live)
    assert out.shape == (B, S, NV, DV) and _max_rel(out[:2], ref_out) < 2e-2
    assert torch.equal(out[2], torch.zeros_like(out[2]))
    assert _max_rel(inter[:2 * S], ref_inter[:2 * S]) < 2e-2
    assert torch.equal(inter[2 * S:], c["inter"][2 * S:])            # the padded request's rows untouched
    accepted = torch.tensor([11, S - 1])
    _commit(pool, inter, c["cache"][:2], accepted, S)
    expected = c["pool"].double().clone()
    for b in range(2):
        expected[c["cache"][b]] = ref_inter[b * S + int(accepted[b])]
    assert _max_rel(pool, expected) < 2e-2
