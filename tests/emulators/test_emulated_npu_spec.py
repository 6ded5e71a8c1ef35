"""The emulated NPU's speculative-decoding ops agree with SGLang's own Triton forms of the same ops.

References (run on CPU under ``TRITON_INTERPRET=1``): ``sgl_build_tree_kernel_triton``,
``verify_tree_greedy_triton`` (``kernels/ops/speculative/spec_tree.py``) and the
``assign_extend_cache_locs`` Triton kernel (``kernels/ops/speculative/cache_locs.py``).  Draft trees
come from SGLang's own tree bookkeeping (``organize_draft_results``) over random draft scores.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.base_release_only

_MODULE_PATH = (Path(__file__).resolve().parents[2] / "sglang_ascend_hybrid" / "testing" / "emulated_npu"
                / "kernels_spec.py")


def _load_module():
    spec = importlib.util.spec_from_file_location("emulated_npu_kernels_spec", _MODULE_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


emu = _load_module()

needs_triton_interpreter = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1",
    reason="SGLang's Triton reference runs on CPU only under TRITON_INTERPRET=1")


def _draft_tree(bs: int, topk: int, steps: int, num_draft: int, seed: int):
    """``(parent_list, top_scores_index)`` as SGLang's draft loop builds them (``_select_top_k_tokens_*``
    in ``srt/speculative/spec_utils.py``, then ``organize_draft_results``), from random draft scores."""
    from sglang.srt.speculative.eagle_utils import organize_draft_results

    g = torch.Generator().manual_seed(seed)
    vocab = 50
    score_list, token_list, parents_list = [], [], []
    scores = None
    for i in range(steps):
        rows = bs if i == 0 else bs * topk
        probs = torch.softmax(torch.randn(rows, vocab, generator=g), dim=-1)
        topk_p, topk_index = probs.topk(topk, dim=-1)
        if i == 0:
            score_list.append(topk_p.unsqueeze(1))
            token_list.append(topk_index)
            parents_list.append(torch.arange(-1, topk, dtype=torch.long).expand(bs, -1))
            scores = topk_p
        else:
            expand = scores.unsqueeze(2) * topk_p.view(-1, topk, topk)
            cs_p, cs_index = expand.flatten(1).topk(topk, dim=-1)
            score_list.append(expand)
            token_list.append(topk_index.view(-1, topk * topk))
            parents_list.append(cs_index + (topk * topk * (i - 1) + topk))
            scores = cs_p
    parent_list, top_scores_index, _ = organize_draft_results(score_list, token_list, parents_list, num_draft)
    return parent_list.to(torch.int64).contiguous(), top_scores_index.contiguous()


def _tree_outputs(bs: int, n: int, seq_lens: torch.Tensor, mode: int):
    if mode == emu.FULL_MASK:
        mask = torch.full((int(seq_lens.sum()) * n + n * n * bs,), True)
    else:
        mask = torch.full((n * n * bs,), True)
    retrieve = torch.full((3, bs, n), -1, dtype=torch.long)
    return mask, torch.empty(bs * n, dtype=torch.long), retrieve


@needs_triton_interpreter
@pytest.mark.parametrize("bs,topk,steps,num_draft", [(1, 1, 3, 4), (3, 1, 3, 4), (2, 2, 3, 5), (2, 4, 4, 8)])
def test_build_tree_full_mask_matches_sglang_triton(bs, topk, steps, num_draft):
    from sglang.kernels.ops.speculative.spec_tree import TreeMaskMode, sgl_build_tree_kernel_triton

    parent_list, selected = _draft_tree(bs, topk, steps, num_draft, seed=bs + topk)
    seq_lens = torch.tensor([5, 9, 2][:bs], dtype=torch.int64)
    got_mask, got_pos, got_ret = _tree_outputs(bs, num_draft, seq_lens, emu.FULL_MASK)
    ref_mask, ref_pos, ref_ret = _tree_outputs(bs, num_draft, seq_lens, emu.FULL_MASK)
    emu.build_tree_kernel_efficient(parent_list, selected, seq_lens, got_mask, got_pos, *got_ret,
                                    topk, steps, num_draft, emu.FULL_MASK)
    sgl_build_tree_kernel_triton(parent_list, selected, seq_lens, ref_mask, ref_pos, *ref_ret,
                                 topk, steps, num_draft, TreeMaskMode.FULL_MASK)
    assert torch.equal(got_mask, ref_mask)
    assert torch.equal(got_pos, ref_pos)
    assert torch.equal(got_ret, ref_ret)
    if topk == 1:  # a chain: depth i at position seq_len + i, each draft the next one's parent
        chain = torch.arange(num_draft)
        assert torch.equal(got_pos.view(bs, -1), seq_lens.view(-1, 1) + chain)
        assert torch.equal(got_ret[1][:, :-1], chain[1:].expand(bs, -1))


def test_build_tree_qlen_only_copies_the_kernels_row_offset():
    """The AscendC kernel writes every QLEN_ONLY row of request ``bs`` at ``n*n*bs + n*bs`` (not
    ``+ n*tid``): the last draft's row lands there, the other rows keep the caller's fill."""
    n, bs = 4, 1
    parent_list, selected = _draft_tree(bs, 1, 3, n, seed=0)
    seq_lens = torch.tensor([6], dtype=torch.int64)
    mask, pos, ret = _tree_outputs(bs, n, seq_lens, emu.QLEN_ONLY)
    emu.build_tree_kernel_efficient(parent_list, selected, seq_lens, mask, pos, *ret, 1, 3, n, emu.QLEN_ONLY)
    assert mask[:n].tolist() == [True] * n  # the last draft of a chain sees every earlier one
    assert mask[n:].all()  # untouched fill


def test_build_tree_host_checks():
    n, bs = 4, 1
    parent_list, selected = _draft_tree(bs, 1, 3, n, seed=0)
    seq_lens = torch.tensor([3], dtype=torch.int64)
    mask, pos, ret = _tree_outputs(bs, n, seq_lens, emu.FULL_MASK)
    with pytest.raises(RuntimeError, match="Not implemented"):  # checked before the dtypes
        emu.build_tree_kernel_efficient(parent_list.int(), selected, seq_lens, mask, pos, *ret, 1, 3, n,
                                        emu.QLEN_ONLY_BITPACKING)
    with pytest.raises(ValueError, match="Invalid input datetype"):
        emu.build_tree_kernel_efficient(parent_list.int(), selected, seq_lens, mask, pos, *ret, 1, 3, n,
                                        emu.FULL_MASK)
    with pytest.raises(ValueError, match="tree_mask"):  # too short for the offsets seq_lens give
        emu.build_tree_kernel_efficient(parent_list, selected, seq_lens, mask[:-1], pos, *ret, 1, 3, n,
                                        emu.FULL_MASK)
    with pytest.raises(ValueError, match="selected_index"):  # rows addressed with stride n - 1
        emu.build_tree_kernel_efficient(parent_list, selected[:, :2], seq_lens, mask, pos, *ret, 1, 3, n,
                                        emu.FULL_MASK)


def _verify_inputs(bs: int, n: int, seed: int):
    """A chain (topk 1) draft per request and a target that accepts a different prefix of each."""
    g = torch.Generator().manual_seed(seed)
    candidates = torch.randint(0, 20, (bs, n), generator=g)
    target = torch.randint(20, 40, (bs, n), generator=g)  # never equal to a draft by default
    for b in range(bs):
        accept = b % n  # request b accepts b drafts (mod n)
        target[b, :accept] = candidates[b, 1:accept + 1]
    retrieve_index = torch.arange(bs * n).view(bs, n)
    next_token = torch.cat([torch.arange(1, n).expand(bs, -1), torch.full((bs, 1), -1)], dim=1)
    next_sibling = torch.full((bs, n), -1)
    return candidates, retrieve_index, next_token, next_sibling, target


@needs_triton_interpreter
@pytest.mark.parametrize("bs,n", [(1, 4), (5, 4), (3, 2)])
def test_verify_tree_greedy_matches_sglang_triton_on_chains(bs, n):
    from sglang.kernels.ops.speculative.spec_tree import verify_tree_greedy_triton

    candidates, ridx, rnext, rsib, target = _verify_inputs(bs, n, seed=bs)
    outs = []
    for fn in (emu.verify_tree_greedy, verify_tree_greedy_triton):
        predicts = torch.full((bs * n,), -7, dtype=torch.int32)
        accept_index = torch.full((bs, n), -1, dtype=torch.int32)
        accept_num = torch.full((bs,), -1, dtype=torch.int32)
        fn(predicts, accept_index, accept_num, candidates, ridx, rnext, rsib, target)
        outs.append((predicts, accept_index, accept_num))
    for got, ref in zip(*outs):
        assert torch.equal(got, ref)
    assert outs[0][2].tolist() == [b % n for b in range(bs)]


def test_verify_tree_greedy_addresses_accept_index_with_the_draft_stride():
    candidates, ridx, rnext, rsib, target = _verify_inputs(2, 4, seed=0)
    with pytest.raises(ValueError, match="accept_index"):
        emu.verify_tree_greedy(torch.zeros(8, dtype=torch.int32), torch.zeros(2, 3, dtype=torch.int32),
                               torch.zeros(2, dtype=torch.int32), candidates, ridx, rnext, rsib, target)


@needs_triton_interpreter
@pytest.mark.parametrize("req_dtype", [torch.int64, torch.int32])
def test_cache_loc_update_matches_sglang_triton(req_dtype):
    from sglang.kernels.ops.speculative.cache_locs import assign_extend_cache_locs

    g = torch.Generator().manual_seed(1)
    pool = torch.randint(0, 10_000, (6, 40), generator=g, dtype=torch.int32)
    req = torch.tensor([4, 0, 2], dtype=req_dtype)
    start = torch.tensor([3, 17, 0], dtype=torch.int64)
    end = start + torch.tensor([4, 4, 4])
    got = torch.full((12,), -1, dtype=torch.int32)
    ret = emu.cache_loc_update(req, pool, start, end, got)
    ref = torch.full((12,), -1, dtype=torch.int64)
    assign_extend_cache_locs[(3,)](req, pool, start, end, ref, pool.shape[1], 4)
    assert ret is got
    assert torch.equal(got.long(), ref)


def test_cache_loc_update_host_checks():
    pool = torch.zeros(2, 32, dtype=torch.int32)
    req = torch.tensor([1], dtype=torch.int64)
    start = torch.tensor([0], dtype=torch.int64)
    with pytest.raises(ValueError, match="Only support inputTensor combo1"):
        emu.cache_loc_update(req, pool, start, start + 4, torch.zeros(4, dtype=torch.int64))
    with pytest.raises(ValueError, match="MAX_STEP"):  # the kernel copies 16 pool entries per request
        emu.cache_loc_update(req, pool, start, start + 17, torch.zeros(17, dtype=torch.int32))
    big = torch.zeros(4096, dtype=torch.int64)
    with pytest.raises(ValueError, match="Batch size is too large"):
        emu.cache_loc_update(big, pool, big, big, torch.zeros(4096, dtype=torch.int32))


def _rollback_reference(states, slots, steps, n):
    """Per slot: window rows [0, W - shift) move to [shift, W), shift = (n - 1) - step (the kernel's loop)."""
    out = states.clone()
    window = states.shape[2]
    for slot, step in zip(slots.tolist(), steps.tolist()):
        shift = (n - 1) - step
        if step < 0 or shift <= 0:
            continue
        for w in range(window - shift - 1, -1, -1):  # top row first, as the kernel moves them
            out[:, slot, w + shift] = out[:, slot, w]
    return out


def test_conv_state_rollback_shifts_each_rejected_slot():
    g = torch.Generator().manual_seed(3)
    states = torch.randn(2, 6, 5, 8, generator=g)  # [layers, pool, window (state + drafts), dims]
    slots = torch.tensor([4, 1, 2, 0], dtype=torch.int64)
    steps = torch.tensor([0, 3, -1, 1], dtype=torch.int64)  # shift 3, none (all accepted), untracked, 2
    want = _rollback_reference(states, slots, steps, 4)
    got = states.clone()
    assert emu.conv_state_rollback(got, slots, steps, 4) is got
    assert torch.equal(got, want)
    assert torch.equal(got[:, 4, 3:], states[:, 4, :2]) and torch.equal(got[:, [1, 2, 3, 5]], states[:, [1, 2, 3, 5]])


def test_conv_state_rollback_refuses_what_the_kernel_would_not_update():
    states = torch.zeros(1, 2, 4, 8)
    idx = torch.tensor([0])
    assert emu.conv_state_rollback(states, idx[:0], idx[:0], 4) is None
    with pytest.raises(ValueError, match="must be 4D"):
        emu.conv_state_rollback(states[0], idx, idx, 4)
    with pytest.raises(ValueError, match="same length"):
        emu.conv_state_rollback(states, idx, torch.tensor([0, 0]), 4)
    with pytest.raises(ValueError, match="contiguous copy"):
        emu.conv_state_rollback(states.transpose(2, 3), idx, idx, 4)


def test_tables_name_the_ops_sglang_calls():
    assert set(emu.TORCH_OPS_NPU) == {"build_tree_kernel_efficient", "cache_loc_update"}
    assert set(emu.OPS) == {"sgl_kernel_npu.sample.verify_tree_greedy:verify_tree_greedy",
                            "sgl_kernel_npu.mamba.mamba_state_update_triton:conv_state_rollback"}
    assert emu.TORCH_NPU == {}
