"""Every rule of the conv emulators' contracts (sglang_ascend_hybrid/emulators/causal_conv1d.py,
written from sgl-project/sgl-kernel-npu f425bdf1), pinned one by one, and the emulators checked
against the independent fp64 oracle (tests/ops/conv/conv_oracle.py)."""

from __future__ import annotations

import pytest
import torch

from sglang_ascend_hybrid.emulators import causal_conv1d as emu
from sglang_ascend_hybrid.ops.conv import contract as conv_contract
from sglang_ascend_hybrid.ops.errors import EmulatorContractViolation
from tests.ops.conv.conv_oracle import assert_close_to_oracle, naive_causal_conv1d_fn, naive_causal_conv1d_update

H = torch.float16


def _case(width=4, dim=24, slots=6, state_len=None, dtype=H, seed=0):
    gen = torch.Generator().manual_seed(seed)
    state_len = width - 1 if state_len is None else state_len
    pool = torch.randn(slots, state_len, dim, generator=gen).to(dtype)
    weight = (torch.randn(width, dim, generator=gen) * 0.5).to(dtype)
    return gen, pool, weight


def _varlen(gen, lens, dim, dtype=H):
    x = torch.randn(sum(lens), dim, generator=gen).to(dtype)
    qsl = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32)
    return x, qsl


# --------------------------------------------------------------------------- torch.ops.npu.causal_conv1d: refusals


def _ok_args(dtype=H):
    gen, pool, weight = _case(dtype=dtype)
    x, qsl = _varlen(gen, [3, 2], 24, dtype)
    return dict(x=x, weight=weight, conv_states=pool, query_start_loc=qsl,
                cache_indices=torch.tensor([1, 2]))


@pytest.mark.parametrize("change,text", [
    (lambda a: a.update(x=a["x"][None, None]), emu.ERR_X_DIM),
    (lambda a: a.update(weight=a["weight"][None]), emu.ERR_W_DIM),
    (lambda a: a.update(x=a["x"].float()), emu.ERR_DTYPE),
    (lambda a: a.update(weight=a["weight"].bfloat16()), emu.ERR_W_DTYPE),
    (lambda a: a.update(conv_states=a["conv_states"].float()), emu.ERR_S_DTYPE),
    (lambda a: a.update(x=a["x"].t().contiguous().t()), emu.ERR_X_CONTIG),
    (lambda a: a.update(weight=a["weight"].t().contiguous().t()), emu.ERR_W_CONTIG),
    (lambda a: a.update(conv_states=a["conv_states"].transpose(1, 2).contiguous().transpose(1, 2)),
     emu.ERR_S_CONTIG),
    (lambda a: a.update(weight=torch.zeros(5, 24, dtype=H)), emu.ERR_WIDTH),
    (lambda a: a.update(weight=torch.zeros(1, 24, dtype=H)), emu.ERR_WIDTH),
    (lambda a: a.update(query_start_loc=None), emu.ERR_QSL),
    (lambda a: a.update(query_start_loc=torch.tensor([0], dtype=torch.int32)), emu.ERR_QSL),
])
def test_aclnn_refusal_texts_are_the_hosts_and_nothing_is_written(change, text):
    args = _ok_args()
    change(args)
    before = args["conv_states"].clone()
    with pytest.raises(RuntimeError) as info:
        emu.NpuCausalConv1d()(**args)
    assert str(info.value) == text and text in conv_contract.REFUSAL_TEXTS
    assert torch.equal(args["conv_states"], before)


def test_aclnn_check_order_dtype_before_contiguity_before_width():
    args = _ok_args()
    args.update(x=args["x"].float().t().contiguous().t(), weight=torch.zeros(5, 24))
    with pytest.raises(RuntimeError, match=r"^Only BF16 and FP16 are supported$"):
        emu.NpuCausalConv1d()(**args)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("width", [2, 3, 4])
@pytest.mark.parametrize("dim", [8, 24, 40])   # no dim % 16 rule
def test_aclnn_accepts_both_half_dtypes_every_width_any_dim(dtype, width, dim):
    gen, pool, weight = _case(width, dim, dtype=dtype, seed=width * dim)
    x, qsl = _varlen(gen, [4, 1], dim, dtype)
    out = emu.NpuCausalConv1d()(x, weight, pool, query_start_loc=qsl, cache_indices=torch.tensor([0, 3]),
                                has_initial_state=torch.tensor([True, False]))
    assert out.shape == x.shape and out.dtype == dtype and not torch.isnan(out).any()


def test_aclnn_bias_dtype_unchecked_so_another_dtype_is_a_reinterpretation():
    args = _ok_args()
    emu.NpuCausalConv1d()(**args, bias=torch.zeros(24, dtype=H))          # same dtype: fine
    with pytest.raises(EmulatorContractViolation, match="bias"):
        emu.NpuCausalConv1d()(**_ok_args(), bias=torch.zeros(24, dtype=torch.float32))


# --------------------------------------------------------------------------- aclnn: semantics


@pytest.mark.parametrize("width", [2, 3, 4])
@pytest.mark.parametrize("his", [None, [True, False, True, True]])
@pytest.mark.parametrize("silu", [False, True])
def test_aclnn_prefill_matches_oracle_state_rows_zero_to_w_minus_1(width, his, silu):
    extra = 2                                           # rows >= W-1 exist but are never used
    gen, pool, weight = _case(width, 24, slots=6, state_len=width - 1 + extra, seed=width)
    x, qsl = _varlen(gen, [5, 0, 2, 1], 24)
    idx = torch.tensor([4, 1, -1, 0])
    bias = torch.randn(24, generator=gen).half()
    his_t = None if his is None else torch.tensor(his)
    before = pool.clone()
    out = emu.NpuCausalConv1d()(x, weight, pool, bias=bias, query_start_loc=qsl, cache_indices=idx,
                                has_initial_state=his_t, activation_mode=int(silu), run_mode=0)
    view = before[:, :width - 1].transpose(1, 2)         # the op's state: rows [0, W-1)
    expect, scale, new_view = naive_causal_conv1d_fn(x.t(), weight.t(), bias, qsl, idx, his_t, view, silu)
    assert_close_to_oracle(out.t(), expect, scale, H, "aclnn prefill")
    assert torch.equal(pool[:, :width - 1], new_view.transpose(1, 2))
    assert torch.equal(pool[:, width - 1:], before[:, width - 1:])      # rows >= W-1 untouched
    assert torch.isnan(out[5:7]).all()                   # pad sequence: rows left uninitialised
    for slot in (1, 2, 3, 5):                             # zero-length, pad, outside the batch
        assert torch.equal(pool[slot], before[slot])


@pytest.mark.parametrize("his", [[True], [False], None])
def test_aclnn_zero_length_sequence_never_writes_its_slot(his):
    gen, pool, weight = _case(3)
    x, qsl = _varlen(gen, [0, 2], 24)
    before = pool.clone()
    his_t = None if his is None else torch.tensor(his + [True])
    emu.NpuCausalConv1d()(x, weight, pool, query_start_loc=qsl, cache_indices=torch.tensor([2, 4]),
                          has_initial_state=his_t)
    assert torch.equal(pool[2], before[2]) and not torch.equal(pool[4], before[4])


def test_aclnn_run_mode_1_always_uses_the_state_and_ignores_has_initial_state():
    gen, pool, weight = _case(4)
    x, qsl = _varlen(gen, [1, 1], 24)
    a, b = pool.clone(), pool.clone()
    out_a = emu.NpuCausalConv1d()(x, weight, a, query_start_loc=qsl, cache_indices=torch.tensor([1, 2]),
                                  has_initial_state=torch.tensor([False, False]), run_mode=1)
    out_b = emu.NpuCausalConv1d()(x, weight, b, query_start_loc=qsl, cache_indices=torch.tensor([1, 2]),
                                  run_mode=1)
    expect, scale, new = naive_causal_conv1d_update(
            x, pool[:, :3].transpose(1, 2), weight.t(), None, torch.tensor([1, 2]),
                                       False)
    assert torch.equal(out_a, out_b) and torch.equal(a, b)
    assert_close_to_oracle(out_a, expect, scale, H, "run_mode 1")
    assert torch.equal(a, new.transpose(1, 2))


def test_aclnn_batch_mode_3d_input_and_no_cache_indices_uses_slot_b():
    gen, pool, weight = _case(3, slots=3)
    x = torch.randn(2, 3, 24, generator=gen).half()
    before = pool.clone()
    out = emu.NpuCausalConv1d()(x, weight, pool, run_mode=1, activation_mode=1)
    expect, scale, new = naive_causal_conv1d_update(
            x.transpose(1, 2), before.transpose(1, 2), weight.t(), None, None, True)
    assert_close_to_oracle(out.transpose(1, 2), expect, scale, H, "3d")
    assert torch.equal(pool[:2], new.transpose(1, 2)[:2]) and torch.equal(pool[2], before[2])


def test_aclnn_spec_window_offset_and_write_back_for_width_4():
    """run_mode 1, num_accepted_tokens, W == 4: history rows [a-1, a+2), rows 0,1 <- rows a, a+1,
    tokens from row 2 (KERN InitRing / WriteBackStateSpec)."""
    gen, pool, weight = _case(4, slots=2, state_len=5)
    x = torch.randn(2, 24, generator=gen).half()
    qsl = torch.tensor([0, 2], dtype=torch.int32)
    before = pool.clone()
    out = emu.NpuCausalConv1d()(x, weight, pool, query_start_loc=qsl, cache_indices=torch.tensor([1]),
                                num_accepted_tokens=torch.tensor([2]), run_mode=1)
    hist = before[1, 1:4]
    expect, scale, _ = naive_causal_conv1d_update(x.t()[None], hist.t()[None], weight.t(), None, None, False)
    assert_close_to_oracle(out.t()[None], expect, scale, H, "spec")
    assert torch.equal(pool[1, 0:2], before[1, 2:4]) and torch.equal(pool[1, 2:4], x)
    assert torch.equal(pool[1, 4], before[1, 4]) and torch.equal(pool[0], before[0])
    # offset clamps to state_len - 3; width 3 and run_mode 0 ignore num_accepted_tokens
    c = before.clone()
    emu.NpuCausalConv1d()(x, weight, c, query_start_loc=qsl, cache_indices=torch.tensor([1]),
                          num_accepted_tokens=torch.tensor([2]), run_mode=0)
    d = before.clone()
    emu.NpuCausalConv1d()(x, weight, d, query_start_loc=qsl, cache_indices=torch.tensor([1]), run_mode=0)
    assert torch.equal(c, d)


def test_racing_slots_leave_their_rows_and_outputs_unspecified():
    """Two processed sequences on one slot (SGLang's graph padding does this with slot 0):
    parallel blocks race, so the written rows and both outputs are NaN; other slots are exact."""
    gen, pool, weight = _case(3, state_len=4)
    x, qsl = _varlen(gen, [2, 1, 1], 24)
    before = pool.clone()
    out = emu.NpuCausalConv1d()(x, weight, pool, query_start_loc=qsl, cache_indices=torch.tensor([0, 5, 0]),
                                has_initial_state=torch.tensor([True, True, True]))
    assert torch.isnan(out[[0, 1, 3]]).all() and not torch.isnan(out[2]).any()
    assert torch.isnan(pool[0, :2]).all() and torch.equal(pool[0, 2:], before[0, 2:])
    assert not torch.isnan(pool[5]).any()
    x1 = torch.randn(3, 24, generator=gen).half()
    pool1 = before.clone()
    out1 = emu.emulate_causal_conv1d_update_v2(x1, pool1, weight, conv_state_indices=torch.tensor([0, 0, 4]))
    assert torch.isnan(out1[:2]).all() and not torch.isnan(out1[2]).any()
    assert torch.isnan(pool1[0, :2]).all() and torch.equal(pool1[0, 2:], before[0, 2:])


@pytest.mark.parametrize("idx,pad,why", [
    ([1, 6], -1, "outside"),
    ([1, -1], -2, "outside"),        # -1 is not the pad id here: an out-of-bounds read
])
def test_aclnn_out_of_bounds_slots_are_violations(idx, pad, why):
    gen, pool, weight = _case(3)
    x, qsl = _varlen(gen, [2, 1], 24)
    before = pool.clone()
    with pytest.raises(EmulatorContractViolation, match=why):
        emu.NpuCausalConv1d()(x, weight, pool, query_start_loc=qsl, cache_indices=torch.tensor(idx),
                              pad_slot_id=pad)
    assert torch.equal(pool, before)


@pytest.mark.parametrize("qsl", [[0, 2, 9], [0, 3, 2], [-1, 2, 3]])
def test_aclnn_offsets_outside_x_are_violations(qsl):
    gen, pool, weight = _case(3)
    x, _ = _varlen(gen, [2, 1], 24)
    with pytest.raises(EmulatorContractViolation, match="query_start_loc"):
        emu.NpuCausalConv1d()(x, weight, pool, query_start_loc=torch.tensor(qsl, dtype=torch.int32),
                              cache_indices=torch.tensor([0, 1]))


def test_aclnn_tiling_cache_omits_the_dtype():
    """Same shape in the other dtype on one process instance: the wrong kernel instantiation."""
    op = emu.NpuCausalConv1d()
    op(**_ok_args(torch.float16))
    op(**_ok_args(torch.float16))                                   # same dtype again: fine
    with pytest.raises(EmulatorContractViolation, match="omits the dtype"):
        op(**_ok_args(torch.bfloat16))
    emu.NpuCausalConv1d()(**_ok_args(torch.bfloat16))               # a fresh process: fine
    args = _ok_args(torch.bfloat16)
    args["cache_indices"] = None                                    # another key: fine
    op(**args)


# --------------------------------------------------------------------------- released causal_conv1d_update_v2


def test_update_v2_overwrites_its_x_in_place_and_keeps_pad_rows_as_x():
    gen, pool, weight = _case(3)
    x = torch.randn(3, 24, generator=gen).half()
    x_in = x.clone()
    idx = torch.tensor([2, -1, 4], dtype=torch.int32)
    before = pool.clone()
    out = emu.emulate_causal_conv1d_update_v2(x, pool, weight, conv_state_indices=idx)
    assert out.data_ptr() == x.data_ptr() and not torch.equal(x, x_in)       # overwritten
    assert torch.equal(out[1], x_in[1])                                       # pad row keeps x
    expect, scale, new = naive_causal_conv1d_update(x_in, before.transpose(1, 2), weight.t(), None, idx, False)
    assert_close_to_oracle(out, expect, scale, H, "update_v2")
    assert torch.equal(pool, new.transpose(1, 2))


def test_update_v2_other_dtype_x_is_converted_so_the_caller_keeps_it():
    gen, pool, weight = _case(2)
    x = torch.randn(2, 24, generator=gen)
    x_in = x.clone()
    out = emu.emulate_causal_conv1d_update_v2(x, pool, weight, conv_state_indices=torch.tensor([0, 1]))
    assert torch.equal(x, x_in) and out.dtype == torch.float32


def test_update_v2_uses_rows_zero_to_w_minus_1_of_a_strided_state():
    gen, pool, weight = _case(3, state_len=4)
    x = torch.randn(1, 24, generator=gen).half()
    before = pool.clone()
    emu.emulate_causal_conv1d_update_v2(x.clone(), pool, weight, conv_state_indices=torch.tensor([5]))
    assert torch.equal(pool[5, :2], torch.cat([before[5, 1:2], x])) and torch.equal(pool[5, 2:], before[5, 2:])


def test_update_v2_casts_history_to_fp16_inside():
    """bf16 history beyond the fp16 range becomes inf (PY: ``.to(tl.float16)``)."""
    gen, pool, weight = _case(2, dtype=torch.bfloat16)
    pool[0, 0] = 1e6
    out = emu.emulate_causal_conv1d_update_v2(torch.zeros(1, 24, dtype=torch.bfloat16), pool,
                                             torch.ones(2, 24, dtype=torch.bfloat16),
                                             conv_state_indices=torch.tensor([0]))
    assert torch.isinf(out).all()


def test_update_v2_needs_indices_and_in_range_slots():
    gen, pool, weight = _case(3)
    x = torch.randn(2, 24, generator=gen).half()
    for idx in (None, torch.tensor([0, 9]), torch.tensor([1, -2])):
        with pytest.raises(EmulatorContractViolation):
            emu.emulate_causal_conv1d_update_v2(x.clone(), pool, weight, conv_state_indices=idx)


# --------------------------------------------------------------------------- unmerged v2 branch


def test_v2_branch_skips_pads_and_refuses_what_is_not_known():
    gen, pool, weight = _case(3)
    x, qsl = _varlen(gen, [2, 3], 24)
    before = pool.clone()
    out = emu.emulate_causal_conv1d_fn_v2(x.t().contiguous(), weight.t().contiguous(), None, qsl,
                                          torch.tensor([-1, 4]), torch.tensor([False, True]), pool, None)
    assert torch.isnan(out[:, :2]).all() and torch.equal(pool[:4], before[:4])
    x0, qsl0 = _varlen(gen, [0, 2], 24)
    with pytest.raises(EmulatorContractViolation, match="zero-length"):
        emu.emulate_causal_conv1d_fn_v2(x0.t().contiguous(), weight.t().contiguous(), None, qsl0,
                                        torch.tensor([1, 2]), None, pool, None)
    _, wide, _ = _case(3, state_len=4)
    with pytest.raises(EmulatorContractViolation, match="window-major pool"):
        emu.emulate_causal_conv1d_update_npu_v2(torch.zeros(1, 24, dtype=H), wide, weight.t(), None, None,
                                                torch.tensor([0]))
    with pytest.raises(EmulatorContractViolation, match="dtype"):
        emu.emulate_causal_conv1d_update_npu_v2(torch.zeros(1, 24), pool, weight.t(), None, None,
                                                torch.tensor([0]))


# --------------------------------------------------------------------------- factory


@pytest.mark.parametrize("name", sorted(emu.VARIANTS))
def test_factory_variants_expose_exactly_the_present_ops(name):
    flags = emu.VARIANTS[name]
    table = emu.emulators(**flags)
    assert (emu.OP_ACLNN in table) == flags["conv_op"]
    assert (emu.OP_FN_V2 in table) == (emu.OP_UPDATE_V2 in table) == flags["v2_branch"]
    assert (emu.OP_UPDATE_V2_MAIN in table) == flags["update_v2"]
    if flags["conv_op"]:
        assert table[emu.OP_ACLNN] is not emu.emulators(**flags)[emu.OP_ACLNN]   # fresh tiling cache
