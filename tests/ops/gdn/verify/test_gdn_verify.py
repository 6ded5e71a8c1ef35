"""GDN speculative verify (issue: MTP with every SSM pool dtype).

Oracle: ``naive_verify.naive_gdn_verify``, an fp64 token loop written from the op's contract.
Checked against it: the recurrent-op emulator (so the emulator is trusted), the torch verify
rung (fp32 and bf16 pools), the ladder, and the hooked real ``AscendGDNAttnBackend`` method
followed by upstream's commit of the accepted step (``move_intermediate_cache``).
"""

from __future__ import annotations

import functools
import logging

import pytest
import torch
import torch.nn.functional as F

from sglang_ascend_hybrid.emulators import gdn_npu_recurrent
from sglang_ascend_hybrid.emulators.mamba_state_update import emulate_move_intermediate_cache
from sglang_ascend_hybrid.integration import gdn_hooks
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.errors import EmulatorContractViolation
from sglang_ascend_hybrid.ops.gdn import verify as gv
from sglang_ascend_hybrid.ops.gdn.contract import OP_NPU_RECURRENT
from sglang_ascend_hybrid.ops.ladder import ForcedRungUnavailable
from tests.ops.gdn.naive_verify import naive_gdn_verify
from tests.support.sync_counter import SyncCounter

NK, NV, DK, DV = 2, 4, 32, 16


def _case(B, S, *, seed=0, dtype=torch.bfloat16, pool_dtype=torch.bfloat16, slots=None, lens=None,
          accepted=None, with_g=True):
    """A verify step as SGLang 0.5.23 builds it: scratch rows b*S + t, initial state from the pool."""
    gen = torch.Generator().manual_seed(seed)
    n_slots = B + 3
    mix = torch.randn(B, S, 2 * NK * DK + NV * DV, generator=gen).to(dtype)
    pool = (torch.randn(n_slots, NV, DV, DK, generator=gen) * 0.3).to(pool_dtype)
    inter = torch.zeros((B + 1) * S, NV, DV, DK, dtype=pool_dtype)  # [size + 1, S] scratch, flat
    beta = torch.randn(B, S, NV, generator=gen)                      # pre-sigmoid
    g = F.logsigmoid(torch.randn(B, S, NV, generator=gen) + 1.5) if with_g else None
    cache = torch.tensor(slots if slots is not None else list(range(1, B + 1)), dtype=torch.int32)
    lengths = torch.tensor(lens if lens is not None else [S] * B, dtype=torch.int32)
    idx = torch.arange(B * S, dtype=torch.int32).view(B, S)
    nat = torch.tensor(accepted if accepted is not None else [1] * B, dtype=torch.int32)
    return dict(mix=mix, pool=pool, inter=inter, beta=beta, g=g, cache=cache, lengths=lengths, idx=idx, nat=nat)


def _call(c, *, pool=None, inter=None):
    return gv.VerifyCall(c["mix"], c["pool"] if pool is None else pool, c["beta"], c["g"], DK ** -0.5,
                         c["lengths"], c["idx"], NK, NV, intermediate_state=c["inter"] if inter is None else inter,
                         cache_indices=c["cache"], num_accepted_tokens=c["nat"])


def _oracle(c):
    return naive_gdn_verify(c["mix"], c["pool"], c["beta"], c["g"], DK ** -0.5, c["lengths"].tolist(),
                         c["idx"].tolist(), NK, NV, intermediate=c["inter"], cache=c["cache"].tolist(),
                         accepted=c["nat"].tolist())


def _max_rel(a, b):
    mask = ~torch.isnan(b)
    return float((a.double()[mask] - b[mask]).abs().max() / b[mask].abs().max().clamp(min=1e-6))


# ----------------------------------------------------------------------------- the emulator vs the oracle


# ----------------------------------------------------------------------------- the torch rung vs the oracle


@pytest.mark.parametrize("rows_per_block", [None, 1, 3])
@pytest.mark.parametrize("pool_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("B,S", [(1, 1), (3, 2), (8, 4), (2, 8)])
def test_torch_verify_matches_the_fp64_oracle(monkeypatch, pool_dtype, B, S, rows_per_block):
    lens = [S - (b % S) for b in range(B)]
    c = _case(B, S, seed=B * 10 + S, pool_dtype=pool_dtype, lens=lens, dtype=torch.float32)
    if rows_per_block is not None:   # requests per block of the torch rung: block edges inside the batch
        _, nv, dv, dk = c["pool"].shape
        monkeypatch.setattr(gv, "_BLOCK_BYTES", rows_per_block * nv * dv * dk * 4)
    ref_out, ref_pool, ref_inter = _oracle(c)
    pool, inter = c["pool"].clone(), c["inter"].clone()
    out = gv.recurrent_verify(_call(c, pool=pool, inter=inter), backend="torch")
    live = ~torch.isnan(ref_out)
    assert torch.equal(out[~live], torch.zeros_like(out[~live]))
    tol = 1e-5 if pool_dtype == torch.float32 else 1e-2
    assert _max_rel(out, ref_out) < tol
    assert _max_rel(inter, ref_inter) < tol and torch.equal(pool, c["pool"])
    assert inter.dtype == pool_dtype


@pytest.mark.parametrize("rows_per_block", [None, 1, 2])
def test_torch_verify_skips_padding_rows_and_never_writes_them(monkeypatch, rows_per_block):
    """Graph-mode padding: a padded request has cache index -1 and ssm_state_indices -1."""
    c = _case(3, 2, seed=5, dtype=torch.float32, pool_dtype=torch.float32)
    if rows_per_block is not None:
        _, nv, dv, dk = c["pool"].shape
        monkeypatch.setattr(gv, "_BLOCK_BYTES", rows_per_block * nv * dv * dk * 4)
    c["cache"][2] = -1
    c["idx"][2] = -1
    inter = c["inter"].clone()
    inter[0] = 7.0  # row 0 is where padding writes are routed: it must end with the live value
    before = inter.clone()
    gv.recurrent_verify(_call(c, inter=inter), backend="torch", check_values=False)
    c2 = dict(c, inter=before)
    _, _, ref_inter = _oracle(c2)
    assert _max_rel(inter, ref_inter) < 1e-5
    assert torch.equal(inter[4:], before[4:])  # rows of the padded request and beyond untouched


def test_value_checks_reject_bad_indices_before_any_write():
    c = _case(2, 2, dtype=torch.float32, pool_dtype=torch.float32)
    c["idx"][1, 0] = 1  # row 1 written twice
    inter = c["inter"].clone()
    with pytest.raises(ValueError, match="ssm_state_indices=.*each state row written once"):
        gv.recurrent_verify(_call(c, inter=inter))
    assert torch.equal(inter, c["inter"])
    c = _case(2, 2, dtype=torch.float32, pool_dtype=torch.float32, accepted=[3, 1])
    with pytest.raises(ValueError, match=r"num_accepted_tokens=\[3, 1\]: expected entries in \[1, S=2\]"):
        gv.recurrent_verify(_call(c))


# ----------------------------------------------------------------------------- the ladder


def test_bf16_pool_runs_on_the_npu_op_and_fp32_pool_never_reaches_it(caplog):
    c = _case(4, 3, seed=2)
    kernel_calls = []
    real = gdn_npu_recurrent.make_npu_recurrent_emulator()

    def counting(*a, **kw):
        kernel_calls.append(1)
        return real(*a, **kw)

    ref_out, _, ref_inter = _oracle(c)
    inter = c["inter"].clone()
    with seam.install_emulators({OP_NPU_RECURRENT: counting}):
        out = gv.recurrent_verify(_call(c, inter=inter))
    assert kernel_calls == [1]
    assert _max_rel(out, ref_out) < 2e-2 and _max_rel(inter, ref_inter) < 2e-2

    c32 = _case(4, 3, seed=2, pool_dtype=torch.float32)
    ref_out, _, ref_inter = _oracle(c32)
    inter = c32["inter"].clone()
    with seam.install_emulators({OP_NPU_RECURRENT: counting}), caplog.at_level(logging.INFO):
        out = gv.recurrent_verify(_call(c32, inter=inter))
        with pytest.raises(ForcedRungUnavailable, match="forced kernel 'npu_recurrent' is unavailable"):
            gv.recurrent_verify(_call(c32, inter=inter.clone()), backend="npu_recurrent")
    assert kernel_calls == [1]  # the fp32 pool never reached the bf16-only op
    assert inter.dtype == torch.float32
    assert _max_rel(out, ref_out) < 2e-2 and _max_rel(inter, ref_inter) < 1e-5
    assert "bf16-only" in caplog.text and "runs on the torch verify path" in caplog.text


def test_npu_refusal_falls_back_with_the_scratch_untouched(caplog):
    c = _case(2, 2, seed=4)
    calls = []

    def refusing(*a, **kw):
        calls.append(1)
        raise RuntimeError("vStep should be bigger than 8, shape is too big")

    inter = c["inter"].clone()
    with seam.install_emulators({OP_NPU_RECURRENT: refusing}), caplog.at_level(logging.INFO):
        out = gv.recurrent_verify(_call(c, inter=inter))
        again = gv.recurrent_verify(_call(c, inter=c["inter"].clone()))   # refused for this signature: not asked
    ref_inter = c["inter"].clone()
    ref = gv.recurrent_verify(_call(c, inter=ref_inter), backend="torch")
    assert torch.equal(out, ref) and torch.equal(inter, ref_inter) and torch.equal(again, ref)
    assert calls == [1]
    assert caplog.text.count("gdn_verify kernel npu_recurrent refused") == 1
    served = []
    real = gdn_npu_recurrent.make_npu_recurrent_emulator()

    def serving(*a, **kw):
        served.append(1)
        return real(*a, **kw)

    B, S, nk, nv, dk, dv = 2, 2, 1, 2, 8, 8                      # another head layout: another signature
    other = gv.VerifyCall(torch.randn(B, S, 2 * nk * dk + nv * dv).to(torch.bfloat16),
                          torch.zeros(4, nv, dv, dk, dtype=torch.bfloat16), torch.randn(B, S, nv), None, dk ** -0.5,
                          torch.full((B,), S, dtype=torch.int32), torch.arange(B * S, dtype=torch.int32).view(B, S),
                          nk, nv, intermediate_state=torch.zeros((B + 1) * S, nv, dv, dk, dtype=torch.bfloat16),
                          cache_indices=torch.tensor([0, 2], dtype=torch.int32))
    with seam.install_emulators({OP_NPU_RECURRENT: serving}):
        gv.recurrent_verify(other)                                  # its own verdict: the op serves it
        gv.recurrent_verify(_call(c, inter=c["inter"].clone()))   # the refused signature's stays
    assert served == [1]


# ----------------------------------------------------------------------------- the hooked upstream method


@pytest.fixture
def ascend_gdn_module(npu_stub_packages):
    """The real upstream Ascend GDN backend module (its verify method exists on every release, so
    this is not the ``ascend_gdn`` route fixture of the prefill hook)."""
    from sglang.srt.hardware_backend.npu.attention import ascend_gdn_backend as mod

    return mod


def _hooked_verify(mod):
    original = mod.AscendGDNAttnBackend.fused_recurrent_gated_delta_rule_update

    @functools.wraps(original)
    def method(*args, **kwargs):
        return gdn_hooks.ascend_verify_update(original, *args, **kwargs)

    return method


def _verify_backend(mod, c, graph_mode):
    from types import SimpleNamespace

    backend = object.__new__(mod.AscendGDNAttnBackend)
    backend.graph_mode = graph_mode
    B, S = c["mix"].shape[:2]
    backend.num_accept_tokens = torch.ones(B, dtype=torch.int32)
    backend.actual_seq_lengths = torch.full((B,), S, dtype=torch.int32)
    backend.ssm_state_indices = torch.arange(B * S, dtype=torch.int32)
    backend.forward_metadata = SimpleNamespace(mamba_cache_indices_gdn=torch.arange(B * S, dtype=torch.int32))
    return backend


def _commit(pool, inter_flat, cache, accepted_last_steps, S):
    """Upstream's commit (update_mamba_state_after_mtp_verify -> move_intermediate_cache), one layer."""
    B = cache.shape[0]
    emulate_move_intermediate_cache(pool[None], inter_flat.view(1, -1, S, *pool.shape[1:]),
                                        cache.long(), torch.arange(B), accepted_last_steps.long())


@pytest.mark.parametrize("pool_dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("B,S", [(1, 2), (3, 3), (8, 4), (5, 1)])
def test_hooked_verify_then_commit_equals_the_oracle(ascend_gdn_module, monkeypatch, pool_dtype, B, S):
    mod = ascend_gdn_module
    c = _case(B, S, seed=B + 7 * S, pool_dtype=pool_dtype)
    beta_bf16 = c["beta"].bfloat16()  # what fused_gdn_gating_kernel_without_sigmoid hands over
    c["beta"] = beta_bf16.float()
    backend = _verify_backend(mod, c, graph_mode=B % 2 == 0)
    pool, inter = c["pool"].clone(), c["inter"].clone()
    if pool_dtype == torch.float32:  # upstream as shipped would hand fp32 bytes to the bf16-only op
        monkeypatch.setattr(torch.ops.npu, "recurrent_gated_delta_rule",
                            gdn_npu_recurrent.make_npu_recurrent_emulator(), raising=False)
        with pytest.raises(EmulatorContractViolation, match="bf16-only"):
            backend.fused_recurrent_gated_delta_rule_update(c["mix"], NK, NV, DK, DV, recurrent_state=pool.clone(),
                                                           beta=beta_bf16, g=c["g"], cache_indices=c["cache"],
                                                           intermediate_state=inter.clone())
    monkeypatch.setattr(mod.AscendGDNAttnBackend, "fused_recurrent_gated_delta_rule_update", _hooked_verify(mod))
    with seam.install_emulators({OP_NPU_RECURRENT: gdn_npu_recurrent.make_npu_recurrent_emulator()}):
        out = backend.fused_recurrent_gated_delta_rule_update(c["mix"], NK, NV, DK, DV, recurrent_state=pool,
                                                             beta=beta_bf16, g=c["g"], cache_indices=c["cache"],
                                                             intermediate_state=inter.view(B + 1, S, NV, DK, DV))
    ref_out, _, ref_inter = _oracle(c)
    # bf16 outputs either way; states: bf16 rounding, or fp32 compute kept in fp32
    state_tol = 2e-2 if pool_dtype == torch.bfloat16 else 1e-5
    assert out.shape == (B, S, NV, DV) and _max_rel(out, ref_out) < 2e-2
    assert inter.dtype == pool_dtype and _max_rel(inter, ref_inter) < state_tol
    accepted = torch.tensor([(b % S) for b in range(B)])  # last accepted step per request varies
    _commit(pool, inter, c["cache"], accepted, S)
    expected = c["pool"].double().clone()
    for b in range(B):
        expected[c["cache"][b]] = ref_inter[b * S + int(accepted[b])]
    assert pool.dtype == pool_dtype
    assert _max_rel(pool, expected) < state_tol
    if pool_dtype == torch.float32:  # no bf16 rounding anywhere on the fp32 path
        plain = gv.recurrent_verify(_call(c, pool=c["pool"].clone(), inter=c["inter"].clone()), backend="torch")
        assert torch.equal(out, plain.to(out.dtype))


def test_speculative_steps_keep_the_state_of_a_plain_decode(ascend_gdn_module, monkeypatch):
    """verify -> accept -> verify again, fp32 pool: the committed state equals a one-token-at-a-time
    decode of the accepted tokens (the same oracle, S = 1 per step)."""
    mod = ascend_gdn_module
    monkeypatch.setattr(mod.AscendGDNAttnBackend, "fused_recurrent_gated_delta_rule_update", _hooked_verify(mod))
    B, S = 2, 3
    pool = (torch.randn(B + 3, NV, DV, DK, generator=torch.Generator().manual_seed(1)) * 0.3).float()
    plain = pool.double().clone()
    cache = torch.tensor([3, 1], dtype=torch.int32)
    for step, accepted in enumerate(([2, 0], [1, 2])):
        c = _case(B, S, seed=40 + step, pool_dtype=torch.float32, slots=cache.tolist())
        c["pool"] = pool
        backend = _verify_backend(mod, c, graph_mode=True)
        inter = c["inter"].clone()
        backend.fused_recurrent_gated_delta_rule_update(c["mix"], NK, NV, DK, DV, recurrent_state=pool,
                                                       beta=c["beta"], g=c["g"], cache_indices=cache,
                                                       intermediate_state=inter)
        _commit(pool, inter, cache, torch.tensor(accepted), S)
        for b in range(B):  # plain decode of the accepted tokens 0 .. accepted[b]
            for t in range(accepted[b] + 1):
                one = dict(mix=c["mix"][b:b + 1, t:t + 1], pool=plain.float(), beta=c["beta"][b:b + 1, t:t + 1],
                           g=c["g"][b:b + 1, t:t + 1], idx=torch.tensor([[int(cache[b])]]), lengths=[1])
                _, plain, _ = naive_gdn_verify(one["mix"], one["pool"], one["beta"], one["g"], DK ** -0.5, [1],
                                            one["idx"].tolist(), NK, NV)
    assert _max_rel(pool, plain) < 1e-5


# ----------------------------------------------------------------------------- graph capture


def _no_sync_op(mix, state, beta, scale, lens, idx, nk, nv, **kw):
    return mix.new_zeros(mix.shape[0], mix.shape[1], nv, state.shape[2])


@pytest.mark.parametrize("pool_dtype,rung", [(torch.float32, "torch"), (torch.bfloat16, "npu_recurrent")])
def test_hooked_verify_in_graph_mode_never_syncs(ascend_gdn_module, monkeypatch, pool_dtype, rung):
    mod = ascend_gdn_module
    c = _case(4, 3, seed=9, pool_dtype=pool_dtype)
    c["cache"][3] = -1
    backend = _verify_backend(mod, c, graph_mode=True)
    backend.forward_metadata.mamba_cache_indices_gdn[9:] = -1  # a padded request, as captured
    monkeypatch.setattr(mod.AscendGDNAttnBackend, "fused_recurrent_gated_delta_rule_update", _hooked_verify(mod))
    seen = []
    with seam.install_emulators({OP_NPU_RECURRENT: lambda *a, **k: seen.append(1) or _no_sync_op(*a, **k)}):
        with SyncCounter(device_of_interest="cpu") as counter:
            backend.fused_recurrent_gated_delta_rule_update(c["mix"], NK, NV, DK, DV, recurrent_state=c["pool"],
                                                           beta=c["beta"], g=c["g"], cache_indices=c["cache"],
                                                           intermediate_state=c["inter"])
    assert bool(seen) == (rung == "npu_recurrent")
    assert counter.total == 0, counter.counts


def test_graph_mode_padded_request_on_the_recurrent_emulator_matches_the_torch_rung(ascend_gdn_module, monkeypatch):
    """A padded request as the graph runner captures it (cache index -1, state indices -1 for all
    S tokens) through the npu_recurrent rung with the real op's emulator: no contract violation
    (padding rows go to the scratch's spare entry, inside the buffer), the live requests' scratch
    rows equal the torch rung's, the padded request's rows and the pool stay untouched."""
    mod = ascend_gdn_module
    B, S = 4, 3
    c = _case(B, S, seed=11, pool_dtype=torch.bfloat16)
    c["cache"][3] = -1
    backend = _verify_backend(mod, c, graph_mode=True)
    backend.forward_metadata.mamba_cache_indices_gdn[(B - 1) * S:] = -1
    monkeypatch.setattr(mod.AscendGDNAttnBackend, "fused_recurrent_gated_delta_rule_update", _hooked_verify(mod))
    pool, inter = c["pool"].clone(), c["inter"].clone()
    seen = []
    real = gdn_npu_recurrent.make_npu_recurrent_emulator()
    with seam.install_emulators({OP_NPU_RECURRENT: lambda *a, **k: seen.append(1) or real(*a, **k)}):
        out = backend.fused_recurrent_gated_delta_rule_update(c["mix"], NK, NV, DK, DV, recurrent_state=pool,
                                                             beta=c["beta"], g=c["g"], cache_indices=c["cache"],
                                                             intermediate_state=inter)
    assert seen, "the npu_recurrent rung did not serve the call"
    idx = torch.arange(B * S, dtype=torch.int32).view(B, S)
    idx[B - 1] = -1
    torch_inter = c["inter"].clone()
    torch_pool = c["pool"].clone()
    ref = gv.recurrent_verify(gv.VerifyCall(c["mix"], torch_pool, c["beta"], c["g"], DK ** -0.5, c["lengths"], idx,
                                            NK, NV, intermediate_state=torch_inter, cache_indices=c["cache"],
                                            num_accepted_tokens=c["nat"]), backend="torch")
    live = (B - 1) * S
    assert torch.equal(pool, c["pool"]) and torch.equal(torch_pool, c["pool"])  # verify never writes the pool
    assert _max_rel(inter[:live], torch_inter[:live]) < 2e-2
    assert torch.equal(inter[live:B * S], c["inter"][live:B * S])  # the padded request's own rows
    assert _max_rel(out[:B - 1], ref[:B - 1]) < 2e-2
    assert torch.isfinite(out).all()  # the padded request's rows are SGLang's to discard


def test_value_checks_are_the_only_host_reads():
    """Direct call with checks: exactly the documented host reads (lengths, indices, accepted
    counts, cache indices); without checks (the serving hook's default): none."""
    c = _case(2, 2, dtype=torch.float32, pool_dtype=torch.float32)
    with SyncCounter(device_of_interest="cpu") as counter:
        gv.recurrent_verify(_call(c), backend="torch", check_values=True)
    assert counter.total == 4, counter.counts
    with SyncCounter(device_of_interest="cpu") as counter:
        gv.recurrent_verify(_call(c), backend="torch", check_values=False)
    assert counter.total == 0, counter.counts


def test_the_torch_verify_output_is_contiguous_as_the_ops():
    """SGLang's forward_extend views the verify output as ``[-1, nv, dv]`` (every release)."""
    B, S, nk, nv, d = 2, 3, 1, 2, 4
    call = gv.VerifyCall(torch.randn(B, S, 2 * nk * d + nv * d), torch.zeros(3, nv, d, d), torch.zeros(B, S, nv),
                         torch.zeros(B, S, nv), 0.5, torch.full((B,), S, dtype=torch.int32),
                         torch.arange(B * S, dtype=torch.int32).view(B, S), nk, nv,
                         intermediate_state=torch.zeros(B * S + 1, nv, d, d), cache_indices=torch.tensor([1, 2]),
                         num_accepted_tokens=torch.ones(B, dtype=torch.int32))
    out = gv.verify_torch(call)
    assert out.shape == (B, S, nv, d) and out.is_contiguous()
