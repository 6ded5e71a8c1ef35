"""Run a head :class:`~.planner.Plan` on a kernel: gather heads per launch, pad with
inert heads, launch, scatter outputs and final states back.

Inert heads get ``q = k = v = 0``, ``g = 0``, ``beta = 0`` and a zero initial state,
so they stay zero and never touch the real heads (see :mod:`.planner`).  The result
equals running the unpadded layout.  New tensors are built for every launch; the
caller's tensors (and so the SSM state pool) are never written.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch

from sglang_ascend_hybrid.ops.errors import bad_input
from sglang_ascend_hybrid.ops.gdn.prefill.planner import Launch, Plan

# kernel(q, k, v, g, beta, initial_state_or_None) -> (o [1, T, Hv', V], final [N, Hv', V, K] fp32)
LaunchKernel = Callable[..., tuple]


def _slots(launch: Launch, ratio: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(real value-head ids, their slots inside the launch)."""
    groups = torch.arange(launch.key_count, device=device)
    member = torch.arange(ratio, device=device)
    real = ((launch.key_start + groups)[:, None] * ratio + member[None, :]).reshape(-1)
    slot = (groups[:, None] * launch.group_size + member[None, :]).reshape(-1)
    return real, slot


def _launch_inputs(launch: Launch, ratio: int, q, k, v, g, beta, initial_state):
    dev = q.device
    real, slot = _slots(launch, ratio, dev)
    T, K, V = q.shape[1], q.shape[3], v.shape[3]
    hk, hv = launch.key_heads, launch.value_heads
    keys = slice(launch.key_start, launch.key_start + launch.key_count)
    if launch.inert_groups == 0:
        q_l = q[:, :, keys].contiguous()
        k_l = k[:, :, keys].contiguous()
    else:
        q_l = q.new_zeros(1, T, hk, K)
        k_l = k.new_zeros(1, T, hk, K)
        q_l[:, :, : launch.key_count] = q[:, :, keys]
        k_l[:, :, : launch.key_count] = k[:, :, keys]
    if hv == real.numel():  # no inert value heads: plain slice of the value heads
        v_l = v.index_select(2, real).contiguous()
        g_l = g.index_select(2, real).contiguous()
        b_l = beta.index_select(2, real).contiguous()
        s_l = None if initial_state is None else initial_state.index_select(1, real).contiguous()
    else:
        v_l = v.new_zeros(1, T, hv, V).index_copy_(2, slot, v.index_select(2, real))
        g_l = g.new_zeros(1, T, hv).index_copy_(2, slot, g.index_select(2, real))
        b_l = beta.new_zeros(1, T, hv).index_copy_(2, slot, beta.index_select(2, real))
        s_l = None
        if initial_state is not None:
            n = initial_state.shape[0]
            s_l = initial_state.new_zeros(n, hv, V, K).index_copy_(
                1, slot, initial_state.index_select(1, real))
    return (q_l, k_l, v_l, g_l, b_l, s_l), real, slot


def execute_plan(plan: Plan, kernel: LaunchKernel, q, k, v, g, beta, initial_state: Optional[torch.Tensor],
                 *, num_sequences: int):
    """Run ``plan`` launch by launch through ``kernel``; returns (o, final fp32)."""
    if plan.strategy == "none" or not plan.detail:
        raise bad_input("plan", plan.describe(), "a runnable plan (not 'none')", op="execute_plan")
    Hv, Hk = v.shape[2], q.shape[2]
    if (plan.value_heads, plan.key_heads) != (Hv, Hk):
        raise bad_input("plan", plan.describe(), f"a plan for the inputs' ({Hv}, {Hk}) heads", op="execute_plan")
    ratio = Hv // Hk
    T, K, V = q.shape[1], q.shape[3], v.shape[3]
    if len(plan.detail) == 1 and plan.strategy == "native":
        return kernel(q, k, v, g, beta, initial_state)
    o = torch.empty(1, T, Hv, V, dtype=q.dtype, device=q.device)
    final = torch.empty(num_sequences, Hv, V, K, dtype=torch.float32, device=q.device)
    for launch in plan.detail:
        inputs, real, slot = _launch_inputs(launch, ratio, q, k, v, g, beta, initial_state)
        o_l, final_l = kernel(*inputs)
        o.index_copy_(2, real, o_l.index_select(2, slot).to(o.dtype))
        final.index_copy_(1, real, final_l.index_select(1, slot).float())
    return o, final
