"""Dispatch of packed attention: fast path calls the op exactly like upstream (no
copies), compaction gathers once per tensor, no device-to-host syncs beyond
upstream's, the emulator keeps the real op's contract, and events are logged once (invalid input:
test_attention_input_errors.py)."""

from __future__ import annotations

import logging
import re
from itertools import pairwise

import pytest
import torch
from torch.overrides import TorchFunctionMode

from sglang_ascend_hybrid.emulators import fused_infer_attention as emu
from sglang_ascend_hybrid.integration import packed_attention as patch_side
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.attention import api as pa
from sglang_ascend_hybrid.ops.attention import contract as fia_contract
from sglang_ascend_hybrid.ops.attention.api import fused_infer_attention_varlen
from sglang_ascend_hybrid.ops.attention.cases import packed_case as _packed_case
from sglang_ascend_hybrid.ops.attention.cases import random_packed_case
from sglang_ascend_hybrid.ops.attention.torch_impl import packed_attention_torch

# The packed-attention ladder logs from ops.attention.dispatch, its rung refusals from ops.ladder.
OPS_LOGGER = "sglang_ascend_hybrid.ops"

def packed_case(*args, head_dim=128, **kwargs):
    """Cases at the op's head dim (it takes 128, or 192 / 128): the device path runs."""
    return _packed_case(*args, head_dim=head_dim, **kwargs)


class Recorder:
    """Emulator stand-in that records every call, then runs the CPU emulator."""

    def __init__(self):
        self.calls = []
        self.inside = False

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        self.inside = True
        try:
            return emu.npu_fused_infer_attention_score(*args, **kwargs)
        finally:
            self.inside = False


@pytest.fixture
def recorder():
    rec = Recorder()
    with seam.install_emulators({emu.OP_NAME: rec}):
        yield rec


class OpLog(TorchFunctionMode):
    """Names of torch functions called outside the op."""

    def __init__(self, rec):
        super().__init__()
        self.rec = rec
        self.names = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if not self.rec.inside:
            self.names.append(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


COPIES = {"index_select", "contiguous", "clone", "stack", "cat", "copy_", "index_copy_",
          "gather", "to", "new_zeros", "full", "zeros", "empty", "masked_fill_"}


# ---------------------------------------------------------------------------
# Fast path: exactly upstream's call, no copies
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("host", [True, False])
@pytest.mark.parametrize("want_lse", [True, False])
def test_fast_path_passes_the_very_same_tensors(recorder, host, want_lse):
    case = packed_case([3, 0, 4, 2], [5, 0, 1, 3], num_heads=4, num_kv_heads=2,
                       dtype=torch.bfloat16, scale=0.3)
    log = OpLog(recorder)
    with log:
        result = fused_infer_attention_varlen(
            *case.args(), **case.kwargs(host=host, return_softmax_lse=want_lse))
    assert len(recorder.calls) == 1
    args, kwargs = recorder.calls[0]
    assert args[0] is case.q and args[1] is case.k and args[2] is case.v
    assert kwargs == {
        "num_heads": 4, "num_key_value_heads": 2, "scale": 0.3, "input_layout": "TND",
        "actual_seq_lengths": [3, 7, 9], "actual_seq_lengths_kv": [5, 6, 9],
        "softmax_lse_flag": want_lse,
    }
    # the only copy is upstream's own: the LSE made [N, T] contiguous
    assert not (COPIES - {"contiguous"}) & set(log.names), log.names
    assert log.names.count("contiguous") == (1 if want_lse else 0)
    out = result[0] if want_lse else result
    assert out.shape == case.q.shape


def test_fast_path_non_contiguous_same_shapes_stacks_once_like_upstream(recorder):
    case = packed_case([3, 2], [3, 2], num_heads=2, num_kv_heads=2,
                       dtype=torch.bfloat16)
    q, k, v = (t.transpose(0, 1).contiguous().transpose(0, 1) for t in (case.q, case.k, case.v))
    log = OpLog(recorder)
    with log:
        fused_infer_attention_varlen(q, k, v, case.cu_seqlens_q, case.cu_seqlens_k,
                                     **case.kwargs())
    args, _ = recorder.calls[0]
    assert all(t.is_contiguous() for t in args[:3])
    storages = {t.untyped_storage().data_ptr() for t in args[:3]}
    assert len(storages) == 1  # one stacked buffer, as upstream
    assert log.names.count("stack") == 1 and "index_select" not in log.names


# ---------------------------------------------------------------------------
# Compaction path
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("q_lens,k_lens", [
    ([3, 0, 4, 2], [5, 2, 1, 3]),    # KV-only only: its KV rows dropped
    ([3, 2, 4, 2], [5, 0, 1, 0]),    # query-only only: one zero KV row each
    ([0, 3, 2, 0, 4], [3, 0, 2, 1, 2]),
    ([2, 3, 4, 1], [0, 0, 3, 2]),    # adjacent query-only sequences: one run of rows to fill
])
def test_compaction_rebuilds_only_the_kv_side(recorder, q_lens, k_lens):
    case = packed_case(q_lens, k_lens, num_heads=4, num_kv_heads=2, dtype=torch.bfloat16, seed=4)
    log = OpLog(recorder)
    with log:
        out, lse = fused_infer_attention_varlen(*case.args(), **case.kwargs())
    assert len(recorder.calls) == 1
    args, kwargs = recorder.calls[0]
    # The op's KV side: per sequence with query rows, its KV rows, or one zero row if it has none.
    k_rows, dummies, ends_q, ends_k = [], [], [], []
    for (qs, qe), (ks, ke) in zip(pairwise(case.q_bounds), pairwise(case.k_bounds)):
        if qe == qs:
            continue
        if ke > ks:
            k_rows += range(ks, ke)
        else:
            dummies.append(len(k_rows))
            k_rows.append(None)
        ends_q.append(qe)
        ends_k.append(len(k_rows))
    assert args[0] is case.q                                         # q goes as it is
    want_k = torch.stack([case.k[r] if r is not None else torch.zeros_like(case.k[0]) for r in k_rows])
    want_v = torch.stack([case.v[r] if r is not None else torch.zeros_like(case.v[0]) for r in k_rows])
    assert torch.equal(args[1], want_k) and torch.equal(args[2], want_v)
    assert kwargs["actual_seq_lengths"] == ends_q and kwargs["actual_seq_lengths_kv"] == ends_k
    assert log.names.count("cat") == 2                               # one per K / V tensor
    assert "index_select" not in log.names                           # no per-row gather
    assert log.names.count("index_copy_") == 0                       # no scatter of the output
    # the query-only rows of the output and of the LSE (the zero K / V rows are cat pieces)
    assert log.names.count("index_fill_") == (2 if dummies else 0)
    ref_out, ref_lse = packed_attention_torch(case.q, case.k, case.v, case.q_bounds,
                                                     case.k_bounds, case.scale)
    assert torch.equal(out, ref_out)
    assert torch.equal(lse, ref_lse)


def test_all_query_only_never_calls_the_op(recorder):
    case = packed_case([2, 3], [0, 0], dtype=torch.bfloat16)
    out, lse = fused_infer_attention_varlen(*case.args(), **case.kwargs())
    assert recorder.calls == []
    assert (out == 0).all() and torch.isneginf(lse).all()


def test_all_empty_never_calls_the_op(recorder):
    case = packed_case([0, 0], [0, 0], dtype=torch.bfloat16)
    out, lse = fused_infer_attention_varlen(*case.args(), **case.kwargs())
    assert recorder.calls == []
    assert out.shape == (0, 4, 128) and lse.shape == (4, 0)


# ---------------------------------------------------------------------------
# No device-to-host syncs beyond upstream's
# ---------------------------------------------------------------------------

SYNC_NAMES = {"tolist", "item", "cpu", "numpy", "__bool__", "__int__", "__float__",
              "__index__", "nonzero", "equal", "allclose", "any", "all", "__len__", "__iter__"}
SYNCS: list[str] = []
COUNTING = [False]


class DeviceStandIn(torch.Tensor):
    """A CPU tensor standing in for an NPU tensor: records every call that would
    read device data on the host (tensors derived from it are stand-ins too)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if COUNTING[0] and name in SYNC_NAMES:
            SYNCS.append(name)
        return super().__torch_function__(func, types, args, kwargs or {})


def _standin(t):
    return t.as_subclass(DeviceStandIn)


class PausingEmulator:
    """The op runs on the device: its internals are not the wrapper's syncs."""

    def __call__(self, *args, **kwargs):
        COUNTING[0] = False
        try:
            out, lse = emu.npu_fused_infer_attention_score(*args, **kwargs)
        finally:
            COUNTING[0] = True
        return out.as_subclass(DeviceStandIn), lse.as_subclass(DeviceStandIn)


@pytest.mark.parametrize("path", ["reference", "fast", "compact", "all_query_only"])
@pytest.mark.parametrize("host", [True, False])
def test_no_new_device_to_host_syncs(path, host):
    lens = {"reference": ([3, 0, 2], [1, 4, 0]), "fast": ([3, 0, 2], [1, 0, 4]),
            "compact": ([3, 0, 2, 4], [1, 4, 0, 2]), "all_query_only": ([3, 2], [0, 0])}[path]
    case = packed_case(*lens, dtype=torch.bfloat16, seed=8)
    args = [_standin(t) for t in case.args()]
    emulated = {} if path == "reference" else {emu.OP_NAME: PausingEmulator()}
    SYNCS.clear()
    with seam.install_emulators(emulated):
        COUNTING[0] = True
        try:
            out, lse = fused_infer_attention_varlen(*args, **case.kwargs(host=host))
        finally:
            COUNTING[0] = False
    # upstream reads each cu_seqlens with one .tolist() when no host copy is given
    assert SYNCS == ([] if host else ["tolist", "tolist"])
    ref_out, ref_lse = packed_attention_torch(case.q, case.k, case.v, case.q_bounds,
                                                     case.k_bounds, case.scale)
    assert torch.equal(out.as_subclass(torch.Tensor), ref_out)
    assert torch.equal(lse.as_subclass(torch.Tensor), ref_lse)


def test_sync_detector_detects_syncs():
    """The stand-in really sees host reads (so the test above can fail)."""
    t = _standin(torch.tensor([0, 2, 5]))
    SYNCS.clear()
    COUNTING[0] = True
    try:
        t.tolist()
        t[1].item()
        bool(t[0] == 0)
        t.cpu()
    finally:
        COUNTING[0] = False
    assert SYNCS == ["tolist", "item", "__bool__", "cpu"]


# ---------------------------------------------------------------------------
# Emulator contract (what the real op accepts and refuses)
# ---------------------------------------------------------------------------


def test_upstream_style_call_with_one_sided_sequences_is_undefined_on_the_op():
    """Passing one-sided sequences straight through (cumulative ends including the empty ones)
    is accepted by the op's documented checks, but what it writes for query rows without keys is
    undocumented: the emulator writes NaN there.  The wrapper never makes that call."""
    case = packed_case([3, 0, 2], [2, 4, 0], dtype=torch.bfloat16)
    out, lse = emu.npu_fused_infer_attention_score(
        case.q, case.k, case.v, num_heads=4, num_key_value_heads=2, scale=0.25,
        input_layout="TND", actual_seq_lengths=list(case.q_bounds[1:]),
        actual_seq_lengths_kv=list(case.k_bounds[1:]), softmax_lse_flag=True)
    assert torch.isnan(out[3:]).all() and not torch.isnan(out[:3]).any()
    with seam.install_emulators(emu.emulators()):
        out, lse = fused_infer_attention_varlen(*case.args(), **case.kwargs(return_softmax_lse=True))
    ref_out, ref_lse = packed_attention_torch(case.q, case.k, case.v, case.q_bounds, case.k_bounds,
                                                     case.scale)
    assert not torch.isnan(out).any()
    torch.testing.assert_close(out.float(), ref_out.float(), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("dims,ok", [((128, 128, 128), True), ((192, 192, 128), True), ((192, 192, 192), True),
                                     ((64, 64, 64), False), ((128, 128, 64), False), ((256, 256, 256), False)])
def test_head_dims_outside_the_contract_never_reach_the_op(recorder, dims, ok, caplog):
    qd, kd, vd = dims
    case = _packed_case([3, 2], [2, 4], num_heads=4, num_kv_heads=2, head_dim=qd, dtype=torch.bfloat16)
    v = case.v[..., :vd] if vd <= qd else torch.cat([case.v, case.v[..., : vd - qd]], dim=-1)
    with caplog.at_level(logging.INFO):
        out = fused_infer_attention_varlen(case.q, case.k, v.contiguous(), case.cu_seqlens_q, case.cu_seqlens_k,
                                           **case.kwargs(return_softmax_lse=False))
    assert len(recorder.calls) == int(ok)
    assert fia_contract.head_dims_supported(qd, kd, vd) == ok
    ref_out, _ = packed_attention_torch(case.q, case.k, v, case.q_bounds, case.k_bounds, case.scale)
    torch.testing.assert_close(out.float(), ref_out.float(), atol=2e-2, rtol=2e-2)
    assert ("outside npu_fused_infer_attention_score's contract" in caplog.text) == (not ok)


# ---------------------------------------------------------------------------
# Logging and helpers
# ---------------------------------------------------------------------------

def test_compaction_and_reference_are_logged_once(caplog):
    case = _packed_case([3, 0, 2], [2, 4, 0], dtype=torch.bfloat16, head_dim=128)
    with caplog.at_level(logging.INFO, logger=OPS_LOGGER):
        for _ in range(3):
            fused_infer_attention_varlen(*case.args(), **case.kwargs())
        with seam.install_emulators(emu.emulators()):
            for _ in range(3):
                fused_infer_attention_varlen(*case.args(), **case.kwargs())
    messages = [r.getMessage() for r in caplog.records if r.name.startswith(OPS_LOGGER)]
    assert sum("using the torch path" in m for m in messages) == 1
    assert sum("compacting" in m for m in messages) == 1
    assert all(r.levelno == logging.INFO for r in caplog.records if r.name.startswith(OPS_LOGGER))


def test_fast_path_logs_nothing(caplog):
    case = _packed_case([3, 2], [2, 4], dtype=torch.bfloat16, head_dim=128)
    with caplog.at_level(logging.INFO, logger=OPS_LOGGER):
        with seam.install_emulators(emu.emulators()):
            fused_infer_attention_varlen(*case.args(), **case.kwargs())
    assert not [r for r in caplog.records if r.name.startswith(OPS_LOGGER)]


def test_probe_replacement_tells_fixed_from_refusing():
    def refusing(*args, **kwargs):
        raise NotImplementedError("NPU packed attention does not support a sequence that is "
                                  "empty only on the query or key/value side")

    def wrong_fill(*args, **kwargs):
        out, lse = fused_infer_attention_varlen(*args, **kwargs)
        return out, torch.nan_to_num(lse, neginf=0.0)

    assert patch_side.probe_replacement(fused_infer_attention_varlen)
    assert not patch_side.probe_replacement(refusing)
    assert not patch_side.probe_replacement(wrong_fill)


def test_upstream_needs_replacement_reads_the_source():
    import types

    fixed = types.ModuleType("fixed_upstream")
    fixed.fused_infer_attention_varlen = fused_infer_attention_varlen
    assert not patch_side.upstream_needs_replacement(fixed)
    assert not patch_side.upstream_needs_replacement(types.ModuleType("no_function"))


def test_random_packed_case_helper():
    case = random_packed_case(5, num_seqs=40, one_sided_fraction=0.5, both_empty_fraction=0.2)
    pairs = list(zip(pairwise(case.q_bounds), pairwise(case.k_bounds)))
    kinds = {((qe > qs), (ke > ks)) for (qs, qe), (ks, ke) in pairs}
    assert kinds == {(True, True), (True, False), (False, True), (False, False)}
    assert case.cu_seqlens_q.tolist() == list(case.q_bounds)
    assert case.q.shape[0] == case.q_bounds[-1] and case.k.shape[0] == case.k_bounds[-1]
    with pytest.raises(ValueError, match=re.escape("packed_case: k_lens=[1, 2]: expected 1 lengths, one per sequence "
                                                   "of q_lens (the same batch size)")):
        _packed_case([1], [1, 2])


def test_probe_replacement_works_with_emulators_installed():
    with seam.install_emulators(emu.emulators()):
        assert patch_side.probe_replacement(fused_infer_attention_varlen)


def test_query_only_rows_are_zero_and_neg_inf_whatever_their_queries():
    """The query-only rows reach the op (against one zero key) but their results are set outright:
    non-finite queries there cannot leak into the output, and the two-sided rows are unaffected."""
    case = packed_case([2, 3, 2], [4, 0, 3], dtype=torch.bfloat16, seed=7)
    case.q[2:5] = float("nan")
    with seam.install_emulators(emu.emulators()):
        out, lse = fused_infer_attention_varlen(*case.args(), **case.kwargs())
    ref_out, ref_lse = packed_attention_torch(case.q, case.k, case.v, case.q_bounds, case.k_bounds,
                                                     case.scale)
    assert torch.equal(out[2:5], torch.zeros_like(out[2:5]))
    assert torch.isneginf(lse[:, 2:5]).all()
    assert torch.equal(out[[0, 1, 5, 6]], ref_out[[0, 1, 5, 6]])
    assert torch.equal(lse[:, [0, 1, 5, 6]], ref_lse[:, [0, 1, 5, 6]])


def test_compaction_takes_non_contiguous_key_values():
    case = packed_case([3, 0, 2], [2, 4, 0], num_heads=4, num_kv_heads=2, dtype=torch.bfloat16, seed=8)
    k = case.k.transpose(0, 1).contiguous().transpose(0, 1)   # same values, head-major storage
    v = case.v.transpose(0, 1).contiguous().transpose(0, 1)
    assert not k.is_contiguous()
    with seam.install_emulators(emu.emulators()):
        out, lse = fused_infer_attention_varlen(case.q, k, v, case.cu_seqlens_q, case.cu_seqlens_k,
                                                **case.kwargs())
    ref_out, ref_lse = packed_attention_torch(case.q, case.k, case.v, case.q_bounds, case.k_bounds,
                                                     case.scale)
    assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse)


def test_an_lse_of_the_wrong_shape_from_the_op_is_reported_with_both_shapes():
    case = packed_case([3, 2], [2, 4], dtype=torch.bfloat16)

    def wrong_lse(*args, **kwargs):
        out, lse = emu.npu_fused_infer_attention_score(*args, **kwargs)
        return out, lse[:, :, 0]                                   # [T, N] instead of [T, N, 1]

    with seam.install_emulators({emu.OP_NAME: wrong_lse}):
        with pytest.raises(RuntimeError, match=r"Unexpected Ascend TND softmax LSE shape: expected "
                                               r"\(5, 4, 1\), got \(5, 4\)"):
            fused_infer_attention_varlen(*case.args(), **case.kwargs())


def test_an_unexpected_device_failure_falls_back_to_torch_once_with_a_warning(caplog):
    """The device rung is a ladder rung like the others: a RuntimeError the contract did not
    predict is a refusal (WARNING once, with the op's text), the torch rung serves that call
    and every later call of the shape, and the device op is not called again for it."""
    case = packed_case([3, 2], [2, 4], dtype=torch.bfloat16, head_dim=128)
    calls = []

    def failing(*args, **kwargs):
        calls.append(1)
        raise RuntimeError("aclnnFusedInferAttentionScore failed: EZ9999 tiling error")

    ref_out, ref_lse = packed_attention_torch(case.q, case.k, case.v, case.q_bounds, case.k_bounds, case.scale)
    with caplog.at_level(logging.INFO, logger=OPS_LOGGER):
        with seam.install_emulators({emu.OP_NAME: failing}):
            for _ in range(3):
                out, lse = fused_infer_attention_varlen(*case.args(), **case.kwargs())
                assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse)
    assert len(calls) == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "EZ9999 tiling error" in warnings[0] and "packed_attention" in warnings[0]


def test_memory_exhaustion_on_the_device_rung_propagates():
    case = packed_case([3, 2], [2, 4], dtype=torch.bfloat16, head_dim=128)

    def oom(*args, **kwargs):
        raise RuntimeError("NPU out of memory. Tried to allocate 2.00 GiB")

    with seam.install_emulators({emu.OP_NAME: oom}):
        with pytest.raises(RuntimeError, match="out of memory"):
            fused_infer_attention_varlen(*case.args(), **case.kwargs())


def test_kv_only_sequences_at_the_edges_cost_no_copy(recorder):
    """KV-only sequences only before and after the rest: the op's KV side is one run of rows of
    k / v, passed as a view (no copy), with the right ends; non-contiguous k / v still arrive
    contiguous."""
    case = packed_case([0, 3, 2, 0], [2, 3, 1, 4], num_heads=4, num_kv_heads=2, dtype=torch.bfloat16, seed=5)
    fused_infer_attention_varlen(*case.args(), **case.kwargs())
    args, kwargs = recorder.calls[0]
    assert args[1].data_ptr() == case.k[2:].data_ptr() and args[2].data_ptr() == case.v[2:].data_ptr()
    assert torch.equal(args[1], case.k[2:6]) and torch.equal(args[2], case.v[2:6])
    assert kwargs["actual_seq_lengths"] == [3, 5] and kwargs["actual_seq_lengths_kv"] == [3, 4]
    k_strided = case.k.transpose(0, 1).contiguous().transpose(0, 1)
    fused_infer_attention_varlen(case.q, k_strided, case.v, case.cu_seqlens_q, case.cu_seqlens_k, **case.kwargs())
    args, _ = recorder.calls[1]
    assert args[1].is_contiguous() and torch.equal(args[1], case.k[2:6])


def test_compaction_log_counts_each_kind_of_one_sided_sequence(caplog):
    case = _packed_case([3, 0, 0, 2, 4, 1], [2, 4, 5, 0, 1, 0], num_heads=4, num_kv_heads=2, head_dim=128,
                       dtype=torch.bfloat16)
    with seam.install_emulators(emu.emulators()), caplog.at_level(logging.INFO):
        pa.fused_infer_attention_varlen(*case.args(), **case.kwargs())
    assert "(first seen: 2 KV-only, 2 query-only)" in caplog.text


def test_fast_path_makes_different_shaped_non_contiguous_inputs_contiguous():
    case = _packed_case([3, 2], [4, 1], num_heads=4, num_kv_heads=2, head_dim=128, dtype=torch.bfloat16)
    q, k, v = (t.transpose(0, 1).contiguous().transpose(0, 1) for t in (case.q, case.k, case.v))
    assert not q.is_contiguous() and q.shape != k.shape
    with seam.install_emulators(emu.emulators()):
        out, _ = pa.fused_infer_attention_varlen(q, k, v, case.cu_seqlens_q, case.cu_seqlens_k, **case.kwargs())
    ref, _ = packed_attention_torch(case.q, case.k, case.v, case.q_bounds, case.k_bounds, case.scale)
    torch.testing.assert_close(out.float(), ref.float(), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("host,ok", [
    (torch.tensor([0, 3, 5]), True),
    (torch.tensor([0, 3, 5], dtype=torch.int32), True),
    (torch.tensor([[0, 3, 5]]), False),
    (torch.tensor([False, True, True]), False),
    (torch.tensor([0.0, 3.0, 5.0]), False),
])
def test_host_copies_given_as_cpu_tensors(host, ok):
    case = _packed_case([3, 2], [3, 2], num_heads=2, num_kv_heads=1, head_dim=16)
    call = lambda: pa.fused_infer_attention_varlen(  # noqa: E731
        case.q, case.k, case.v, case.cu_seqlens_q, case.cu_seqlens_k, cu_seqlens_q_host=host,
        cu_seqlens_k_host=case.k_bounds)
    if ok:
        ref, _ = packed_attention_torch(case.q, case.k, case.v, case.q_bounds, case.k_bounds, case.scale)
        torch.testing.assert_close(call(), ref)
    else:
        shape = re.escape(str(tuple(host.shape)))
        with pytest.raises(ValueError, match=rf"^fused_infer_attention_varlen: cu_seqlens_q_host=shape {shape} \w+: "
                                             r"expected a 1D integer tensor \(or a list / tuple of ints\)$"):
            call()
