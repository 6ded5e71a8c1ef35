"""A serving prefill call (``chunk_with_states`` with the step's host offsets, as the extend hook calls it)
keeps its checks, its q / k l2norm rung and its first prefill rung per metadata and offsets
(``ops/decisions.py``): later layers of a step ask no predicate, and every change a decision depends on
(other offsets, other metadata, the serving state, the forced backend, a refusal) decides again."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from sglang_ascend_hybrid.emulators import gdn_sets
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.gdn import api
from sglang_ascend_hybrid.ops.gdn.prefill import l2norm
from sglang_ascend_hybrid.ops.gdn.prefill import ladder as prefill_ladder
from tests.support import gdn_inputs
from tests.support.call_counter import Counting
from tests.support.sync_counter import SyncCounter


def _inputs(lens=(5, 70), seed=0):
    return gdn_inputs.packed(list(lens), hv=6, hk=2, k_dim=16, seed=seed, dtype=torch.bfloat16, qk="raw",
                             state_dtype=torch.bfloat16, cu_dtype=torch.int32).prefill()


def _serve(x, offsets=None):
    q, k, v, g, beta, cu, state = x
    return api.chunk_with_states(q, k, v, g, beta, cu_seqlens=cu, initial_state=state, use_qk_l2norm=True,
                                 host_offsets=cu.tolist() if offsets is None else offsets)


@pytest.fixture
def counted(monkeypatch):
    """Calls of the input checks and of the npu_chunk / mega / l2norm predicates."""
    calls = {}

    def count(module, name):
        real = getattr(module, name)

        def counting(*args, **kwargs):
            calls[name] = calls.get(name, 0) + 1
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, counting)

    count(api, "_check_prefill")
    count(prefill_ladder, "_npu_chunk_supports")   # the prefill rungs look their predicates up per call
    count(prefill_ladder, "_mega_supports")
    first = l2norm.L2NORM.rungs[0]                  # the l2norm rung holds its predicate itself

    def l2_supports(*args, **kwargs):
        calls["l2norm"] = calls.get("l2norm", 0) + 1
        return first.supports(*args, **kwargs)

    monkeypatch.setattr(l2norm.L2NORM, "rungs", (dataclasses.replace(first, supports=l2_supports),
                                                 *l2norm.L2NORM.rungs[1:]))
    return calls


def _device(chip="A3", **kw):
    return seam.install_device_facts(chip=chip), seam.install_emulators(gdn_sets.emulators(chip=chip, **kw))


def test_later_layers_of_a_step_ask_no_predicate_and_get_the_same_result(counted):
    x = _inputs()
    facts, ops = _device()
    npu_chunk = Counting(gdn_sets.emulators()[prefill_ladder.OP_NPU_CHUNK])
    with facts, ops, seam.install_emulators({prefill_ladder.OP_NPU_CHUNK: npu_chunk}):
        first = _serve(x)
        seen = dict(counted)
        later = [_serve(x) for _layer in range(3)]
        offsets = x[5].tolist()                      # read on the host once per step, by the hook
        with SyncCounter(device_of_interest="cpu") as reads:   # the lengths come with the kept decision
            _serve(x, offsets=offsets)
    assert reads.total == 0, reads.counts
    assert seen["_check_prefill"] == 1 and seen["_npu_chunk_supports"] == 1 and seen["l2norm"] == 1
    assert counted == seen                        # nothing asked again
    assert npu_chunk.calls == 5                   # every layer still runs the op
    assert all(torch.equal(o[0], first[0]) and torch.equal(o[1], first[1]) for o in later)


def test_new_offsets_other_metadata_and_a_new_serving_state_decide_again(counted):
    x = _inputs()
    facts, ops = _device()
    with facts, ops:
        _serve(x)
        _serve(_inputs((70, 5), seed=1))                        # the next step: other offsets
        assert counted["_check_prefill"] == 2
        _serve(_inputs((5, 70), seed=2))                        # the first step's metadata and offsets
        assert counted["_check_prefill"] == 2
        q, k, v, g, beta, cu, state = x
        _serve((q[:, :, :1], k[:, :, :1], v, g, beta, cu, state))   # other metadata (one key head)
        assert counted["_check_prefill"] == 3
        with seam.install_device_facts(chip="A2"):               # the serving state changed
            _serve(x)
        assert counted["_check_prefill"] == 4 and counted["_npu_chunk_supports"] == 4
        _serve(x)                                                # and changed back
        assert counted["_check_prefill"] == 5 and counted["_npu_chunk_supports"] == 5


def test_bad_offsets_raise_on_every_call():
    x = _inputs()
    facts, ops = _device()
    with facts, ops:
        for _ in range(2):
            with pytest.raises(ValueError, match="cu_seqlens"):
                _serve(x, offsets=[0, 70, 5])
        with pytest.raises(ValueError, match="host_offsets"):
            _serve(x, offsets=[0, 75])


@pytest.mark.parametrize("bad", ["k", "cu_seqlens", "initial_state"])
def test_a_bad_tensor_beside_a_kept_decision_is_checked(bad):
    """Every tensor's metadata is in the key: after a good call, one bad tensor with the same offsets and
    everything else unchanged is checked (and refused) again."""
    q, k, v, g, beta, cu, state = _inputs()
    facts, ops = _device()
    with facts, ops:
        _serve((q, k, v, g, beta, cu, state))
        if bad == "k":
            k = k.float()
        elif bad == "cu_seqlens":
            cu = cu.float()
        else:
            state = state[:, :, :, :8]
        with pytest.raises(ValueError, match=bad if bad != "k" else "k.dtype"):
            _serve((q, k, v, g, beta, cu, state), offsets=[0, 5, 75])


def test_a_call_without_an_initial_state_is_kept_too(counted):
    q, k, v, g, beta, cu, _ = _inputs()
    facts, ops = _device()
    with facts, ops:
        outs = [_serve((q, k, v, g, beta, cu, None)) for _layer in range(2)]
    assert counted["_check_prefill"] == 1 and torch.equal(outs[0][0], outs[1][0])


def test_the_forced_backend_and_a_refusal_since_are_obeyed(counted, monkeypatch):
    x = _inputs()
    facts, ops = _device()
    npu_chunk = Counting(gdn_sets.emulators()[prefill_ladder.OP_NPU_CHUNK])
    with facts, ops, seam.install_emulators({prefill_ladder.OP_NPU_CHUNK: npu_chunk}):
        _serve(x)
        monkeypatch.setenv("SGLANG_ASCEND_HYBRID_GDN_BACKEND", "torch")
        _serve(x)
        assert npu_chunk.calls == 1                              # forced: the torch rung
        monkeypatch.delenv("SGLANG_ASCEND_HYBRID_GDN_BACKEND")
        _serve(x)
        assert npu_chunk.calls == 2
        sig = api.prefill.ChunkCall(*x[:6], x[6], 0.25, False, _lengths=[5, 70]).signature()
        prefill_ladder.PREFILL.mark_refused("npu_chunk", sig)  # refused since the decision was kept
        _serve(x)
        assert npu_chunk.calls == 2


def test_a_call_the_npu_chunk_rung_cannot_serve_decides_per_call(counted):
    """Where npu_chunk cannot serve, the next rung's predicate may read values (the mega kernel's fp16
    range): nothing about the prefill rung is kept, its predicates are asked on every call."""
    x = _inputs()
    facts, ops = _device(npu_chunk=False)
    with facts, ops:
        for _layer in range(3):
            _serve(x)
    assert counted["_check_prefill"] == 1               # the checks and the l2norm rung are still kept
    assert counted["_mega_supports"] == 3


def _serve_packed(x, **kw):
    q, k, v, g, beta, cu, state = x
    return api.chunk_with_states(q[0], k[0], v[0], g[0], beta[0], cu_seqlens=cu, initial_state=state,
                                 use_qk_l2norm=True, host_offsets=cu.tolist(), packed=True, **kw)


@pytest.mark.parametrize("device", ["npu_chunk", "mega", "torch"])
def test_a_packed_call_is_served_as_the_batched_one_with_o_packed(device):
    """chunk_gdn's packed tensors (no batch dim) reach the npu_chunk op as they are; the rungs after it are
    handed the batched views; every rung's result equals the batched call's, o ``[T, Hv, V]``."""
    x = _inputs()
    facts, ops = _device(npu_chunk=device == "npu_chunk", mega_variant=None if device == "torch" else
                         gdn_sets.caps.MEGA_CURRENT)
    with facts, ops:
        batched = _serve(x)
        packed = _serve_packed(x, chunk_states=True)
        batched_h = api.chunk_with_states(*x[:5], cu_seqlens=x[5], initial_state=x[6], use_qk_l2norm=True,
                                          host_offsets=x[5].tolist(), chunk_states=True)
    T, Hv, V = x[2].shape[1:]
    assert tuple(packed[0].shape) == (T, Hv, V) and torch.equal(packed[0], batched[0][0])
    assert torch.equal(packed[1], batched[1]) and torch.equal(packed[2], batched_h[2])


def test_a_packed_call_the_npu_chunk_op_refuses_at_call_time_goes_down_the_ladder_packed():
    x = _inputs()
    facts, ops = _device()
    calls = []

    def refusing(*args, **kwargs):
        calls.append(args[0].shape)
        raise RuntimeError(next(iter(gdn_sets.caps.NPU_CHUNK_TEXTS.values())))   # one of its own texts

    with facts, ops:
        expected = _serve_packed(x)               # served by the op
        with seam.install_emulators({prefill_ladder.OP_NPU_CHUNK: refusing}):
            try:
                got = _serve_packed(x)            # the kept runner's op refuses: mega serves the same call
                again = _serve_packed(x)          # decided again: npu_chunk is refused for the signature
            finally:
                prefill_ladder.forget_refusals()
    T, Hk, K = x[0].shape[1:]
    assert calls == [(T, Hk, K)]                  # the packed q, once
    assert tuple(got[0].shape) == tuple(expected[0].shape) and torch.equal(got[0], again[0])
    assert (got[0].float() - expected[0].float()).abs().max() < 0.1


def test_packed_needs_the_serving_hooks_host_offsets():
    q, k, v, g, beta, cu, state = _inputs()
    with pytest.raises(ValueError, match="packed"):
        api.chunk_with_states(q[0], k[0], v[0], g[0], beta[0], cu_seqlens=cu, initial_state=state, packed=True)


@pytest.mark.parametrize("packed", [False, True])
def test_float32_gates_reach_the_op_in_its_dtypes(packed):
    """The op takes bf16 beta and fp32 g (its host checks them): an fp32 beta / bf16 g is cast, not refused."""
    q, k, v, g, beta, cu, state = _inputs(seed=3)
    x = (q, k, v, g.bfloat16(), beta.float(), cu, state)
    facts, ops = _device()
    npu_chunk = Counting(gdn_sets.emulators()[prefill_ladder.OP_NPU_CHUNK])
    with facts, ops, seam.install_emulators({prefill_ladder.OP_NPU_CHUNK: npu_chunk}):
        try:
            o = (_serve_packed if packed else _serve)(x)[0]
            refused = prefill_ladder.PREFILL._refused
        finally:
            prefill_ladder.forget_refusals()
    assert npu_chunk.calls == 1 and not refused and o.isfinite().all()
