"""The GDN decode ladder (``ops/gdn/decode/ladder.py``), the decode-layout probe, and their
graph-capture behaviour, against the fp64 oracle of ``ops/gdn/decode/naive.py``."""

from __future__ import annotations

import logging

import pytest
import torch
from torch.utils._python_dispatch import _disable_current_modes

from sglang_ascend_hybrid.emulators import gdn_decode, gdn_gating, gdn_npu_recurrent
from sglang_ascend_hybrid.ops import probes, seam
from sglang_ascend_hybrid.ops.gdn import decode
from sglang_ascend_hybrid.ops.gdn.contract import OP_GATING
from sglang_ascend_hybrid.ops.gdn.decode import contract as dc
from sglang_ascend_hybrid.ops.gdn.decode import gates
from sglang_ascend_hybrid.ops.gdn.decode import probe as decode_probe
from sglang_ascend_hybrid.ops.gdn.decode.naive import naive_gated_decode
from sglang_ascend_hybrid.ops.gdn.recurrent_rows import beta_logit
from sglang_ascend_hybrid.ops.gdn.signature import GdnSignature
from sglang_ascend_hybrid.ops.ladder import ForcedRungUnavailable
from tests.support import gdn_inputs
from tests.support.op_log import StaticOpLog
from tests.support.sync_counter import SyncCounter

ENTRY = "optimized"
SLOTS = 8


def _inputs(B, Hk=2, K=16, Hv=4, V=16, dtype=torch.bfloat16, pool_dtype=torch.float32, seed=0):
    return gdn_inputs.sglang_gating(B, hv=Hv, hk=Hk, k_dim=K, v_dim=V, slots=SLOTS, seed=seed, dtype=dtype,
                                    pool_dtype=pool_dtype)


def _call(x, indices, qsl=None, entry=ENTRY):
    idx = torch.tensor(indices, dtype=torch.int32)
    if qsl is None:
        qsl = torch.arange(len(indices) + 1, dtype=torch.int32)
    return decode.DecodeCall(x["q"], x["k"], x["v"], x["a"], x["b"], x["A_log"], x["dt_bias"], x["pool"], idx,
                                  qsl, entry=entry)


def _oracle(x, pool_before, indices, live):
    Hv, V, K = pool_before.shape[1:]
    start = torch.stack([pool_before[s].double() if s >= 0 and ok else torch.zeros(Hv, V, K, dtype=torch.float64)
                         for s, ok in zip(indices, live)])
    return naive_gated_decode(x["A_log"], x["a"], x["dt_bias"], x["q"][0], x["k"][0], x["v"][0], x["b"], start)


def _opaque(kernel):
    """A device kernel is one launch: its CPU emulator's own host reads are not the caller's (the
    sync counter and the op log see the caller's ops only)."""
    def launch(*args, **kwargs):
        with _disable_current_modes():
            return kernel(*args, **kwargs)

    return launch


def _device(layout="key_first", entry=ENTRY, recurrent=True, gating=True):
    ops = dict(gdn_decode.emulators(entry, layout=layout))
    if recurrent:
        ops["recurrent_gated_delta_rule"] = gdn_npu_recurrent.make_npu_recurrent_emulator()
    if gating:   # True: the emulator; a callable: that op
        ops[OP_GATING] = gdn_gating.fused_gdn_gating_npu if gating is True else gating
    return seam.install_emulators({name: _opaque(fn) for name, fn in ops.items()})


CASES = [  # (layout, q dtype, pool dtype, the rung that must serve)
    ("value_first", torch.bfloat16, torch.float32, "triton_decode"),
    ("value_first", torch.bfloat16, torch.bfloat16, "triton_decode"),
    ("key_first", torch.bfloat16, torch.bfloat16, "npu_recurrent"),
    ("key_first", torch.bfloat16, torch.float32, "torch"),
    ("key_first", torch.float32, torch.float32, "torch"),
]


@pytest.mark.parametrize("layout,dtype,pool_dtype,rung", CASES)
def test_each_rung_matches_the_fp64_oracle_and_touches_only_live_slots(layout, dtype, pool_dtype, rung, caplog):
    caplog.set_level(logging.INFO, logger="sglang_ascend_hybrid")
    indices = [5, -1, 2, 7, 0]
    qsl = torch.tensor([0, 1, 2, 3, 4, 4], dtype=torch.int32)   # the last request: slot 0, length 0 (graph padding)
    live = [True, False, True, True, False]
    x = _inputs(len(indices), dtype=dtype, pool_dtype=pool_dtype)
    before = x["pool"].clone()
    call = _call(x, indices, qsl)
    with _device(layout):
        o = decode.run_decode(call)
    assert f"GDN decode {call.signature()} runs on the {rung} kernel" in caplog.text, caplog.text
    o_ref, new = _oracle(x, before, indices, live)
    tol_o = 2e-2 if dtype == torch.bfloat16 else 1e-5
    tol_s = 2e-2 if pool_dtype == torch.bfloat16 or rung == "npu_recurrent" else 1e-5
    for i, (slot, ok) in enumerate(zip(indices, live)):
        if ok:
            assert float((o[0, i].double() - o_ref[i]).abs().max()) <= tol_o * float(o_ref[i].abs().max()), i
            assert float((x["pool"][slot].double() - new[i]).abs().max()) <= tol_s * float(new[i].abs().max()), i
        else:
            assert torch.equal(o[0, i], torch.zeros_like(o[0, i]))
    untouched = [s for s in range(SLOTS) if s not in (5, 2, 7)]
    assert torch.equal(x["pool"][untouched], before[untouched])


def test_fp32_pool_keeps_fp32_on_the_value_first_kernel():
    """The Triton kernel computes in fp32 and stores in the pool's dtype: a value-first kernel on an
    fp32 pool is as exact as the torch rung (well below bf16's precision)."""
    x = _inputs(3, pool_dtype=torch.float32)
    y = {k: v.clone() for k, v in x.items()}
    with _device("value_first"):
        decode.run_decode(_call(x, [1, 4, 6]))
    decode.run_decode(_call(y, [1, 4, 6]), backend="torch")
    assert float((x["pool"] - y["pool"]).abs().max()) < 1e-5


@pytest.mark.parametrize("entry", sorted(dc.DECODE_ENTRIES))
@pytest.mark.parametrize("layout", gdn_decode.LAYOUTS)
@pytest.mark.parametrize("pool_dtype", [torch.bfloat16, torch.float32])
def test_probe_detects_each_layout(entry, layout, pool_dtype):
    with _device(layout, entry):
        v = decode_probe.layout_verdict(entry, torch.bfloat16, pool_dtype, 128, 128, "cpu", before_serving=True)
    assert v.verdict == (dc.VALUE_FIRST if layout == "value_first" else dc.KEY_FIRST), v
    assert v.usable == (layout == "value_first")
    assert "unnamed slots kept" in v.detail
    assert v in probes.all_verdicts()


def _garbage_kernel(**kw):
    kernel = gdn_decode.make_triton_decode_emulator(ENTRY, layout="value_first")
    out = kernel(**kw)
    kw["initial_state_source"].mul_(1.5)  # writes every slot, scaled
    return out * 3


def test_probe_refuses_a_kernel_that_matches_neither_with_one_warning(caplog):
    caplog.set_level(logging.INFO, logger="sglang_ascend_hybrid")
    with seam.install_emulators({dc.OP_DECODE_OPTIMIZED: _garbage_kernel}):
        x = _inputs(2, pool_dtype=torch.bfloat16)
        before = x["pool"].clone()
        o = decode.run_decode(_call(x, [1, 3]))
        decode.run_decode(_call(_inputs(2, pool_dtype=torch.bfloat16), [1, 3]))
    (v,) = probes.all_verdicts()
    assert v.verdict == dc.NEITHER and not v.usable
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "gdn-decode-layout" in r.getMessage()]
    assert len(warnings) == 1 and "relative error value-first" in warnings[0].getMessage()
    assert "runs on the torch kernel" in caplog.text       # the next rung served (no recurrent op here)
    o_ref, new = _oracle(x, before, [1, 3], [True, True])
    assert float((o[0].double() - o_ref).abs().max()) < 2e-2 * float(o_ref.abs().max())


def test_probe_of_a_raising_kernel_is_a_refusal():
    def raising(**kw):
        raise RuntimeError("kernel launch failed: unsupported block")

    with seam.install_emulators({dc.OP_DECODE_OPTIMIZED: raising}):
        x = _inputs(2)
        decode.run_decode(_call(x, [1, 3]))
    (v,) = probes.all_verdicts()
    assert v.verdict == dc.REFUSED and "kernel launch failed" in v.detail


def test_probe_runs_once_per_signature_and_never_inside_a_capture():
    with _device("value_first"):
        with seam.capture_region():   # no verdict yet: the kernel is not used, the probe does not run
            x = _inputs(2)
            decode.run_decode(_call(x, [1, 3]))
        assert probes.runs(decode_probe.PROBE.name) == 0
        assert probes.all_verdicts() == []
        decode.probe_before_serving(ENTRY, torch.bfloat16, torch.float32, 16, 16, "cpu")
        assert probes.runs(decode_probe.PROBE.name) == 1
        with seam.capture_region():
            for _ in range(3):
                decode.run_decode(_call(_inputs(2), [1, 3]))
        decode.probe_before_serving(ENTRY, torch.bfloat16, torch.float32, 16, 16, "cpu")
        assert probes.runs(decode_probe.PROBE.name) == 1
        decode.probe_before_serving(ENTRY, torch.bfloat16, torch.bfloat16, 16, 16, "cpu")  # another signature
        assert probes.runs(decode_probe.PROBE.name) == 2


def test_forcing_the_kernel_on_a_key_first_build_names_the_reason():
    with _device("key_first"):
        with pytest.raises(ForcedRungUnavailable, match="the probe found it key-first"):
            decode.run_decode(_call(_inputs(2), [1, 3]), backend="triton_decode")


def test_generic_entry_with_an_odd_value_head_count_is_not_used(caplog):
    caplog.set_level(logging.INFO, logger="sglang_ascend_hybrid")
    x = _inputs(2, Hk=1, Hv=3)
    with _device("value_first", entry="generic"):
        decode.run_decode(_call(x, [1, 3], entry="generic"))
    assert "skips the last of 3" in caplog.text and "runs on the torch kernel" in caplog.text


def test_hook_passes_the_raw_beta_and_the_logit_is_finite_for_post_sigmoid_betas():
    """The serving rung hands the recurrent op SGLang's raw b (the op applies the sigmoid); the
    public op's post-sigmoid beta goes over as a finite logit: 0 and 1 come back exactly, and every
    bf16 beta in [0, 1] comes back within 2^-10 through the kernel's fp32 sigmoid."""
    bits = torch.arange(-2 ** 15, 2 ** 15, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    betas = bits[(bits >= 0) & (bits <= 1)]
    x = beta_logit(betas)
    assert x.dtype == torch.bfloat16 and bool(torch.isfinite(x).all())
    back = 1.0 / (1.0 + torch.exp(-x.float()))          # the kernel's sigmoid, in fp32
    assert float((back - betas.float()).abs().max()) <= 2 ** -10
    assert float(back[betas == 0].max()) == 0.0 and float(back[betas == 1].min()) == 1.0


@pytest.mark.parametrize("layout,pool_dtype", [("value_first", torch.float32), ("key_first", torch.bfloat16),
                                               ("key_first", torch.float32)])
def test_graph_mode_capture_and_replays(layout, pool_dtype):
    """SGLang's graph-runner pattern on static buffers: the probe at construction, one capture of
    batch 4 (slot indices initialised to the pad id -1), then replays that refill the same buffers
    in place with live batches padded to 4 (padding: slot 0, length 0).  No host sync, the same op
    sequence on the same storages at every replay, live slots equal the oracle, others bit-identical."""
    B = 4
    x = _inputs(B, pool_dtype=pool_dtype, seed=1)
    static_idx = torch.full((B,), -1, dtype=torch.int32)
    static_qsl = torch.arange(B + 1, dtype=torch.int32)
    call = lambda: decode.DecodeCall(x["q"], x["k"], x["v"], x["a"], x["b"], x["A_log"],  # noqa: E731
                                          x["dt_bias"], x["pool"], static_idx, static_qsl, entry=ENTRY)
    static = [x[n] for n in ("q", "k", "v", "a", "b", "A_log", "dt_bias", "pool")] + [static_idx, static_qsl]
    with _device(layout):
        decode.probe_before_serving(ENTRY, torch.bfloat16, pool_dtype, 16, 16, "cpu")
        with seam.capture_region(), SyncCounter(device_of_interest="cpu") as syncs, StaticOpLog(static) as captured:
            decode.run_decode(call())
        assert syncs.total == 0, syncs.counts
        replays = []
        for live_slots in ([3, 6, 1, 4], [2, 0], [7]):   # [2, 0]: padding reads the live slot 0
            n = len(live_slots)
            static_idx.copy_(torch.tensor(live_slots + [0] * (B - n), dtype=torch.int32))
            static_qsl.copy_(torch.tensor(list(range(n + 1)) + [n] * (B - n), dtype=torch.int32))
            fresh = _inputs(B, pool_dtype=pool_dtype, seed=10 + n)
            for name in ("q", "k", "v", "a", "b"):
                x[name].copy_(fresh[name])
            before = x["pool"].clone()
            with seam.capture_region(), SyncCounter(device_of_interest="cpu") as syncs, StaticOpLog(static) as replay:
                o = decode.run_decode(call())
            assert syncs.total == 0, syncs.counts
            replays.append(replay.ops)
            live = [True] * n + [False] * (B - n)
            o_ref, new = _oracle(x, before, live_slots + [0] * (B - n), live)
            for i in range(n):
                assert float((x["pool"][live_slots[i]].double() - new[i]).abs().max()) <= 2e-2 * float(
                    new[i].abs().max())
                assert float((o[0, i].double() - o_ref[i]).abs().max()) <= 2e-2 * float(o_ref[i].abs().max())
            assert torch.equal(o[0, n:], torch.zeros_like(o[0, n:]))
            others = [s for s in range(SLOTS) if s not in live_slots]
            assert torch.equal(x["pool"][others], before[others])
    assert all(ops == captured.ops for ops in replays)


def test_negative_control_a_fresh_index_tensor_changes_the_replayed_storages():
    """The identity check above can fail: a replay handed a fresh copy of the slot indices (not the
    captured buffer) shows a different storage in the op log."""
    x = _inputs(2)
    idx = torch.tensor([1, 3], dtype=torch.int32)
    qsl = torch.arange(3, dtype=torch.int32)
    make = lambda i: decode.DecodeCall(x["q"], x["k"], x["v"], x["a"], x["b"], x["A_log"], x["dt_bias"],  # noqa
                                            x["pool"], i, qsl, entry=ENTRY)
    static = [x[n] for n in ("q", "k", "v", "a", "b", "A_log", "dt_bias", "pool")] + [idx, qsl]
    with StaticOpLog(static) as first:
        decode.run_decode(make(idx))
    with StaticOpLog(static) as second:
        decode.run_decode(make(idx.clone()))
    assert first.ops != second.ops


def test_probe_hands_the_kernel_a_pool_of_the_probed_dtype():
    seen = []
    kernel = gdn_decode.make_triton_decode_emulator(ENTRY, layout="value_first")

    def recording(**kw):
        seen.append((kw["initial_state_source"].dtype, kw["q"].dtype))
        return kernel(**kw)

    with seam.install_emulators({dc.OP_DECODE_OPTIMIZED: recording}):
        decode_probe.measure(ENTRY, torch.bfloat16, torch.bfloat16, 16, 16, "cpu")
        decode_probe.measure(ENTRY, torch.bfloat16, torch.float32, 16, 16, "cpu")
    assert seen == [(torch.bfloat16, torch.bfloat16), (torch.float32, torch.bfloat16)]


def test_a_non_contiguous_pool_never_reaches_the_kernel(caplog):
    """The kernel would copy it and write the copy: the rung says why and the next one serves."""
    caplog.set_level(logging.INFO, logger="sglang_ascend_hybrid")
    x = _inputs(2)
    wide = torch.zeros(SLOTS, 2 * x["pool"].shape[1], *x["pool"].shape[2:])
    wide[:, ::2] = x["pool"]
    x["pool"] = wide[:, ::2]
    assert not x["pool"].is_contiguous()
    before = x["pool"].clone()
    with _device("value_first"):
        decode.run_decode(_call(x, [1, 3]))
    assert "its state writes would be lost" in caplog.text and "runs on the torch kernel" in caplog.text
    assert not torch.equal(x["pool"][[1, 3]], before[[1, 3]])
    assert torch.equal(wide[:, 1::2], torch.zeros_like(wide[:, 1::2]))


@pytest.mark.parametrize("forced,rung", [("torch", "torch"), ("mega", "triton_decode")])
def test_the_hook_obeys_the_gdn_backend_variable_for_decode_rungs_only(forced, rung, monkeypatch, caplog):
    from sglang_ascend_hybrid.integration import gdn_hooks

    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_GDN_BACKEND", forced)
    monkeypatch.setattr(dc, "installed_decode_entry", lambda: ENTRY)
    caplog.set_level(logging.INFO, logger="sglang_ascend_hybrid")
    x = _inputs(2)
    with _device("value_first"):
        o = gdn_hooks.ascend_gdn_decode(None, None, x["q"], x["k"], x["v"], x["a"], x["b"], A_log=x["A_log"],
                                        dt_bias=x["dt_bias"], ssm_states=x["pool"],
                                        cache_indices=torch.tensor([1, 3], dtype=torch.int32),
                                        query_start_loc=torch.arange(3, dtype=torch.int32))
    assert o.shape == (1, 2, x["v"].shape[2], x["v"].shape[3])
    assert f"runs on the {rung} kernel" in caplog.text
    assert ("is not a GDN decode kernel" in caplog.text) == (forced == "mega")


@pytest.mark.parametrize("layout,pool_dtype", [("value_first", torch.float32), ("key_first", torch.bfloat16)])
def test_eager_steps_on_buffers_refilled_in_place_see_each_steps_padding(layout, pool_dtype):
    """Without a capture the live mask is kept across a step's layers (``ops.step_cache``): two layers of
    a step share it, and the next step, on the same buffers refilled in place, gets its own padding."""
    B = 4
    x = _inputs(B, pool_dtype=pool_dtype, seed=2)
    idx = torch.tensor([3, 6, 1, 4], dtype=torch.int32)
    qsl = torch.arange(B + 1, dtype=torch.int32)
    call = lambda: decode.DecodeCall(x["q"], x["k"], x["v"], x["a"], x["b"], x["A_log"],  # noqa: E731
                                     x["dt_bias"], x["pool"], idx, qsl, entry=ENTRY)
    with _device(layout):
        decode.probe_before_serving(ENTRY, torch.bfloat16, pool_dtype, 16, 16, "cpu")
        for live_slots in ([3, 6, 1, 4], [2, 5], [7], [1, 2, 3]):
            n = len(live_slots)
            idx.copy_(torch.tensor(live_slots + [0] * (B - n), dtype=torch.int32))
            qsl.copy_(torch.tensor(list(range(n + 1)) + [n] * (B - n), dtype=torch.int32))
            for _ in range(2):   # two layers of the step
                before = x["pool"].clone()
                o = decode.run_decode(call())
                o_ref, new = _oracle(x, before, live_slots + [0] * (B - n), [True] * n + [False] * (B - n))
                for i in range(n):
                    assert float((o[0, i].double() - o_ref[i]).abs().max()) <= 2e-2 * float(o_ref[i].abs().max())
                assert torch.equal(o[0, n:], torch.zeros_like(o[0, n:]))
                others = [s for s in range(SLOTS) if s not in live_slots]
                assert torch.equal(x["pool"][others], before[others])


def _env_backend():
    from sglang_ascend_hybrid.ops.gdn.api import resolve_backend

    return resolve_backend("auto", decode.decode_rungs(), "decode")


def test_a_kept_decision_follows_the_probe_the_environment_and_a_refusal(monkeypatch, caplog):
    """The decode ladder keeps each call's checks and first rung per metadata (``ops/decisions``): a call
    after a change of what serves decides again, as a fresh process would."""
    entry_calls = []
    caplog.set_level(logging.INFO, logger="sglang_ascend_hybrid")
    with _device("value_first"):
        real = seam.installed_emulators()[dc.OP_DECODE_OPTIMIZED]

        def counting(*args, **kwargs):
            entry_calls.append(1)
            return real(*args, **kwargs)

        with seam.install_emulators({dc.OP_DECODE_OPTIMIZED: counting}):
            x = _inputs(2)
            with seam.capture_region():        # no verdict: the probe cannot run, the entry is passed over
                decode.run_decode(_call(x, [1, 3]))
            assert entry_calls == [] and probes.runs(decode_probe.PROBE.name) == 0
            decode.run_decode(_call(x, [1, 3]))   # same metadata outside a capture: probes, then the entry
            assert probes.runs(decode_probe.PROBE.name) == 1
            served = len(entry_calls)                              # the probe's own calls and this one
            decode.run_decode(_call(x, [1, 3]))
            assert len(entry_calls) == served + 1
            monkeypatch.setenv("SGLANG_ASCEND_HYBRID_GDN_BACKEND", "torch")
            decode.run_decode(_call(x, [1, 3]), backend=_env_backend())
            assert len(entry_calls) == served + 1
            monkeypatch.delenv("SGLANG_ASCEND_HYBRID_GDN_BACKEND")
            decode.run_decode(_call(x, [1, 3]), backend=_env_backend())
            assert len(entry_calls) == served + 2
            bad = dict(x, q=x["q"][..., :8])                       # other metadata: checked again
            with pytest.raises(ValueError, match="GDN decode: k="):
                decode.run_decode(_call(bad, [1, 3]))
            decode.DECODE.mark_refused("triton_decode", _call(x, [1, 3]).signature())
            decode.run_decode(_call(x, [1, 3]))
            assert len(entry_calls) == served + 2                  # refused since: the next rung serves
    sig = GdnSignature(4, 2, 16, 16, torch.bfloat16, state_dtype=torch.float32)   # the call's facts, in its lines
    assert f"GDN decode {sig} runs on the triton_decode kernel" in caplog.text


def test_a_real_recurrent_kernel_is_never_handed_cpu_tensors():
    """``npu_recurrent`` serves only where the seam serves the call's tensors: a real (not emulated)
    kernel takes NPU tensors only."""
    calls = []
    with seam.install_real_kernels({"recurrent_gated_delta_rule": lambda *a, **kw: calls.append(1)}):
        x = _inputs(2, pool_dtype=torch.bfloat16)
        o = decode.run_decode(_call(x, [1, 3], entry=None))
    assert calls == [] and o.shape == (1, 2, 4, 16)


# ---------------------------------------------------------------- the gates npu_recurrent takes computed


def _counting(fn, calls):
    def op(*args, **kwargs):
        calls.append(1)
        return fn(*args, **kwargs)
    return op


def _recurrent_step(x, **device):
    """One npu_recurrent step (key-first Triton entry, bf16 pool) of ``x``: (o, the pool after it)."""
    with _device("key_first", **device):
        o = decode.run_decode(_call(x, [5, -1, 2], torch.tensor([0, 1, 1, 2], dtype=torch.int32)))
    return o, x["pool"]


def test_npu_recurrent_takes_its_gates_from_the_fused_gating_kernel_once_per_step(caplog):
    """SGLang's gating inputs go through sgl-kernel-npu's fused_gdn_gating_npu (one launch, its g only: the
    recurrent op takes beta before its sigmoid); where it is absent the torch path computes the same g."""
    caplog.set_level(logging.INFO, logger="sglang_ascend_hybrid")
    calls = []
    x = _inputs(3, pool_dtype=torch.bfloat16, seed=4)
    y = {n: t.clone() for n, t in x.items()}
    before = x["pool"].clone()
    o, pool = _recurrent_step(x, gating=_counting(gdn_gating.fused_gdn_gating_npu, calls))
    assert len(calls) == 1
    _recurrent_step({n: t.clone() for n, t in x.items()}, gating=_counting(gdn_gating.fused_gdn_gating_npu, calls))
    assert len(calls) == 2
    sig = _call(x, [5, -1, 2]).signature()
    assert f"GDN decode gates {sig} runs on the npu_gating kernel" in caplog.text
    o_torch, pool_torch = _recurrent_step(y, gating=False)
    assert f"GDN decode gates {sig} runs on the torch kernel" in caplog.text
    o_ref, new = _oracle(y, before, [5, -1, 2], [True, False, True])
    assert torch.allclose(o[0, 0].double(), o_ref[0], rtol=2e-2, atol=2e-2 * float(o_ref[0].abs().max()))
    assert torch.allclose(o.float(), o_torch.float(), atol=1e-2)   # one step: the same g to fp32 rounding
    assert torch.equal(o[0, 1], torch.zeros_like(o[0, 1]))


@pytest.mark.parametrize("form", ["3-D", "2-D"])
def test_the_gates_are_read_by_their_elements_whatever_the_kernels_output_rank(form):
    """f425bdf1 returns g ``[1, B, Hv]``; the form reported after SKN PR #747 is ``[B, Hv]``: both serve."""
    def two_d(*args, **kwargs):
        g, beta = gdn_gating.fused_gdn_gating_npu(*args, **kwargs)
        return g[0], beta[0]

    x = _inputs(3, pool_dtype=torch.bfloat16, seed=5)
    y = {n: t.clone() for n, t in x.items()}
    o3, pool3 = _recurrent_step(x)
    o, pool = _recurrent_step(y, gating=two_d if form == "2-D" else True)
    assert torch.equal(o, o3) and torch.equal(pool, pool3)


def test_a_gating_kernel_that_fails_is_a_refusal_and_torch_computes_the_gates(caplog):
    """A failure the contract did not predict never takes the step down: said once at WARNING, the torch
    gates serve that call and every later one (the kept decision is decided again), with the same result."""
    caplog.set_level(logging.INFO, logger="sglang_ascend_hybrid")
    calls = []

    def failing(*args, **kwargs):
        calls.append(1)
        raise RuntimeError("EZ9999: an unexpected kernel error")

    x = _inputs(3, pool_dtype=torch.bfloat16, seed=6)
    y = {n: t.clone() for n, t in x.items()}
    o, pool = _recurrent_step(x, gating=failing)
    _recurrent_step({n: t.clone() for n, t in x.items()}, gating=failing)
    assert len(calls) == 1
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "gdn_decode_gates" in r.getMessage()]
    assert len(warnings) == 1 and "EZ9999" in warnings[0].getMessage()
    o_torch, pool_torch = _recurrent_step(y, gating=False)
    assert torch.equal(o, o_torch) and torch.equal(pool, pool_torch)


def test_gates_of_weights_the_kernel_cannot_address_are_computed_in_torch(caplog):
    """The kernel reads A_log / dt_bias at ``h`` whatever their strides: a strided per-head weight never
    reaches it (the reason said once), and the torch path gives the step's result."""
    caplog.set_level(logging.INFO, logger="sglang_ascend_hybrid")
    x = _inputs(3, pool_dtype=torch.bfloat16, seed=7)
    x["dt_bias"] = torch.stack([x["dt_bias"], x["dt_bias"]], -1)[:, 0]   # [Hv], stride 2
    y = {n: t.clone() for n, t in x.items()}
    calls = []
    o, _ = _recurrent_step(x, gating=_counting(gdn_gating.fused_gdn_gating_npu, calls))
    assert calls == []
    assert "cannot use the npu_gating kernel: it reads dt_bias as 4 contiguous elements" in caplog.text
    o_torch, _ = _recurrent_step(y, gating=False)
    assert torch.equal(o, o_torch)


def test_precomputed_gates_never_reach_the_gating_kernel():
    """The public op's precomputed g / beta go to the recurrent op as given (beta as its logit)."""
    calls = []
    x = _inputs(2, pool_dtype=torch.bfloat16, seed=8)
    g = -torch.rand(2, 4)
    beta = torch.rand(2, 4)
    call = decode.DecodeCall.with_gates(x["q"], x["k"], x["v"], g, beta, x["pool"],
                                        torch.tensor([1, 3], dtype=torch.int32))
    with _device("key_first", gating=_counting(gdn_gating.fused_gdn_gating_npu, calls)):
        decode.run_decode(call)
    assert calls == [] and call.decay() is not None
    assert gates.GATES.first(call.signature(), call) == gates.GATES.names.index("torch")


@pytest.mark.parametrize("shape", ["flat", "[1, B, Hv]"])
def test_gating_inputs_of_another_shape_reach_the_kernel_as_b_rows_by_hv(shape):
    """SGLang's a / b may come as any shape of ``B * Hv`` elements: the kernel's host unpacks a 2-D a and
    addresses ``t * Hv + h``, so it gets them as contiguous ``[B, Hv]``."""
    seen = []

    def recording(A_log, a, b, dt_bias, *args):
        seen.append((tuple(a.shape), tuple(b.shape), a.is_contiguous(), b.is_contiguous()))
        return gdn_gating.fused_gdn_gating_npu(A_log, a, b, dt_bias, *args)

    x = _inputs(3, pool_dtype=torch.bfloat16, seed=9)
    y = {n: t.clone() for n, t in x.items()}
    for name in ("a", "b"):
        x[name] = x[name].reshape(-1) if shape == "flat" else x[name].reshape(1, 3, 4)
    o, pool = _recurrent_step(x, gating=recording)
    assert seen == [((3, 4), (3, 4), True, True)]
    o2, pool2 = _recurrent_step(y)
    assert torch.equal(o, o2) and torch.equal(pool, pool2)


def test_npu_recurrent_with_value_and_key_dims_apart_matches_the_oracle(caplog):
    """K != V: q / k / v are laid into the op's mixed rows one flattened tensor after the other."""
    caplog.set_level(logging.INFO, logger="sglang_ascend_hybrid")
    indices = [5, 2]
    x = _inputs(2, K=16, V=32, pool_dtype=torch.bfloat16, seed=10)
    before = x["pool"].clone()
    with _device("key_first"):
        o = decode.run_decode(_call(x, indices))
    assert "runs on the npu_recurrent kernel" in caplog.text
    o_ref, new = _oracle(x, before, indices, [True, True])
    for i, slot in enumerate(indices):
        assert float((o[0, i].double() - o_ref[i]).abs().max()) <= 2e-2 * float(o_ref[i].abs().max())
        assert float((x["pool"][slot].double() - new[i]).abs().max()) <= 2e-2 * float(new[i].abs().max())
