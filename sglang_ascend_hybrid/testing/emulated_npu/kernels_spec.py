"""CPU emulators of the speculative-decoding device ops SGLang's EAGLE / NEXTN / STANDALONE workers call on NPU.

Part of the emulated Ascend NPU device: every "npu" tensor there is a CPU tensor, so each emulator is
plain torch.  ``TORCH_OPS_NPU`` maps ``torch.ops.npu.<name>``; ``OPS`` maps
``"sgl_kernel_npu.<module>:<attr>"`` (exactly as SGLang imports it).

Source: sgl-project/sgl-kernel-npu at commit f425bdf1e191a7682296d3b2ed0b927d4e37d671:

- ``torch.ops.npu.build_tree_kernel_efficient``: ``csrc/build_tree/op_host/build_tree.cpp`` (host checks,
  tiling) and ``csrc/build_tree/op_kernel/build_tree_kernel.cpp`` (the AscendC kernel);
- ``torch.ops.npu.cache_loc_update``: ``csrc/cache_location_assign/op_host/cache_loc_assign.cpp`` and
  ``csrc/cache_location_assign/op_kernel/cache_loc_assign_kernel.cpp`` (``MAX_STEP`` from
  ``op_host/tiling/cache_loc_assign.h``);
- ``sgl_kernel_npu.sample.verify_tree_greedy:verify_tree_greedy``:
  ``python/sgl_kernel_npu/sgl_kernel_npu/sample/verify_tree_greedy.py`` (a Triton kernel);
- ``sgl_kernel_npu.mamba.mamba_state_update_triton:conv_state_rollback``:
  ``python/sgl_kernel_npu/sgl_kernel_npu/mamba/mamba_state_update_triton.py`` (a Triton kernel).

The host's own checks are copied in the host's order, with its exception types (``std::invalid_argument``
-> ``ValueError``, ``std::runtime_error`` -> ``RuntimeError``).  The kernels address every tensor with
offsets computed from their integer arguments (not the tensors' strides), so where a tensor's shape or
layout disagrees with those offsets, or the kernel would read out of bounds or leave output unwritten,
the emulator raises (``ValueError`` naming argument, value and expectation) instead of guessing.

SGLang call sites (0.5.23): ``kernels/ops/speculative/spec_tree.py`` (``build_tree_kernel_efficient_func``,
``verify_tree_greedy_func``), ``kernels/ops/speculative/cache_locs.py`` (``assign_extend_cache_locs_func``),
``srt/hardware_backend/npu/attention/ascend_hybrid_linear_attn_backend.py``
(``update_mamba_state_after_mtp_verify``: ``conv_state_rollback``; the plugin's short-conv backend calls the
same binding for its further conv states).

Not emulated (greedy requests never reach them; SGLang imports them at module top of
``kernels/ops/speculative/verify_sampling.py``): ``sgl_kernel_npu.sample:chain_speculative_sampling_triton``,
``sgl_kernel_npu.sample:tree_speculative_sampling_target_only`` (sampling with temperature > 0).
"""

from __future__ import annotations

from typing import Callable

import torch

SGL_KERNEL_NPU_COMMIT = "f425bdf1e191a7682296d3b2ed0b927d4e37d671"

# csrc/build_tree/op_host/build_tree_tiling.h
FULL_MASK, QLEN_ONLY, QLEN_ONLY_BITPACKING = 0, 1, 2
# csrc/cache_location_assign/op_host/tiling/cache_loc_assign.h
MAX_STEP = 16
# Unified buffer of one Atlas A3 vector core (the emulated machine, surface.CHIP), bytes.
UB_SIZE_A3 = 192 * 1024


def _require_tensor(name: str, t) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    return t


def _require_layout(name: str, t: torch.Tensor, shape: tuple, why: str) -> None:
    """The kernel addresses ``t`` as a contiguous buffer of ``shape`` (leading elements only)."""
    if t.numel() < _prod(shape):
        raise ValueError(f"{name}: the kernel reads/writes {_prod(shape)} elements laid out as {shape} ({why}), "
                         f"got shape {tuple(t.shape)}")
    if not t.is_contiguous():
        raise ValueError(f"{name}: expected a contiguous tensor ({why}), got shape {tuple(t.shape)} "
                         f"strides {t.stride()}")


def _prod(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


# ----------------------------------------------------------------------------- build_tree_kernel_efficient


def build_tree_kernel_efficient(parent_list, selected_index, verified_seq_len, tree_mask, positions,
                                retrive_index, retrive_next_token, retrive_next_sibling,
                                topk: int, depth: int, draft_token_num: int, tree_mask_mode: int) -> None:
    """``torch.ops.npu.build_tree_kernel_efficient`` (host ``build_tree_efficient``): writes ``tree_mask``,
    ``positions``, ``retrive_index``, ``retrive_next_token``, ``retrive_next_sibling`` in place.

    Host checks, in order: ``tree_mask_mode == QLEN_ONLY_BITPACKING`` -> "Not implemented"
    (``std::runtime_error``); every tensor's dtype (int64, int64, int64, bool, int64, int64, int64,
    int64; ``std::invalid_argument``).  The kernel then walks each request ``bs`` sequentially:

    - ``retrive_next_token`` / ``retrive_next_sibling`` rows start at -1; for ``i`` from
      ``draft_token_num - 1`` down to 1: ``retrive_index[bs, i] = bs * draft_token_num + i``; the
      parent of draft ``i`` is ``selected_index[bs, i-1] // topk``; if that is > 0 its token
      ``parent_list[bs, parent]`` is searched in ``selected_index[bs]`` (position + 1), else position 0;
      not found -> skipped; found -> ``i`` becomes the parent's first child, the former first child
      its next sibling.  ``retrive_index[bs, 0] = bs * draft_token_num``, ``positions[bs, 0] = seq_len``.
    - each ``tid`` > 0 walks to the root, marking ``mask[1 + cur]`` true at each ancestor,
      ``positions[bs, tid] = seq_len + depth_of(tid)``; the mask row of ``draft_token_num`` bools
      (column 0 true) goes to ``tree_mask[token_tree_idx:]`` where FULL_MASK's
      ``token_tree_idx = sum(seq_len[:bs]) * n + n*n*bs + (seq_len + n) * tid + seq_len`` (the
      ``[0, seq_len)`` prefix columns are not written: the caller fills them) and QLEN_ONLY's is
      ``n*n*bs + n*bs`` -- independent of ``tid`` in the kernel (every row of a request written to the
      same place, the last wins), which the emulator copies.
    """
    # host: build_tree.cpp build_tree_efficient
    if int(tree_mask_mode) == QLEN_ONLY_BITPACKING:
        raise RuntimeError("Not implemented")
    names = ("parent_list", "selected_index", "verified_seq_len", "tree_mask", "positions", "retrive_index",
             "retrive_next_token", "retrive_next_sibling")
    tensors = (parent_list, selected_index, verified_seq_len, tree_mask, positions, retrive_index,
               retrive_next_token, retrive_next_sibling)
    expected = (torch.int64,) * 3 + (torch.bool,) + (torch.int64,) * 4
    for name, t in zip(names, tensors):
        _require_tensor(name, t)
    if any(t.dtype != dt for t, dt in zip(tensors, expected)):
        raise ValueError("Invalid input datetype. "
                         "Support combo: int64, int64, int64, bool, int64, int64, int64, int64")
    if int(tree_mask_mode) not in (FULL_MASK, QLEN_ONLY):
        raise ValueError(f"tree_mask_mode={tree_mask_mode}: the kernel knows FULL_MASK (0) and QLEN_ONLY (1)")

    topk, depth, n = int(topk), int(depth), int(draft_token_num)
    batch_size = int(parent_list.shape[0])  # host: parent_list.sizes()[0]
    # kernel Init: the buffers it addresses, from its integer arguments
    parent_width = topk * (depth - 1) + 1
    why = "the kernel addresses rows with a stride computed from topk / depth / draft_token_num"
    _require_layout("parent_list", parent_list, (batch_size, parent_width), why)
    _require_layout("selected_index", selected_index, (batch_size, n - 1), why)
    _require_layout("verified_seq_len", verified_seq_len, (batch_size,), why)
    for name, t in zip(names[4:], tensors[4:]):
        _require_layout(name, t, (batch_size, n), why)
    if topk <= 0 or depth <= 0 or n <= 0:
        raise ValueError(f"topk={topk}, depth={depth}, draft_token_num={n}: expected positive values")
    seq_lens = [int(v) for v in verified_seq_len.reshape(-1)[:batch_size].tolist()]
    if int(tree_mask_mode) == FULL_MASK:
        mask_need = sum(seq_lens) * n + n * n * batch_size
    else:
        mask_need = n * n * batch_size
    _require_layout("tree_mask", tree_mask, (mask_need,),
                    "the kernel writes mask rows at offsets from verified_seq_len")

    parents = parent_list.reshape(-1)[: batch_size * parent_width].view(batch_size, parent_width).tolist()
    selected = selected_index.reshape(-1)[: batch_size * (n - 1)].view(batch_size, max(n - 1, 0)).tolist()
    flat_mask = tree_mask.view(-1)
    pos_out = positions.view(-1)
    idx_out, next_out, sib_out = (t.view(-1) for t in (retrive_index, retrive_next_token, retrive_next_sibling))

    def read_parent(bs: int, j: int) -> int:
        if not 0 <= j < parent_width:
            raise ValueError(f"parent_list: the kernel reads column {j} of request {bs} (selected_index // topk), "
                             f"outside its {parent_width} columns")
        return parents[bs][j]

    for bs in range(batch_size):
        seq_len = seq_lens[bs]
        seq_tree_idx = n * n * bs + sum(seq_lens[:bs]) * n
        pos = [0] * n
        ridx = [0] * n
        rnext = [-1] * n
        rsib = [-1] * n
        sel = selected[bs]
        for tid in range(n):
            if int(tree_mask_mode) == FULL_MASK:
                token_tree_idx = seq_tree_idx + (seq_len + n) * tid + seq_len
            else:
                token_tree_idx = n * n * bs + n * bs  # the kernel's offset, independent of tid
            row = [True] + [False] * (n - 1)
            if tid == 0:
                pos[0] = seq_len
                for i in range(n - 1, 0, -1):
                    ridx[i] = bs * n + i
                    parent_tb_idx = sel[i - 1] // topk
                    parent_position = 0
                    if parent_tb_idx > 0:
                        parent_token_idx = read_parent(bs, parent_tb_idx)
                        while parent_position < n:
                            # the kernel reads selected_index[bs, parent_position] up to n - 1 (one past the
                            # row) when the token is not found before
                            if parent_position >= n - 1:
                                raise ValueError(
                                    f"selected_index: request {bs} parent token {parent_token_idx} is not in its "
                                    f"row; the kernel would read past the row")
                            if sel[parent_position] == parent_token_idx:
                                parent_position += 1
                                break
                            parent_position += 1
                    if parent_position == n:
                        continue
                    if rnext[parent_position] == -1:
                        rnext[parent_position] = i
                    else:
                        rsib[i] = rnext[parent_position]
                        rnext[parent_position] = i
                ridx[0] = bs * n
            else:
                position = 0
                cur = tid - 1
                while True:
                    position += 1
                    if position > n:
                        raise ValueError(f"selected_index / parent_list: request {bs} draft {tid} has a parent "
                                         "chain longer than the tree (the kernel would not terminate)")
                    if cur >= n - 1:
                        raise ValueError(f"selected_index: request {bs} draft {tid}: an ancestor token is not in "
                                         "its row; the kernel would write the mask and read past the row")
                    row[1 + cur] = True
                    parent_tb_idx = sel[cur] // topk
                    if parent_tb_idx == 0:
                        break
                    token_idx = read_parent(bs, parent_tb_idx)
                    cur = 0
                    while cur < n and not (cur < n - 1 and sel[cur] == token_idx):
                        cur += 1
                pos[tid] = position + seq_len
            flat_mask[token_tree_idx:token_tree_idx + n] = torch.tensor(row, dtype=torch.bool)
        base = bs * n
        pos_out[base:base + n] = torch.tensor(pos, dtype=torch.int64)
        idx_out[base:base + n] = torch.tensor(ridx, dtype=torch.int64)
        next_out[base:base + n] = torch.tensor(rnext, dtype=torch.int64)
        sib_out[base:base + n] = torch.tensor(rsib, dtype=torch.int64)


# ----------------------------------------------------------------------------- cache_loc_update


def cache_loc_update(req_pool_indices, token_pool, start_offset, end_offset, out_cache_loc):
    """``torch.ops.npu.cache_loc_update`` (host ``cache_loc_update``, kernel mode RETRIEVE_FROM_POOL):
    ``out_cache_loc`` packed with ``token_pool[req_pool_indices[i], start_offset[i]:end_offset[i]]`` for
    each request in order (request ``i`` starts at ``sum(end - start)`` of the requests before it).
    Returns ``out_cache_loc``.

    Host ``checkParams``: dtypes (int32|int64, int32, int64, int64, int32; ``std::invalid_argument``);
    ``getTiling``: the unified-buffer budget ``align32(MAX_STEP)*4 + 3*align8(bs)*8 + 3*bs*4 +
    align8(bs*MAX_STEP)*4 <= UB`` ("Batch size is too large ...").  The kernel copies ``MAX_STEP`` (16)
    pool entries per request, so ``end - start`` above 16 would pack uninitialised data: raised.

    Upstream defect, not reproduced: the kernel reads and writes back ``bs * MAX_STEP`` int32 of
    ``out_cache_loc`` (``cacheLocSize``) whatever its length; past the tensor's elements it rewrites the
    bytes it read (on a device they land in the caching allocator's block padding or a neighbour).  The
    emulator touches only the tensor's own elements.
    """
    names = ("req_pool_indices", "token_pool", "start_offset", "end_offset", "out_cache_loc")
    for name, t in zip(names, (req_pool_indices, token_pool, start_offset, end_offset, out_cache_loc)):
        _require_tensor(name, t)
    # host: checkParams
    if (req_pool_indices.dtype not in (torch.int32, torch.int64) or token_pool.dtype != torch.int32
            or start_offset.dtype != torch.int64 or end_offset.dtype != torch.int64
            or out_cache_loc.dtype != torch.int32):
        raise ValueError("Only support inputTensor combo1: int64, int32, int64, int64, int32; combo2: "
                         "int32, int32, int64, int64, int32")
    # host: getTiling (sizes()[0] / sizes()[1] of the pool)
    if token_pool.dim() != 2:
        raise ValueError(f"token_pool: expected a 2-D [pool_size, row_size] tensor, "
                         f"got shape {tuple(token_pool.shape)}")
    batch_size = int(req_pool_indices.shape[0])
    pool_size, row_size = (int(s) for s in token_pool.shape)

    def align(count: int, elem: int) -> int:  # host_utils::alin*Count: elements filling whole 32-byte blocks
        per = 32 // elem
        return (count + per - 1) // per * per

    ub_use = (align(MAX_STEP, 4) * 4 + 3 * align(batch_size, 8) * 8 + 3 * batch_size * 4
              + align(batch_size * MAX_STEP, 4) * 4)
    if ub_use > UB_SIZE_A3:
        raise ValueError("Batch size is too large, buffer is not enough to do calculate")
    if batch_size == 0:
        return out_cache_loc  # rowNum == 0 on the single core: nothing written
    why = "the kernel addresses it as a flat buffer"
    _require_layout("req_pool_indices", req_pool_indices, (batch_size,), why)
    _require_layout("start_offset", start_offset, (batch_size,), why)
    _require_layout("end_offset", end_offset, (batch_size,), why)
    _require_layout("token_pool", token_pool, (pool_size, row_size), "rows addressed with stride row_size")
    if not out_cache_loc.is_contiguous():
        raise ValueError(f"out_cache_loc: expected a contiguous tensor, got strides {out_cache_loc.stride()}")

    reqs = [int(v) for v in req_pool_indices.tolist()]
    starts = [int(v) for v in start_offset.tolist()]
    ends = [int(v) for v in end_offset.tolist()]
    flat_pool = token_pool.view(-1)
    out = out_cache_loc.view(-1)
    cursor = 0
    for i, (req, start, end) in enumerate(zip(reqs, starts, ends)):
        step = end - start
        if not 0 <= step <= MAX_STEP:
            raise ValueError(f"end_offset - start_offset = {step} for request {i}: the kernel copies at most "
                             f"MAX_STEP={MAX_STEP} pool entries per request")
        if not 0 <= req < pool_size or start < 0 or req * row_size + end > flat_pool.numel():
            raise ValueError(f"request {i}: req_pool_indices={req}, [{start}, {end}) reads outside token_pool "
                             f"{tuple(token_pool.shape)}")
        if cursor + step > out.numel():
            raise ValueError(f"out_cache_loc: {out.numel()} elements, request {i} packs up to {cursor + step}")
        out[cursor:cursor + step] = flat_pool[req * row_size + start:req * row_size + end]
        cursor += step
    return out_cache_loc


# ----------------------------------------------------------------------------- verify_tree_greedy


def verify_tree_greedy(predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
                       retrive_next_sibling, target_predict) -> None:
    """``sgl_kernel_npu.sample.verify_tree_greedy.verify_tree_greedy`` (one Triton program per request).

    The NPU kernel ignores ``retrive_next_token`` / ``retrive_next_sibling``: it walks the draft tokens
    as a chain, accepting ``candidates[b, i]`` while it equals ``target_predict[b, i - 1]`` (positions
    in the flattened row, not tree parents: exact for topk 1).  ``accept_index[b, 0] =
    retrive_index[b, 0]``, each accepted draft appends its ``retrive_index``, ``predicts`` at every
    accepted index gets the target token, the last accepted index gets
    ``target_predict[b, last - n*b]``, ``accept_token_num[b]`` the count.  ``accept_index`` rows are
    addressed with stride ``num_draft_tokens`` (the caller's ``[bs, spec_steps + 1]``), other entries
    are left as they were.
    """
    names = ("predicts", "accept_index", "accept_token_num", "candidates", "retrive_index", "target_predict")
    for name, t in zip(names, (predicts, accept_index, accept_token_num, candidates, retrive_index, target_predict)):
        _require_tensor(name, t)
    bs, n = int(candidates.shape[0]), int(candidates.shape[1])
    why = "the Triton kernel addresses row b at b * num_draft_tokens"
    for name, t in (("candidates", candidates), ("retrive_index", retrive_index), ("target_predict", target_predict),
                    ("accept_index", accept_index)):
        _require_layout(name, t, (bs, n), why)
    _require_layout("accept_token_num", accept_token_num, (bs,), why)
    cand = candidates.reshape(-1)[: bs * n].view(bs, n).tolist()
    ridx = retrive_index.reshape(-1)[: bs * n].view(bs, n).tolist()
    target = target_predict.reshape(-1)[: bs * n].view(bs, n).tolist()
    acc = accept_index.view(-1)
    pred = predicts.view(-1)
    for b in range(bs):
        last = int(ridx[b][0])
        acc[b * n] = last
        num_accepted = 0
        for i in range(1, n):
            if cand[b][i] != target[b][i - 1]:
                break
            if not 0 <= last < pred.numel():
                raise ValueError(f"predicts: retrive_index {last} outside its {pred.numel()} elements")
            pred[last] = target[b][i - 1]
            num_accepted += 1
            acc[b * n + num_accepted] = int(ridx[b][i])
            last = int(ridx[b][i])
        col = last - n * b
        if not 0 <= col < n or not 0 <= last < pred.numel():
            raise ValueError(f"retrive_index: request {b} accepted index {last} is not in its row "
                             f"[{n * b}, {n * b + n}) (the kernel reads target_predict at last - n*b)")
        accept_token_num.view(-1)[b] = num_accepted
        pred[last] = target[b][col]


# ----------------------------------------------------------------------------- conv_state_rollback


def conv_state_rollback(conv_states, state_indices, step_indices, draft_token_num: int):
    """``sgl_kernel_npu.mamba.mamba_state_update_triton.conv_state_rollback``: for each request with
    ``step >= 0`` and ``shift = (draft_token_num - 1) - step > 0``, every layer's window rows
    ``[0, W - shift)`` of slot ``state_indices[i]`` move to ``[shift, W)`` (top row first, so in place);
    rows ``[0, shift)`` keep their values.  ``conv_states``: ``[num_layers, pool_size, W, num_dims]``.

    Checks in the wrapper's order: no requests -> nothing; ``conv_states`` 4-D; indices 1-D; same length
    (``ValueError``).  Then, where the kernel would not do what its caller asks:

    - a non-contiguous ``conv_states``: the wrapper runs the kernel on ``conv_states.contiguous()``, a copy,
      and the caller's tensor is never updated -> raised;

    ``num_dims`` is not required to be a power of two although the kernel runs ``tl.arange(0, num_dims)``
    (upstream Triton refuses a non-power-of-two range; whether triton-ascend does is not checked here):
    the seed deployment (Qwen3.6-27B at TP=2 with NEXTN, conv dim 5120 per rank) reaches this kernel.

    The indices go through ``.to(torch.int32)``; a state index outside the pool -> raised (out of bounds).
    Returns ``conv_states``.
    """
    _require_tensor("conv_states", conv_states)
    _require_tensor("state_indices", state_indices)
    _require_tensor("step_indices", step_indices)
    num_requests = int(state_indices.shape[0])
    if num_requests == 0:
        return None
    if conv_states.ndim != 4:
        raise ValueError(f"conv_states must be 4D, got {conv_states.ndim}D")
    if state_indices.ndim != 1 or step_indices.ndim != 1:
        raise ValueError("state_indices and step_indices must be 1D")
    if state_indices.shape[0] != step_indices.shape[0]:
        raise ValueError("state_indices and step_indices must have the same length")
    num_layers, pool_size, window, num_dims = (int(s) for s in conv_states.shape)
    if not conv_states.is_contiguous():
        raise ValueError(f"conv_states: not contiguous (strides {conv_states.stride()}): the wrapper would roll "
                         "back a contiguous copy and leave the caller's tensor unchanged")
    slots = state_indices.to(torch.int32).tolist()
    steps = step_indices.to(torch.int32).tolist()
    for i, (slot, step) in enumerate(zip(slots, steps)):
        if step < 0:
            continue
        shift = (int(draft_token_num) - 1) - step
        if shift <= 0:
            continue
        if not 0 <= slot < pool_size:
            raise ValueError(f"state_indices[{i}]={slot}: outside the pool of {pool_size} slots")
        if shift < window:
            rows = conv_states[:, slot, : window - shift].clone()
            conv_states[:, slot, shift:] = rows
    return conv_states


TORCH_OPS_NPU: dict[str, Callable] = {
    "build_tree_kernel_efficient": build_tree_kernel_efficient,
    "cache_loc_update": cache_loc_update,
}

TORCH_NPU: dict[str, Callable] = {}

OPS: dict[str, Callable] = {
    "sgl_kernel_npu.sample.verify_tree_greedy:verify_tree_greedy": verify_tree_greedy,
    "sgl_kernel_npu.mamba.mamba_state_update_triton:conv_state_rollback": conv_state_rollback,
}
