"""Both conv ladders with every emulator variant (conv op present / absent, unmerged v2 branch,
released causal_conv1d_update_v2): the predicted rung runs (a known refusal is never made),
a recognised refusal falls through once with one INFO line, the result matches the fp64
oracle and the pool is bit-identical to it; edge cases on every rung; and the serving decode
hook path does no host sync on any rung."""

from __future__ import annotations

import logging
import re

import pytest
import torch

from sglang_ascend_hybrid.emulators import causal_conv1d as emu
from sglang_ascend_hybrid.integration import conv_hooks
from sglang_ascend_hybrid.integration.conv_state_layout import cuda_layout_view
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.conv import api as ops
from sglang_ascend_hybrid.ops.conv import dispatch as conv_dispatch
from sglang_ascend_hybrid.ops.ladder import ForcedRungUnavailable
from tests.ops.conv.conv_oracle import (
    assert_close_to_oracle,
    forced_backend,
    naive_causal_conv1d_fn,
    naive_causal_conv1d_update,
    opaque,
)
from tests.support.sync_counter import SyncCounter

DIM = 24
OP_OF = {"npu_v2": None, "npu_aclnn": emu.OP_ACLNN, "npu_update_v2": emu.OP_UPDATE_V2_MAIN}
LOG_TORCH = "outside every installed NPU conv kernel"


@pytest.fixture(autouse=True)
def _fresh_ladders(monkeypatch):
    monkeypatch.delenv("SGLANG_ASCEND_HYBRID_CONV_BACKEND", raising=False)
    monkeypatch.delenv("SGLANG_ASCEND_HYBRID_DEBUG_CHECKS", raising=False)
    conv_dispatch.reset_state()
    yield
    conv_dispatch.reset_state()


def _spy(table, calls):
    def wrap(name, fn):
        def run(*a, **k):
            calls.append(name)
            return fn(*a, **k)
        return run
    return {n: wrap(n, f) for n, f in table.items()}


def _expected(kind, flags, dtype, draft):
    if flags["v2_branch"] and not draft:
        return "npu_v2", (emu.OP_FN_V2 if kind == "fn" else emu.OP_UPDATE_V2)
    if flags["conv_op"] and not draft:
        return "npu_aclnn", emu.OP_ACLNN
    if kind == "update" and flags["update_v2"] and dtype == torch.float16:
        return "npu_update_v2", emu.OP_UPDATE_V2_MAIN
    return "torch", None


def _pool(width, draft, dtype, gen):
    return torch.randn(7, width - 1 + (2 if draft else 0), DIM, generator=gen).to(dtype)


@pytest.mark.parametrize("variant", sorted(emu.VARIANTS))
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("draft", [False, True])
def test_fn_ladder_every_variant(caplog, variant, dtype, draft):
    width = 4
    gen = torch.Generator().manual_seed(3)
    pool = _pool(width, draft, dtype, gen)
    draft_rows = pool[:, :pool.shape[1] - (width - 1)].clone()
    weight = (torch.randn(DIM, width, generator=gen) * 0.5).to(dtype)
    bias = (torch.randn(DIM, generator=gen) * 0.1).to(dtype)
    lens = [4, 0, 2, 1, 3]
    idx = torch.tensor([5, 2, -1, 0, 3], dtype=torch.int32)
    his = torch.tensor([True, False, True, False, True])
    qsl = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32)
    rung, op = _expected("fn", emu.VARIANTS[variant], dtype, draft)
    calls = []
    with seam.install_emulators(_spy(emu.emulators(**emu.VARIANTS[variant]), calls)), \
            caplog.at_level(logging.INFO):
        for step in range(3):
            x = torch.randn(DIM, sum(lens), generator=gen).to(dtype)
            view = cuda_layout_view(pool, width - 1)
            expect, scale, new_view = naive_causal_conv1d_fn(x, weight, bias, qsl, idx, his, view, False)
            out = ops.causal_conv1d_fn(x, weight, bias, query_start_loc=qsl, cache_indices=idx,
                                       has_initial_state=his, conv_states=view, activation=None)
            assert_close_to_oracle(out, expect, scale, dtype, f"{variant} step {step}")
            assert torch.equal(view, new_view)
            assert torch.equal(pool[:, :pool.shape[1] - (width - 1)], draft_rows)
    assert calls == ([op] * 3 if op else [])
    torch_lines = [r for r in caplog.records if LOG_TORCH in r.getMessage()]
    some_kernel = any(emu.VARIANTS[variant].values())      # without any, a CPU run is silent
    assert len(torch_lines) == (1 if rung == "torch" and some_kernel else 0)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("variant", sorted(emu.VARIANTS))
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("draft", [False, True])
def test_update_ladder_every_variant(caplog, variant, dtype, draft):
    width = 3
    gen = torch.Generator().manual_seed(4)
    pool = _pool(width, draft, dtype, gen)
    draft_rows = pool[:, :pool.shape[1] - (width - 1)].clone()
    weight = (torch.randn(DIM, width, generator=gen) * 0.5).to(dtype)
    idx = torch.tensor([6, -1, 0, 2], dtype=torch.int32)
    rung, op = _expected("update", emu.VARIANTS[variant], dtype, draft)
    calls = []
    with seam.install_emulators(_spy(emu.emulators(**emu.VARIANTS[variant]), calls)), \
            caplog.at_level(logging.INFO):
        for step in range(3):
            x = torch.randn(4, DIM, generator=gen).to(dtype)
            x_in = x.clone()
            view = cuda_layout_view(pool, width - 1)
            expect, scale, new_view = naive_causal_conv1d_update(x, view, weight, None, idx, True)
            out = ops.causal_conv1d_update(x, view, weight, None, "silu", conv_state_indices=idx)
            assert torch.equal(x, x_in), "the caller's x was overwritten"
            assert_close_to_oracle(out, expect, scale, dtype, f"{variant} step {step}")
            assert torch.equal(view, new_view)
            assert torch.equal(pool[:, :pool.shape[1] - (width - 1)], draft_rows)
    assert calls == ([op] * 3 if op else [])
    torch_lines = [r for r in caplog.records if LOG_TORCH in r.getMessage()]
    some_kernel = any(emu.VARIANTS[variant].values())      # without any, a CPU run is silent
    assert len(torch_lines) == (1 if rung == "torch" and some_kernel else 0)


def _refusing(text):
    calls = []

    def run(*a, **k):
        calls.append(1)
        raise RuntimeError(text)
    return run, calls


@pytest.mark.parametrize("text,level", [
    (emu.ERR_WIDTH, logging.INFO),                       # a real host text: known refusal
    ("aclrtLaunchKernel failed: 507015", logging.WARNING),  # anything else: generic path
])
def test_refusal_is_recognised_once_and_the_next_rung_gives_the_oracle_result(caplog, text, level):
    gen = torch.Generator().manual_seed(8)
    pool = _pool(3, False, torch.float16, gen)
    weight = torch.randn(DIM, 3, generator=gen).half()
    idx = torch.tensor([1, 4], dtype=torch.int32)
    refusing, calls = _refusing(text)
    table = emu.emulators(**emu.VARIANTS["conv_op_only"])
    table[emu.OP_ACLNN] = refusing
    with seam.install_emulators(table), caplog.at_level(logging.INFO):
        for _ in range(3):
            x = torch.randn(2, DIM, generator=gen).half()
            view = cuda_layout_view(pool)
            expect, scale, new_view = naive_causal_conv1d_update(x, view, weight, None, idx, False)
            out = ops.causal_conv1d_update(x, view, weight, conv_state_indices=idx)
            assert_close_to_oracle(out, expect, scale, torch.float16, "after refusal")
            assert torch.equal(view, new_view)
    assert calls == [1]
    lines = [r for r in caplog.records if "kernel npu_aclnn" in r.getMessage() and r.levelno == level]
    assert len(lines) == 1 and text.splitlines()[0] in lines[0].getMessage()


def test_tiling_cache_never_sees_one_shape_in_two_dtypes():
    """torch.ops.npu.causal_conv1d's tiling key omits the dtype: the second dtype of a shape goes
    to the next rung (the emulator would raise if the rung called it)."""
    gen = torch.Generator().manual_seed(9)
    calls = []
    idx = torch.tensor([0, 2], dtype=torch.int32)
    with seam.install_emulators(_spy(emu.emulators(**emu.VARIANTS["conv_op_only"]), calls)):
        for dtype in (torch.float16, torch.bfloat16, torch.float16):
            pool = _pool(3, False, dtype, gen)
            ops.causal_conv1d_update(torch.randn(2, DIM).to(dtype), cuda_layout_view(pool),
                                     torch.randn(DIM, 3).to(dtype), conv_state_indices=idx)
        assert calls == [emu.OP_ACLNN, emu.OP_ACLNN]
        pool = _pool(3, False, torch.bfloat16, gen)        # another shape in bf16: its own key
        ops.causal_conv1d_update(torch.randn(3, DIM).bfloat16(), cuda_layout_view(pool),
                                 torch.randn(DIM, 3).bfloat16(), conv_state_indices=torch.tensor([0, 1, 2]))
    assert calls == [emu.OP_ACLNN] * 3


def test_forced_unavailable_rung_says_why_and_what_it_calls():
    gen = torch.Generator().manual_seed(10)
    pool = _pool(3, True, torch.float16, gen)
    with seam.install_emulators(emu.emulators()), forced_backend("npu_aclnn"):
        with pytest.raises(ForcedRungUnavailable, match=r"\(it calls causal_conv1d\); use 'auto'") as info:
            ops.causal_conv1d_update(torch.randn(1, DIM).half(), cuda_layout_view(pool, 2),
                                     torch.randn(DIM, 3).half(), conv_state_indices=torch.tensor([1]))
    # the predicate's own reason says what is wrong with this call, then the op the rung calls
    assert "the state is not a contiguous window-major pool (a pool with draft rows" in str(info.value)


# --------------------------------------------------------------------------- edge cases, every rung


def _every_rung(ladder):
    for variant in ("all", "release"):
        for rung in ladder.names:
            yield variant, rung


@pytest.mark.parametrize("variant,rung", list(_every_rung(conv_dispatch.FN_LADDER)))
@pytest.mark.parametrize("his", [True, False, None])
def test_fn_empty_sequences_and_padding_never_write_any_slot(variant, rung, his):
    gen = torch.Generator().manual_seed(11)
    pool = _pool(4, False, torch.float16, gen)
    before = pool.clone()
    weight = torch.randn(DIM, 4, generator=gen).half()
    cases = [  # (lens, idx): all empty (T = 0), all padding, empty batch, empty beside pad
        ([0, 0], [0, 3]), ([2, 1], [-1, -1]), ([], []), ([0, 3], [0, -1]),
    ]
    with seam.install_emulators(emu.emulators(**emu.VARIANTS[variant])), forced_backend(rung):
        for lens, idx in cases:
            qsl = torch.tensor([0] + torch.tensor(lens, dtype=torch.int64).cumsum(0).tolist(), dtype=torch.int32)
            x = torch.randn(DIM, sum(lens), generator=gen).half()
            h = None if his is None else torch.full((len(lens),), his, dtype=torch.bool)
            try:
                out = ops.causal_conv1d_fn(x, weight, None, query_start_loc=qsl,
                                           cache_indices=torch.tensor(idx, dtype=torch.int32),
                                           has_initial_state=h, conv_states=cuda_layout_view(pool))
            except ForcedRungUnavailable:
                assert rung == "npu_v2" and variant == "release"
                continue
            assert out.shape == x.shape and out.dtype == x.dtype
            assert torch.equal(pool, before), f"{rung} {lens} {idx} wrote a slot"


@pytest.mark.parametrize("variant,rung", list(_every_rung(conv_dispatch.UPDATE_LADDER)))
def test_update_empty_and_all_padding_batches_never_write(variant, rung):
    gen = torch.Generator().manual_seed(12)
    pool = _pool(3, False, torch.float16, gen)
    before = pool.clone()
    weight = torch.randn(DIM, 3, generator=gen).half()
    with seam.install_emulators(emu.emulators(**emu.VARIANTS[variant])), forced_backend(rung):
        for x, idx in ((torch.randn(0, DIM).half(), []), (torch.randn(3, DIM).half(), [-1, -1, -1]),
                       (torch.randn(2, DIM, 0).half(), [1, 2])):
            try:
                out = ops.causal_conv1d_update(x, cuda_layout_view(pool), weight,
                                               conv_state_indices=torch.tensor(idx, dtype=torch.int32))
            except ForcedRungUnavailable:
                assert rung == "npu_v2" and variant == "release"
                continue
            assert out.shape == x.shape
            assert torch.equal(pool, before), f"{rung}: {idx} wrote a slot"


# --------------------------------------------------------------------------- graph capture


def _decode_args(gen, dtype=torch.float16, draft=False):
    pool = _pool(3, draft, dtype, gen)
    return (torch.randn(4, DIM, generator=gen).to(dtype), cuda_layout_view(pool, 2),
            torch.randn(DIM, 3, generator=gen).to(dtype), None, None), \
        dict(conv_state_indices=torch.tensor([3, -1, 0, 5], dtype=torch.int32))


@pytest.mark.parametrize("rung,dtype,draft", [
    ("npu_v2", torch.float16, False), ("npu_aclnn", torch.bfloat16, False),
    ("npu_update_v2", torch.float16, True), ("torch", torch.bfloat16, True), ("torch", torch.float32, False),
])
def test_decode_hook_path_has_no_host_sync_on_any_rung(rung, dtype, draft):
    """The hook LFM2's decode reaches (causal_conv1d_update_around, as under NPU graph capture):
    zero sync / data-dependent-shape ops; the emulated kernels count as single launches."""
    gen = torch.Generator().manual_seed(13)
    args, kwargs = _decode_args(gen, dtype, draft)

    def original(*a, **k):
        raise AssertionError("the plugin should serve a window-major pool")

    with seam.install_emulators({n: opaque(f) for n, f in emu.emulators().items()}), forced_backend(rung):
        with SyncCounter() as counter:
            conv_hooks.causal_conv1d_update_around(original, *args, **kwargs)
    assert counter.total == 0, dict(counter.counts)


def test_direct_call_and_debug_checks_do_read_values_on_the_host(monkeypatch):
    gen = torch.Generator().manual_seed(14)
    args, kwargs = _decode_args(gen)
    with seam.install_emulators({n: opaque(f) for n, f in emu.emulators().items()}):
        with SyncCounter() as direct:
            ops.causal_conv1d_update(*args, **kwargs)
        monkeypatch.setenv("SGLANG_ASCEND_HYBRID_DEBUG_CHECKS", "1")
        with SyncCounter() as debug:
            conv_hooks.causal_conv1d_update_around(None, *args, **kwargs)
        bad = dict(kwargs, conv_state_indices=torch.tensor([3, 3, 0, 5], dtype=torch.int32))
        with pytest.raises(ValueError, match=re.escape("causal_conv1d_update: conv_state_indices=[3, 3, 0, 5]: "
                                                       "expected distinct slots (or pad_slot_id -1); slot 3 is")):
            conv_hooks.causal_conv1d_update_around(None, *args, **bad)
    # two host reads: the range check and the duplicate check
    assert direct.total == debug.total == 2, (dict(direct.counts), dict(debug.counts))


def test_prefill_hook_checks_sglangs_host_lengths_without_a_sync():
    gen = torch.Generator().manual_seed(15)
    pool = _pool(3, False, torch.float16, gen)
    x = torch.randn(DIM, 3, generator=gen).half()
    with pytest.raises(ValueError, match=re.escape("causal_conv1d_fn: seq_lens_cpu=[2, 5]: expected non-negative "
                                                   "lengths summing to at most the 3 tokens of x")):
        conv_hooks.causal_conv1d_fn_around(None, x, torch.randn(DIM, 3).half(), None,
                                    torch.tensor([0, 2, 3], dtype=torch.int32), torch.tensor([0, 1]), None,
                                    cuda_layout_view(pool), None, seq_lens_cpu=[2, 5])


@pytest.mark.parametrize("variant", sorted(emu.VARIANTS))
@pytest.mark.parametrize("case", ["fp32", "width5", "weight_fp32", "state_bf16_x_fp16", "channel_major"])
def test_known_refusals_are_predicted_never_called(caplog, variant, case):
    """Inputs an op's host checks would refuse (dtype, width, mixed dtypes) or that it would
    compute on the wrong rows (a channel-major pool) never reach that op; an op that accepts
    them (update_v2 and an fp32 weight) serves them correctly."""
    gen = torch.Generator().manual_seed(16)
    width = 5 if case == "width5" else 3
    xd = torch.float32 if case == "fp32" else torch.float16
    wd = torch.float32 if case in ("fp32", "weight_fp32") else torch.float16
    sd = {"fp32": torch.float32, "state_bf16_x_fp16": torch.bfloat16}.get(case, torch.float16)
    if case == "channel_major":
        pool = torch.randn(5, DIM, width - 1, generator=gen).to(sd)
        view = pool
    else:
        pool = torch.randn(5, width - 1, DIM, generator=gen).to(sd)
        view = cuda_layout_view(pool)
    weight = torch.randn(DIM, width, generator=gen).to(wd)
    x = torch.randn(3, DIM, generator=gen).to(xd)
    idx = torch.tensor([4, -1, 1], dtype=torch.int32)
    calls = []
    expect, scale, new_view = naive_causal_conv1d_update(x, view, weight, None, idx, False)
    with seam.install_emulators(_spy(emu.emulators(**emu.VARIANTS[variant]), calls)), \
            caplog.at_level(logging.INFO):
        out = ops.causal_conv1d_update(x, view, weight, conv_state_indices=idx)
    # causal_conv1d_update_v2 reads the weight as fp32 whatever its dtype: it accepts an fp32 weight
    served = case == "weight_fp32" and emu.VARIANTS[variant]["update_v2"]
    assert calls == ([emu.OP_UPDATE_V2_MAIN] if served else [])
    assert not [r for r in caplog.records if "refused" in r.getMessage() or r.levelno >= logging.WARNING]
    assert_close_to_oracle(out, expect, scale, xd, case)
    # the state keeps the pool's dtype: compare in it
    assert torch.equal(view, new_view.to(view.dtype))


def test_a_prefill_refusal_is_remembered_for_the_channel_signature_whatever_the_token_count():
    """The prefill signature is (width, channels, dtypes, layout): a kernel that refused once is not
    asked again for the next batch of another length (the refusal memo must not key on T)."""
    gen = torch.Generator().manual_seed(8)
    dim, width = 16, 3
    weight = torch.randn(dim, width, generator=gen).half()
    pool = torch.randn(4, width - 1, dim, generator=gen).half()
    asked = []

    def refusing(*a, **k):
        asked.append(1)
        raise RuntimeError(emu.ERR_DTYPE)

    with seam.install_emulators({emu.OP_FN_V2: refusing}):
        for lens in ([2, 3], [4, 1, 3]):
            qsl = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
            ops.causal_conv1d_fn(torch.randn(dim, sum(lens), generator=gen).half(), weight, None,
                                  query_start_loc=qsl, cache_indices=torch.arange(len(lens), dtype=torch.int32),
                                  conv_states=cuda_layout_view(pool), activation="silu")
    assert asked == [1]
