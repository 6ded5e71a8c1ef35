"""Whole-model runs at tensor parallelism 2 over a real gloo process group.

Two rank processes are forked from the test process (fork: the imports of torch, SGLang and
the plugin are already paid; a forked rank changes nothing in its parent).  Each rank:

* builds SGLang's process groups with SGLang's own ``init_distributed_environment`` (gloo,
  ``tcp://127.0.0.1:<free port>``) and ``initialize_model_parallel`` (the widths read from the
  parallel context where the release reads them there, else passed as arguments), with the
  NCCL library out of reach, as on a machine without NVIDIA GPUs;
* states its ranks and those groups for the harness (:data:`tests.e2e.harness.TOPOLOGY`), so
  ``harness.sglang_process`` publishes them wherever the single-rank harness publishes its
  topology: while the model is built, its weights loaded and the plan run;
* builds the family's transformers model with the seeded random weights (the same on both
  ranks), and SGLang's model class from them through ``load_weights``: SGLang's parallel
  layers and weight loaders take this rank's shard;
* runs the step plan through the plugin (:func:`tests.e2e.runner.run_family`): pools sized
  for this rank's shard, the plugin's backends, all-reduces and all-gathers over gloo;
* records the shapes the plugin's ops were handed (GDN heads, conv channels) and the pool's;
* rank 0 compares its logits with transformers' class at TP=1 (same weights).

:func:`run_tp` returns both ranks' :class:`RankResult`; a rank that raises sends its
traceback, and a rank that hangs is killed after a timeout (gloo's own timeout is short).
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import multiprocessing
import os
import socket
import traceback
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from tests.e2e import families, harness

TP = 2
TP_LOGIT_TOL = 1e-5  # fp32: TP changes only the order of the matmul sums
PLAN = harness.StepPlan(decodes=4)  # chunked prefill, mixed extend, 4 decode steps
GLOO_TIMEOUT_S = 120
RANK_TIMEOUT_S = 300

# Qwen3.5 with 12 value / 4 key GDN heads of dim 128: (6, 2) per rank at TP=2, the per-rank head
# plan of Qwen3.6-27B at TP=8 (the single-rank family "qwen3_5" runs those (6, 2) heads at TP=1)
QWEN3_5_TP = dataclasses.replace(
    families.FAMILIES["qwen3_5"], name="qwen3_5_tp",
    config=families._gdn_dict("qwen3_6-27b", value_heads=12, key_heads=4, head_dim=128))
FAMILIES = {"lfm2": families.FAMILIES["lfm2"], "qwen3_5": QWEN3_5_TP}


@dataclass
class RankResult:
    rank: int
    tokens: list  # per request: the greedy tokens
    logits: list  # per request: [generated, vocab] fp32 rows (nested lists)
    comparison: Optional[harness.Comparison]  # rank 0: against transformers at TP=1 (float64)
    shapes: dict = field(default_factory=dict)  # what the plugin's ops were handed, per op
    facts: dict = field(default_factory=dict)  # the rank's groups, layer widths, pool shapes
    log: str = ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------- in a rank process


def _init_groups(rank: int, port: int) -> dict:
    """SGLang's distributed init for rank ``rank`` of TP; the ranks and groups to state."""
    os.environ["SGLANG_NCCL_SO_PATH"] = "/nonexistent/libnccl.so"  # no PyNccl: gloo all the way
    from sglang.srt.distributed import parallel_state as ps
    from sglang.srt.runtime_context import get_parallel

    widths = dict(tp_size=TP, attn_tp_size=TP, attn_dp_size=1, attn_cp_size=1, attn_dcp_size=1, pp_size=1,
                  moe_ep_size=1, moe_dp_size=1, moe_tp_size=TP, shared_experts_tp_size=None)
    ranks = dict(tp_rank=rank, attn_tp_rank=rank, attn_dp_rank=0, attn_cp_rank=0, pp_rank=0, moe_ep_rank=0,
                 moe_dp_rank=0, moe_tp_rank=rank, dp_rank=0)
    known = harness._parallel_names()
    stated = {k: v for k, v in {**widths, **ranks}.items() if known is None or k in known}
    ps.set_custom_all_reduce(False)
    with get_parallel().override(**stated):
        ps.init_distributed_environment(world_size=TP, rank=rank, local_rank=rank, backend="gloo",
                                        distributed_init_method=f"tcp://127.0.0.1:{port}", timeout=GLOO_TIMEOUT_S)
        params = inspect.signature(ps.initialize_model_parallel).parameters
        if "tensor_model_parallel_size" in params:  # releases that take the widths as arguments
            ps.initialize_model_parallel(tensor_model_parallel_size=TP, backend="gloo")
        else:  # releases that read them from the parallel context
            ps.initialize_model_parallel(backend="gloo")
    groups = dict(tp_group=ps._TP, attn_tp_group=ps._ATTN_TP, pp_group=ps._PP, moe_ep_group=ps._MOE_EP,
                  moe_tp_group=ps._MOE_TP, moe_dp_group=ps._MOE_DP, attn_cp_group=ps._ATTN_CP,
                  world_group=ps._WORLD)
    return {**stated, **{k: g for k, g in groups.items() if g is not None}}


def _recorder(shapes: dict, key: str, fn: Callable, shape_of: Callable) -> Callable:
    def recorded(*args, **kwargs):
        shapes.setdefault(key, set()).add(shape_of(*args, **kwargs))
        return fn(*args, **kwargs)

    return recorded


def _watch_plugin_ops(mp, shapes: dict) -> None:
    """Record what the plugin's ops are handed: GDN prefill (Hk, Hv) and decode (Hk, K, Hv, V),
    conv channels of the prefill and decode conv ops (x's and the weight's)."""
    from sglang_ascend_hybrid.integration import gdn_hooks
    from sglang_ascend_hybrid.ops.conv import api as plugin_conv
    from sglang_ascend_hybrid.ops.gdn import decode

    mp.setattr(gdn_hooks, "chunk_with_states", _recorder(
        shapes, "gdn_prefill", gdn_hooks.chunk_with_states, lambda q, k, v, *a, **kw: (q.shape[-2], v.shape[-2])))
    mp.setattr(decode, "run_decode", _recorder(
        shapes, "gdn_decode", decode.run_decode, lambda call, *a, **kw: tuple(call.heads)))
    mp.setattr(plugin_conv, "causal_conv1d_fn", _recorder(
        shapes, "conv_prefill", plugin_conv.causal_conv1d_fn, lambda x, w, *a, **kw: (x.shape[0], w.shape[0])))
    mp.setattr(plugin_conv, "causal_conv1d_update", _recorder(
        shapes, "conv_decode", plugin_conv.causal_conv1d_update, lambda x, s, w, *a, **kw: (x.shape[1], w.shape[0])))


def skip_conv_out_reduce(model) -> Callable:
    """Breakage: the short-conv mixers' row-parallel ``out_proj`` skips its all-reduce (each rank
    keeps its partial sum over its conv channels); the other layers reduce as they should."""
    def breakage(mp):
        layers = [m for m in model.modules() if type(m).__name__ == "Lfm2ShortConv"]
        assert layers, "no short-conv layer to break"
        for layer in layers:
            mp.setattr(layer.out_proj, "reduce_results", False)

    return breakage


BREAKAGES = {"skip_conv_out_reduce": skip_conv_out_reduce}


def _facts(run, model) -> dict:
    from sglang.srt.runtime_context import get_parallel

    linear = run.backend.linear_attn_backend
    cache = linear.req_to_token_pool.mamba_pool.mamba_cache
    facts = dict(tp_world=get_parallel().tp_group.world_size, tp_rank_in_group=get_parallel().tp_group.rank_in_group,
                 conv_pool=[tuple(c.shape) for c in cache.conv], temporal_pool=tuple(cache.temporal.shape))
    for m in model.modules():
        name = type(m).__name__
        if name == "Lfm2ShortConv":
            facts.setdefault("conv_weight", set()).add(tuple(m.conv_weight.shape))
        elif hasattr(m, "num_v_heads") and hasattr(m, "attn_tp_size"):  # a GDN layer
            facts.setdefault("gdn_layer", set()).add((m.num_k_heads // m.attn_tp_size,
                                                      m.num_v_heads // m.attn_tp_size, m.attn_tp_size))
    return facts


def _rank_job(rank: int, name: str, breakage: Optional[str]) -> RankResult:
    import pytest

    from tests.e2e import device
    from tests.e2e.runner import GDN_FAMILIES, run_family

    b = FAMILIES[name].build()  # under harness.TOPOLOGY: this rank's shard of the same weights
    shapes: dict = {}

    def patch(mp: pytest.MonkeyPatch):
        _watch_plugin_ops(mp, shapes)
        if breakage is not None:
            BREAKAGES[breakage](b.sglang)(mp)

    run = run_family(name, device=device.gdn_fp32 if name in GDN_FAMILIES else None, breakage=patch,
                     plan=PLAN, models=b)
    # rank 0: against transformers at TP=1 on the same weights, computed in float64 so that the gap
    # is this run's fp32 rounding alone (not that plus the reference's own)
    cmp = harness.compare(run.reqs, copy.deepcopy(b.hf).double(), run.seconds) if rank == 0 else None
    return RankResult(rank, [r.generated for r in run.reqs], [torch.stack(r.logits).tolist() for r in run.reqs],
                      cmp, shapes, _facts(run, b.sglang), run.log_text())


def _rank_main(rank: int, port: int, name: str, breakage: Optional[str], conn) -> None:
    try:
        torch.set_num_threads(1)  # one core per rank; no OpenMP pool inherited across the fork
        # SGLang compiles a few TP>1 helpers with torch.compile off NPU (the vocab-parallel
        # embedding's masked lookup; its NPU build disables that compile): eager here, as on NPU
        torch._dynamo.config.disable = True
        harness.TOPOLOGY.update(_init_groups(rank, port))
        conn.send(("ok", _rank_job(rank, name, breakage)))
    except BaseException:  # noqa: BLE001 -- the parent reports it
        conn.send(("error", f"rank {rank}:\n{traceback.format_exc()}"))
    finally:
        conn.close()


# --------------------------------------------------------------------------- in the test process


def _import_for_ranks(family) -> None:
    """What every rank imports, imported once here before the fork (a rank then starts in
    moments): SGLang's distributed state and model classes, the plugin's runner."""
    import sglang.srt.distributed.parallel_state  # noqa: F401

    import tests.e2e.runner  # noqa: F401

    for path in (family.sglang_model, family.hf_model, family.hf_config):
        families._cls(path)


def run_tp(name: str, breakage: Optional[str] = None) -> list:
    """Run family ``name``'s plan at TP=2 (optionally with one of :data:`BREAKAGES`); both ranks'
    results, rank 0 first."""
    _import_for_ranks(FAMILIES[name])
    ctx = multiprocessing.get_context("fork")
    port = free_port()
    pipes, procs = [], []
    for rank in range(TP):
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_rank_main, args=(rank, port, name, breakage, child), daemon=True)
        proc.start()
        child.close()
        pipes.append(parent)
        procs.append(proc)
    results, errors = [], []
    try:
        for rank, pipe in enumerate(pipes):
            if not pipe.poll(RANK_TIMEOUT_S):
                errors.append(f"rank {rank}: no result in {RANK_TIMEOUT_S} s")
                continue
            try:
                status, value = pipe.recv()
            except EOFError:
                errors.append(f"rank {rank}: exited without a result")
                continue
            (results if status == "ok" else errors).append(value)
    finally:
        for proc in procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
                proc.join()
    assert not errors, "\n".join(errors)
    return sorted(results, key=lambda r: r.rank)
