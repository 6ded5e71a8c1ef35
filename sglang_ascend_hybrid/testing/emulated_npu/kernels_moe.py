"""CPU emulators of the Ascend MoE ops SGLang's NPU MoE path calls for an unquantised model.

Under the emulated NPU device every "npu" tensor is an ordinary CPU tensor, so each emulator is
plain torch. The ops are closed CANN (aclnn) kernels: op-plugin only holds the torch binding and
documentation, so every emulator follows the documented formula / "equivalent computation logic"
and is strict: each argument SGLang never passes, and each case the documentation leaves open,
raises ``ValueError`` / ``TypeError`` naming the argument, the value and what was expected.

Sources (all from github.com/Ascend/op-plugin, commit 517f2e7d0f202f38b76310706cb977ca2388ad21):
    docs/zh/custom_APIs/torch_npu/torch_npu-npu_moe_gating_top_k_softmax.md
    docs/zh/custom_APIs/torch_npu/torch_npu-npu_moe_gating_top_k.md
    docs/zh/custom_APIs/torch_npu/torch_npu-npu_moe_init_routing.md
    docs/zh/custom_APIs/torch_npu/torch_npu-npu_moe_init_routing_v2.md
    docs/zh/custom_APIs/torch_npu/torch_npu-npu_moe_compute_expert_tokens.md
    docs/zh/custom_APIs/torch_npu/torch_npu-npu_grouped_matmul.md
    docs/zh/custom_APIs/torch_npu/torch_npu-npu_moe_finalize_routing.md
    op_plugin/ops/opapi/*KernelNpuOpApi.cpp (argument checks and output allocation of each op)
    test/test_custom_ops/test_npu_moe_token_permute_and_unpermute.py (npu_moe_token_unpermute has
    no doc page; its upstream test gives the semantics)

SGLang call sites covered (identical in 0.5.20, 0.5.21, 0.5.22, 0.5.23):
    hardware_backend/npu/moe/topk.py          npu_moe_gating_top_k_softmax(logits, k=)  (softmax,
                                              no bias, ungrouped: Qwen3-Next / Qwen3.5-MoE)
                                              npu_moe_gating_top_k(fp32 logits, k=, bias=, k_group=,
                                              group_count=, group_select_mode=, renorm=, norm_type=,
                                              routed_scaling_factor=, eps=)  (sigmoid+bias: LFM2-MoE)
    hardware_backend/npu/moe/init_routing.py  npu_moe_init_routing_v2 (AscendTPDispatcher, bf16)
                                              npu_moe_init_routing + npu_moe_compute_expert_tokens
                                              (v1 class; also the deprecated fused_moe_npu)
    hardware_backend/npu/moe/matmul.py        npu_grouped_matmul(x=[x], weight=[w^T], split_item=2,
                                              group_list_type=0|1, group_type=0, group_list=, output_dtype=)
    hardware_backend/npu/moe/finalize_routing.py  npu_moe_finalize_routing(drop_pad_mode=0|2),
                                              npu_moe_token_unpermute(permuted_tokens=, sorted_indices=, probs=)
"""

from __future__ import annotations

from typing import Callable

import torch

_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_OP_PLUGIN = "Ascend/op-plugin@517f2e7d0f202f38b76310706cb977ca2388ad21"


# ----------------------------------------------------------------------------------------------
# shared checks
# ----------------------------------------------------------------------------------------------
def _require_tensor(name: str, value, *, dims: int | None = None, dtypes=None) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(value).__name__}")
    if dims is not None and value.dim() != dims:
        raise ValueError(f"{name}: expected a {dims}-D tensor, got shape {tuple(value.shape)}")
    if dtypes is not None and value.dtype not in dtypes:
        raise TypeError(f"{name}: expected dtype in {list(dtypes)}, got {value.dtype}")
    return value


def _require_value(name: str, value, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"{name}={value!r}: this emulator accepts only {allowed!r} (the values SGLang passes)")


def _require_none(op: str, **kwargs) -> None:
    for name, value in kwargs.items():
        if value is not None:
            raise ValueError(f"{op}: {name}={type(value).__name__} is not emulated (SGLang passes None)")


def _require_int(name: str, value, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int, got {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{name}={value}: expected {low} <= {name} <= {high}")
    return value


def _require_ids_in_range(name: str, ids: torch.Tensor, low: int, high: int) -> None:
    if ids.numel() and (int(ids.min()) < low or int(ids.max()) >= high):
        raise ValueError(
            f"{name}: values must lie in [{low}, {high}), got min {int(ids.min())} max {int(ids.max())}"
        )


def _unwritten(shape, dtype: torch.dtype) -> torch.Tensor:
    """An output the real op allocates but leaves without meaningful values: NaN so any use shows."""
    return torch.full(shape, float("nan"), dtype=dtype)


# ----------------------------------------------------------------------------------------------
# routing (top-k)
# ----------------------------------------------------------------------------------------------
def npu_moe_gating_top_k_softmax(x, finished=None, k=1):
    """softmax(x) then top-k; returns ``(y, expert_idx, row_idx)``.

    Source: docs/zh/custom_APIs/torch_npu/torch_npu-npu_moe_gating_top_k_softmax.md and
    op_plugin/ops/opapi/MoeGatingTopKSoftmaxKernelNpuOpApi.cpp ({_OP_PLUGIN}). Closed aclnn kernel:
    strict. y has x's dtype, expert_idx and row_idx are int32,
    ``row_idx = arange(N*k).reshape(k, N).T``. The softmax is taken in fp32 (the kernel's internal
    precision is not documented); ties are broken by ``torch.topk`` (undocumented upstream).
    Only the 2-D form with ``finished=None`` (what SGLang passes) is emulated.
    """
    _require_tensor("x", x, dims=2, dtypes=_FLOAT_DTYPES)
    _require_none("npu_moe_gating_top_k_softmax", finished=finished)
    num_experts = x.shape[-1]
    _require_int("k", k, 1, min(num_experts, 1024))
    probs = torch.softmax(x.float(), dim=-1)
    y, expert_idx = torch.topk(probs, k, dim=-1, sorted=True)
    rows = x.shape[0]
    row_idx = torch.arange(rows * k, dtype=torch.int32).reshape(k, rows).transpose(0, 1).contiguous()
    return y.to(x.dtype), expert_idx.to(torch.int32), row_idx


def _check_gating_groups(num_experts: int, k: int, k_group: int, group_count: int) -> None:
    _require_int("group_count", group_count, 1, num_experts)
    if num_experts % group_count or num_experts // group_count <= 2:
        raise ValueError(
            f"group_count={group_count}: the expert count {num_experts} must divide into groups of more than 2"
        )
    _require_int("k_group", k_group, 1, group_count)
    _require_int("k", k, 1, num_experts // group_count * k_group)


def _mask_unselected_groups(scores: torch.Tensor, group_count: int, k_group: int, mode: int) -> torch.Tensor:
    """Doc reference: score each group (max, or sum of its top 2), keep the best k_group, -inf the rest."""
    if group_count == 1:
        return scores
    grouped = scores.reshape(scores.shape[0], group_count, -1)
    if mode == 0:
        group_score = grouped.amax(dim=-1)
    else:
        group_score = grouped.topk(2, dim=-1).values.sum(dim=-1)
    order = torch.sort(group_score, dim=-1, descending=True, stable=True).indices[:, :k_group]
    drop = torch.ones_like(group_score, dtype=torch.bool).scatter_(1, order, False)
    return grouped.masked_fill(drop[..., None], float("-inf")).reshape(scores.shape)


def npu_moe_gating_top_k(
    x,
    k,
    *,
    bias=None,
    input_ids=None,
    tid2eid=None,
    k_group=1,
    group_count=1,
    group_select_mode=0,
    renorm=0,
    norm_type=0,
    out_flag=False,
    routed_scaling_factor=1.0,
    eps=1e-20,
):
    """Sigmoid/softmax gating, optional bias and group selection, top-k; returns ``(y, expert_idx, out)``.

    Source: docs/zh/custom_APIs/torch_npu/torch_npu-npu_moe_gating_top_k.md ("等价计算逻辑", the
    numpy reference) and op_plugin/ops/opapi/MoeGatingTopKKernelNpuOpApi.cpp ({_OP_PLUGIN}).
    Closed aclnn kernel: strict. Copied from the documented reference, defects included:

    * the experts are chosen on ``norm(x) + bias`` but y gathers ``norm(x)`` without the bias;
    * y is renormalised (``y / (sum(y) + eps)``) exactly when ``norm_type == 1`` (sigmoid),
      whatever ``renorm`` says, and never for softmax;
    * ``renorm`` does not enter the computation. The doc says "only 0 is supported", but SGLang
      passes ``renorm=renormalize`` (True for LFM2-MoE); the emulator accepts 0/1 and, like the
      reference, ignores it;
    * ties in the top-k go to the lower expert index (the reference's stable argsort).

    The math runs in fp32 (the reference casts to fp32); y is cast back to x's dtype. ``out``
    (the fp32 norm output, shape of x) is only meaningful with ``out_flag=True``, which SGLang never
    passes: the emulator returns it NaN-filled. ``input_ids`` / ``tid2eid`` (hash mode) raise.
    """
    op = "npu_moe_gating_top_k"
    _require_tensor("x", x, dims=2, dtypes=_FLOAT_DTYPES)
    num_experts = x.shape[1]
    if num_experts > 2048:
        raise ValueError(f"x: at most 2048 experts are supported, got {num_experts}")
    _require_none(op, input_ids=input_ids, tid2eid=tid2eid)
    if bias is not None:
        _require_tensor("bias", bias, dims=1, dtypes=(x.dtype,))
        if bias.shape[0] != num_experts:
            raise ValueError(f"bias: expected shape ({num_experts},), got {tuple(bias.shape)}")
    _check_gating_groups(num_experts, k, k_group, group_count)
    _require_value("group_select_mode", group_select_mode, (0, 1))
    _require_value("renorm", renorm, (0, 1))
    _require_value("norm_type", norm_type, (0, 1))
    _require_value("out_flag", out_flag, (False,))
    if not isinstance(routed_scaling_factor, (int, float)) or isinstance(routed_scaling_factor, bool):
        raise TypeError(f"routed_scaling_factor: expected a float, got {routed_scaling_factor!r}")
    if not isinstance(eps, float):
        raise TypeError(f"eps: expected a float, got {eps!r}")

    xf = x.float()
    normed = torch.softmax(xf, dim=-1) if norm_type == 0 else torch.sigmoid(xf)
    choice = normed if bias is None else normed + bias.float()
    choice = _mask_unselected_groups(choice, group_count, k_group, group_select_mode)
    expert_idx = torch.sort(choice, dim=-1, descending=True, stable=True).indices[:, :k]
    y = normed.gather(1, expert_idx)
    if norm_type == 1:
        y = y / (y.sum(dim=-1, keepdim=True) + eps)
    y = y * routed_scaling_factor
    out = _unwritten((x.shape[0], num_experts), torch.float32)
    return y.to(x.dtype), expert_idx.to(torch.int32), out


# ----------------------------------------------------------------------------------------------
# dispatch (init routing)
# ----------------------------------------------------------------------------------------------
def _check_expert_idx(expert_idx, x) -> tuple[int, int]:
    _require_tensor("expert_idx", expert_idx, dims=2, dtypes=(torch.int32,))
    if expert_idx.shape[0] != x.shape[0]:
        raise ValueError(f"expert_idx: expected {x.shape[0]} rows (x's rows), got shape {tuple(expert_idx.shape)}")
    return expert_idx.shape[0], expert_idx.shape[1]


def npu_moe_init_routing(x, row_idx, expert_idx, active_num):
    """Sort (expert, row) pairs by expert and gather the rows; returns
    ``(expanded_x, expanded_row_idx, expanded_expert_idx)``.

    Source: docs/zh/custom_APIs/torch_npu/torch_npu-npu_moe_init_routing.md ({_OP_PLUGIN}),
    "等价计算逻辑": stable key-value sort of the flattened expert_idx carrying row_idx,
    ``expanded_row_idx[sorted_row_idx[i]] = i``, ``expanded_x[i] = x[sorted_row_idx[i] % N]`` for the
    first ``min(active_num, N) * K`` sorted rows. Closed kernel: strict. ``row_idx`` must be a
    permutation of ``arange(N*K)`` (otherwise expanded_row_idx would keep unwritten entries) and
    expert ids must be non-negative.
    """
    _require_tensor("x", x, dims=2, dtypes=_FLOAT_DTYPES)
    rows, top_k = _check_expert_idx(expert_idx, x)
    _require_tensor("row_idx", row_idx, dims=2, dtypes=(torch.int32,))
    if row_idx.shape != expert_idx.shape:
        raise ValueError(f"row_idx: expected shape {tuple(expert_idx.shape)}, got {tuple(row_idx.shape)}")
    flat_rows = row_idx.reshape(-1).long()
    if not torch.equal(torch.sort(flat_rows).values, torch.arange(rows * top_k)):
        raise ValueError(f"row_idx: expected a permutation of arange({rows * top_k})")
    _require_ids_in_range("expert_idx", expert_idx, 0, 2**31 - 1)
    _require_int("active_num", active_num, 0, 2**31 - 1)

    expanded_expert_idx, order = torch.sort(expert_idx.reshape(-1), stable=True)
    sorted_row_idx = flat_rows[order]
    expanded_row_idx = torch.empty(rows * top_k, dtype=torch.int32)
    expanded_row_idx[sorted_row_idx] = torch.arange(rows * top_k, dtype=torch.int32)
    active = min(active_num, rows) * top_k
    expanded_x = x[sorted_row_idx[:active] % rows]
    return expanded_x, expanded_row_idx, expanded_expert_idx.to(torch.int32)


def npu_moe_compute_expert_tokens(sorted_expert_for_source_row, num_expert):
    """Per expert, the end position of its rows in the sorted list; returns an int32 ``[num_expert]``.

    Source: docs/zh/custom_APIs/torch_npu/torch_npu-npu_moe_compute_expert_tokens.md ({_OP_PLUGIN}):
    "binary search for the position of the last row each expert handles". The doc does not say
    whether that position is inclusive; SGLang feeds the result to npu_grouped_matmul as a cumsum
    group_list (group_list_type=0), whose last value must equal the row count, so the emulator
    returns the exclusive end, ``#{j : sorted[j] <= i}`` (an expert with no rows repeats the previous
    end). Closed kernel: strict: 1-D int32, non-decreasing, values in [0, num_expert).
    """
    sorted_ids = _require_tensor(
        "sorted_expert_for_source_row", sorted_expert_for_source_row, dims=1, dtypes=(torch.int32,)
    )
    _require_int("num_expert", num_expert, 1, 2048)
    if sorted_ids.numel() >= 2**24:
        raise ValueError(f"sorted_expert_for_source_row: expected fewer than 2**24 elements, got {sorted_ids.numel()}")
    _require_ids_in_range("sorted_expert_for_source_row", sorted_ids, 0, num_expert)
    if sorted_ids.numel() > 1 and bool((sorted_ids[1:] < sorted_ids[:-1]).any()):
        raise ValueError("sorted_expert_for_source_row: expected a non-decreasing sequence")
    ends = torch.searchsorted(sorted_ids, torch.arange(num_expert, dtype=torch.int32), right=True)
    return ends.to(torch.int32)


def _check_init_routing_v2_flags(expert_num, drop_pad_mode, expert_tokens_num_type, expert_tokens_num_flag,
                                 quant_mode, active_expert_range, row_idx_type, expert_capacity) -> None:
    _require_int("expert_num", expert_num, 1, 10240)
    _require_value("drop_pad_mode", drop_pad_mode, (0,))
    _require_value("expert_tokens_num_type", expert_tokens_num_type, (1,))
    _require_value("expert_tokens_num_flag", expert_tokens_num_flag, (True,))
    _require_value("quant_mode", quant_mode, (-1,))
    _require_value("row_idx_type", row_idx_type, (0,))
    _require_value("expert_capacity", expert_capacity, (-1,))
    if list(active_expert_range) != [0, expert_num]:
        raise ValueError(
            f"active_expert_range={list(active_expert_range)!r}: this emulator accepts only "
            f"[0, expert_num] = [0, {expert_num}] (what SGLang passes)"
        )


def npu_moe_init_routing_v2(
    x,
    expert_idx,
    *,
    scale=None,
    offset=None,
    active_num=-1,
    expert_capacity=-1,
    expert_num=-1,
    drop_pad_mode=0,
    expert_tokens_num_type=0,
    expert_tokens_num_flag=False,
    quant_mode=-1,
    active_expert_range=(),
    row_idx_type=0,
    x_dtype=None,
):
    """Dropless, unquantised MoE dispatch; returns
    ``(expanded_x, expanded_row_idx, expert_tokens_count, expanded_scale)``.

    Source: docs/zh/custom_APIs/torch_npu/torch_npu-npu_moe_init_routing_v2.md ({_OP_PLUGIN}),
    class ``MoeInitRoutingV2CPU.cpu_op_exec`` of "等价计算逻辑", the branch SGLang's bf16
    AscendTPDispatcher takes: quant_mode=-1, drop_pad_mode=0, row_idx_type=0 (gather index),
    expert_tokens_num_type=1 (per-expert counts), active_expert_range=[0, expert_num].

    * sorted = stable argsort of the flattened expert_idx;
    * ``expanded_row_idx[sorted[i]] = i`` (int32, [N*K]): flat (token, slot) -> row of expanded_x;
    * ``expanded_x = x[sorted[:active] // K]``, active = N*K for active_num in (-1, 0), else
      ``min(active_num, N*K)``;
    * ``expert_tokens_count``: int64 ``[expert_num]`` histogram;
    * ``expanded_scale``: float32 ``[N]``, meaningless without ``scale`` (doc): NaN-filled.

    Closed kernel: strict. Every other flag value, scale/offset, and expert ids outside
    [0, expert_num) raise.
    """
    _require_tensor("x", x, dims=2, dtypes=_FLOAT_DTYPES)
    rows, top_k = _check_expert_idx(expert_idx, x)
    _require_none("npu_moe_init_routing_v2", scale=scale, offset=offset, x_dtype=x_dtype)
    _check_init_routing_v2_flags(expert_num, drop_pad_mode, expert_tokens_num_type, expert_tokens_num_flag,
                                 quant_mode, active_expert_range, row_idx_type, expert_capacity)
    _require_ids_in_range("expert_idx", expert_idx, 0, expert_num)
    _require_int("active_num", active_num, -1, 2**31 - 1)

    total = rows * top_k
    flat_ids = expert_idx.reshape(-1)
    sorted_pos = torch.sort(flat_ids, stable=True).indices
    expanded_row_idx = torch.empty(total, dtype=torch.int32)
    expanded_row_idx[sorted_pos] = torch.arange(total, dtype=torch.int32)
    active = total if active_num in (-1, 0) else min(active_num, total)
    expanded_x = x[sorted_pos[:active] // top_k]
    counts = torch.bincount(flat_ids.long(), minlength=expert_num).to(torch.int64)
    return expanded_x, expanded_row_idx, counts, _unwritten((rows,), torch.float32)


# ----------------------------------------------------------------------------------------------
# grouped matmul
# ----------------------------------------------------------------------------------------------
def _group_sizes(group_list, group_list_type: int, num_groups: int, num_rows: int) -> list[int]:
    _require_tensor("group_list", group_list, dims=1, dtypes=(torch.int64,))
    if group_list.shape[0] != num_groups:
        raise ValueError(f"group_list: expected {num_groups} entries (weight's groups), got {group_list.shape[0]}")
    values = group_list.tolist()
    if group_list_type == 0:
        if any(v < 0 for v in values) or any(b < a for a, b in zip(values, values[1:])):
            raise ValueError(
                f"group_list (group_list_type=0): expected a non-negative non-decreasing cumsum, got {values}"
            )
        sizes = [b - a for a, b in zip([0] + values[:-1], values)]
    else:
        if any(v < 0 for v in values):
            raise ValueError(f"group_list (group_list_type=1): expected non-negative counts, got {values}")
        sizes = values
    if sum(sizes) != num_rows:
        raise ValueError(
            f"group_list: the groups cover {sum(sizes)} rows but x has {num_rows} "
            "(the doc requires equality; the real op would leave rows unwritten or read past x)"
        )
    return sizes


def npu_grouped_matmul(
    x,
    weight,
    *,
    bias=None,
    scale=None,
    offset=None,
    antiquant_scale=None,
    antiquant_offset=None,
    per_token_scale=None,
    group_list=None,
    activation_input=None,
    activation_quant_scale=None,
    activation_quant_offset=None,
    split_item=0,
    group_type=None,
    group_list_type=0,
    act_type=0,
    output_dtype=None,
    tuning_config=None,
    x_dtype=None,
    weight_dtype=None,
    scale_dtype=None,
    per_token_scale_dtype=None,
):
    """m-axis grouped matmul, single-tensor form: ``y[rows of group g] = x[rows of g] @ weight[0][g]``.

    Source: docs/zh/custom_APIs/torch_npu/torch_npu-npu_grouped_matmul.md ({_OP_PLUGIN}), the
    "单单单" scenario (group_type=0, split_item 2/3: x 2-D [M, K], weight one 3-D [E, K, N] tensor,
    transposed views allowed, y one [M, N] tensor) and op_plugin/ops/opapi/GroupedMatmulKernelNpuOpApi.cpp.
    group_list is an int64 [E] tensor: cumsum (group_list_type=0) or counts (1), covering exactly M
    rows. Returns ``[y]``. Closed kernel: strict. Only the unquantised form SGLang's
    NPUUnquantMoEMethod / fused_moe_npu pass is emulated: split_item=2, no bias, no quant args,
    act_type=0, and output_dtype None or x's dtype (the doc ties y's dtype to x's without
    quantisation). Products accumulate in fp32 (cube unit) and are cast to the output dtype.
    """
    op = "npu_grouped_matmul"
    _require_none(op, bias=bias, scale=scale, offset=offset, antiquant_scale=antiquant_scale,
                  antiquant_offset=antiquant_offset, per_token_scale=per_token_scale,
                  activation_input=activation_input, activation_quant_scale=activation_quant_scale,
                  activation_quant_offset=activation_quant_offset, tuning_config=tuning_config,
                  x_dtype=x_dtype, weight_dtype=weight_dtype, scale_dtype=scale_dtype,
                  per_token_scale_dtype=per_token_scale_dtype)
    _require_value("split_item", split_item, (2,))
    _require_value("group_type", group_type, (0,))
    _require_value("group_list_type", group_list_type, (0, 1))
    _require_value("act_type", act_type, (0,))
    if not isinstance(x, (list, tuple)) or len(x) != 1:
        raise TypeError(f"x: expected a list of one tensor, got {type(x).__name__} of length {len(x)}")
    if not isinstance(weight, (list, tuple)) or len(weight) != 1:
        raise TypeError(f"weight: expected a list of one tensor, got {type(weight).__name__}")
    inp = _require_tensor("x[0]", x[0], dims=2, dtypes=_FLOAT_DTYPES)
    w = _require_tensor("weight[0]", weight[0], dims=3, dtypes=(inp.dtype,))
    if w.shape[1] != inp.shape[1]:
        raise ValueError(f"weight[0]: expected shape [E, {inp.shape[1]}, N] (x's K), got {tuple(w.shape)}")
    if output_dtype is not None and output_dtype != inp.dtype:
        raise ValueError(f"output_dtype={output_dtype}: without quantisation y must have x's dtype {inp.dtype}")
    sizes = _group_sizes(group_list, group_list_type, w.shape[0], inp.shape[0])

    y = torch.empty(inp.shape[0], w.shape[2], dtype=inp.dtype)
    start = 0
    for group, size in enumerate(sizes):
        rows = slice(start, start + size)
        y[rows] = (inp[rows].float() @ w[group].float()).to(inp.dtype)
        start += size
    return [y]


# ----------------------------------------------------------------------------------------------
# combine (finalize routing)
# ----------------------------------------------------------------------------------------------
def _slot_rows(expanded_src_to_dst_row, drop_pad_mode: int, rows: int, top_k: int) -> torch.Tensor:
    """[N, K] rows of expanded_permuted_rows: mode 0 reads index k*N + i, mode 2 reads i*K + k."""
    if drop_pad_mode == 0:
        return expanded_src_to_dst_row.long().reshape(top_k, rows).transpose(0, 1)
    return expanded_src_to_dst_row.long().reshape(rows, top_k)


def npu_moe_finalize_routing(
    expanded_permuted_rows, skip1, skip2, bias, scales, expanded_src_to_dst_row, export_for_source_row,
    drop_pad_mode=0, k=1,
):
    """``out[i] = sum_k scales[i,k] * expanded_permuted_rows[src_to_dst[slot(i,k)]]``; returns ``out``.

    Source: docs/zh/custom_APIs/torch_npu/torch_npu-npu_moe_finalize_routing.md ({_OP_PLUGIN}),
    formula and "等价计算逻辑": dropless modes only, drop_pad_mode=0 (src_to_dst laid out by column,
    index ``k*N + i``, what init_routing v1 produces) and 2 (by row, index ``i*K + k``, what
    init_routing_v2 with row_idx_type=0 produces). skip1 / skip2 / bias must be None (SGLang passes
    None); scales is required. Closed kernel: strict: src_to_dst values in [0, N*K-1] (doc range for
    modes 0/2), export_for_source_row (the schema's name; the doc calls it expert_for_source_row)
    int32 [N, K]; ``k`` (schema-only, undocumented) must stay 1. Accumulates in fp32, returns the rows' dtype.
    """
    _require_none("npu_moe_finalize_routing", skip1=skip1, skip2=skip2, bias=bias)
    _require_value("drop_pad_mode", drop_pad_mode, (0, 2))
    _require_value("k", k, (1,))
    permuted = _require_tensor("expanded_permuted_rows", expanded_permuted_rows, dims=2, dtypes=_FLOAT_DTYPES)
    _require_tensor("scales", scales, dims=2, dtypes=(permuted.dtype,))
    rows, top_k = scales.shape
    _require_tensor("expanded_src_to_dst_row", expanded_src_to_dst_row, dims=1, dtypes=(torch.int32,))
    if expanded_src_to_dst_row.shape[0] != rows * top_k or permuted.shape[0] != rows * top_k:
        raise ValueError(
            f"expanded_src_to_dst_row / expanded_permuted_rows: expected {rows * top_k} entries / rows "
            f"(scales is [{rows}, {top_k}]), got {expanded_src_to_dst_row.shape[0]} / {permuted.shape[0]}"
        )
    _require_ids_in_range("expanded_src_to_dst_row", expanded_src_to_dst_row, 0, rows * top_k)
    _require_tensor("export_for_source_row", export_for_source_row, dims=2, dtypes=(torch.int32,))
    if tuple(export_for_source_row.shape) != (rows, top_k):
        raise ValueError(
            f"export_for_source_row: expected shape ({rows}, {top_k}), got {tuple(export_for_source_row.shape)}"
        )

    gathered = permuted.float()[_slot_rows(expanded_src_to_dst_row, drop_pad_mode, rows, top_k)]
    out = (gathered * scales.float()[..., None]).sum(dim=1)
    return out.to(permuted.dtype)


def npu_moe_token_unpermute(permuted_tokens, sorted_indices, probs=None, padded_mode=False, restore_shape=None):
    """``out[t] = sum_k probs[t,k] * permuted_tokens[sorted_indices[t*K + k]]``; returns ``out`` [N, H].

    Source: op_plugin/ops/opapi/MoeTokenUnpermuteKernelNpuOpApi.cpp and
    test/test_custom_ops/test_npu_moe_token_permute_and_unpermute.py::test_unpermute ({_OP_PLUGIN};
    no doc page exists). The upstream test checks the op against the torch ``unpermute`` fed
    ``argsort(sorted_indices)``, i.e. the op reads sorted_indices as a gather index
    (flat (token, slot) -> permuted row), which is what SGLang passes (init_routing_v2's
    ``expanded_row_idx.abs()``). Closed kernel: strict: probs required ([N, K], float),
    padded_mode=False, restore_shape=None, sorted_indices int32 [N*K], a permutation of the
    permuted rows. Accumulates in fp32, returns permuted_tokens' dtype.
    """
    tokens = _require_tensor("permuted_tokens", permuted_tokens, dims=2, dtypes=_FLOAT_DTYPES)
    _require_tensor("sorted_indices", sorted_indices, dims=1, dtypes=(torch.int32,))
    if probs is None:
        raise ValueError("probs=None: not emulated (SGLang always passes topk_weights)")
    _require_tensor("probs", probs, dims=2, dtypes=_FLOAT_DTYPES)
    _require_value("padded_mode", padded_mode, (False,))
    _require_none("npu_moe_token_unpermute", restore_shape=restore_shape)
    rows, top_k = probs.shape
    if sorted_indices.shape[0] != rows * top_k or tokens.shape[0] != rows * top_k:
        raise ValueError(
            f"sorted_indices / permuted_tokens: expected {rows * top_k} entries / rows (probs is "
            f"[{rows}, {top_k}]), got {sorted_indices.shape[0]} / {tokens.shape[0]}"
        )
    if not torch.equal(torch.sort(sorted_indices.long()).values, torch.arange(rows * top_k)):
        raise ValueError(f"sorted_indices: expected a permutation of arange({rows * top_k})")
    gathered = tokens.float()[sorted_indices.long().reshape(rows, top_k)]
    return (gathered * probs.float()[..., None]).sum(dim=1).to(tokens.dtype)


def _fill_source(func: Callable) -> Callable:
    func.__doc__ = func.__doc__.replace("{_OP_PLUGIN}", _OP_PLUGIN)
    return func


TORCH_OPS_NPU: dict[str, Callable] = {
    func.__name__: _fill_source(func)
    for func in (
        npu_moe_gating_top_k_softmax,
        npu_moe_gating_top_k,
        npu_moe_init_routing,
        npu_moe_init_routing_v2,
        npu_moe_compute_expert_tokens,
        npu_grouped_matmul,
        npu_moe_finalize_routing,
        npu_moe_token_unpermute,
    )
}
"""Emulators by their name under ``torch.ops.npu`` (how every SGLang call site reaches them)."""

TORCH_NPU: dict[str, Callable] = dict(TORCH_OPS_NPU)
"""The same ops as attributes of ``torch_npu`` (``torch_npu.npu_moe_gating_top_k`` etc.)."""
