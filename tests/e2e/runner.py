"""One whole-model run of a family through the plugin, and what it observed.

``run_family`` builds nothing twice per process (:func:`built`), installs the plugin
through SGLang's ``load_plugins`` for the duration of the run, builds the pools and
the backend through the real ``attn_backend_wrapper``, runs the step plan and compares
with transformers.  Device ops: in fp32 runs the plugin's kernel ladders end on their
torch rungs (the NPU ops are fp16 / bf16 only); in bf16 runs the plugin's emulators
with the NPU contracts sit behind the seam (:mod:`tests.e2e.device`).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import pytest
import torch

from tests.e2e import harness, npu_standins
from tests.e2e.families import FAMILIES, Built
from tests.e2e.plugin_install import plugin_loaded

GDN_FAMILIES = ("qwen3_next", "qwen3_5", "qwen3_5_moe")
# The GDN runs take the installed release's Ascend GDN prefill route: AscendGDNAttnBackend.chunk_gdn
# (gdn-prefill-ladder) or, on older releases, forward_extend -> TritonGDNKernel.extend (gdn-extend-step,
# gdn-extend-ladder; tests/e2e/npu_standins.ascend_gdn_helpers binds that route's NPU entry).
# Families whose GDN projection split and attention output gate run on the plain-torch copies of SGLang's
# Triton kernels (npu_standins.torch_model_kernels, checked against the kernels in test_prefix_cache.py):
# the Triton interpreter takes ~35 ms a launch on a CPU (the gate ~2.5 s a call).  Qwen3.5-MoE has the
# dense Qwen3.5's GDN layer class, whose runs here keep the Triton kernels.
TORCH_MODEL_KERNELS = ("qwen3_5_moe",)
SHORT_CONV_FAMILIES = ("lfm2", "lfm2_moe", "lfm2_vl", "zaya")


@functools.lru_cache(maxsize=None)
def built(name: str) -> Built:
    """The family's models with random weights, built once per test process."""
    return FAMILIES[name].build()


@functools.lru_cache(maxsize=None)
def built_bf16(name: str) -> Built:
    """The SGLang model in bf16, and transformers in fp32 on the same bf16-rounded weights."""
    b = built(name)
    hf = copy.deepcopy(b.hf)
    with torch.no_grad():
        for p in hf.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    sg_cfg, _ = b.family.configs(torch.bfloat16)
    return Built(b.family, b.family.sglang_from(hf, sg_cfg, torch.bfloat16), hf, sg_cfg)


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@dataclass
class Run:
    reqs: list
    reference: object  # transformers model
    seconds: float
    logs: list
    calls: dict = field(default_factory=dict)
    backend: object = None
    device_calls: Optional[dict] = None  # emulated device ops entered, by name

    def compare(self) -> harness.Comparison:
        return harness.compare(self.reqs, self.reference, self.seconds)

    def log_text(self) -> str:
        return "\n".join(self.logs)


def _count(mp: pytest.MonkeyPatch, calls: dict, module, name: str) -> None:
    real = getattr(module, name)

    @functools.wraps(real)
    def counted(*args, **kwargs):
        calls[name] = calls.get(name, 0) + 1
        return real(*args, **kwargs)

    mp.setattr(module, name, counted)


def run_family(name: str, *, dtype: torch.dtype = torch.float32,
               device: Optional[Callable[[], contextlib.AbstractContextManager]] = None,
               breakage: Optional[Callable[[pytest.MonkeyPatch], None]] = None,
               plan: harness.StepPlan = harness.StepPlan(), ssm_dtype: Optional[torch.dtype] = None,
               plan_runner: Callable = harness.run_plan, models: Optional[Built] = None,
               server_args: Optional[dict] = None, engine_args: Optional[dict] = None) -> Run:
    """Run the step plan of family ``name``.  ``device``: a context that installs the
    device ops (emulators; default: none, the ladders' torch rungs); ``breakage``: a
    deliberate fault put into the plugin for the run (negative controls); ``ssm_dtype``:
    the GDN state pool's dtype (default: the config's ``mamba_ssm_dtype``, fp32); ``plan_runner(engine,
    plan)``: what drives the engine (default: :func:`harness.run_plan`, eager steps); ``models``: the
    family's models to run (default: :func:`built` / :func:`built_bf16`; a tensor-parallel rank
    builds its own shard, :mod:`tests.e2e.tp`); ``server_args`` / ``engine_args``: more SGLang server
    arguments and :class:`harness.Engine` arguments (the prefix-cache runs: extra buffer, longer context)."""
    from sglang_ascend_hybrid.integration import gdn_hooks
    from sglang_ascend_hybrid.ops.conv import api as plugin_conv

    b = models if models is not None else built(name) if dtype == torch.float32 else built_bf16(name)
    records = _Records()
    plugin_logger = logging.getLogger("sglang_ascend_hybrid")
    calls: dict = {}
    t0 = time.time()
    with contextlib.ExitStack() as stack:
        stack.enter_context(harness.sglang_process(**(server_args or {})))
        stack.enter_context(plugin_loaded(harness.NPU_STUBS))
        harness.import_upstream_backends()
        mp = stack.enter_context(pytest.MonkeyPatch.context())
        old_level = plugin_logger.level
        plugin_logger.setLevel(logging.INFO)
        plugin_logger.addHandler(records)
        stack.callback(plugin_logger.removeHandler, records)
        stack.callback(plugin_logger.setLevel, old_level)
        for module, fn in ((plugin_conv, "causal_conv1d_fn"), (plugin_conv, "causal_conv1d_update"),
                           (gdn_hooks, "chunk_with_states")):
            _count(mp, calls, module, fn)
        if name in GDN_FAMILIES:
            stack.enter_context(npu_standins.ascend_gdn_helpers())
        if name in TORCH_MODEL_KERNELS:
            stack.enter_context(npu_standins.torch_model_kernels())
        device_calls = stack.enter_context(device()) if device is not None else None
        if breakage is not None:
            breakage(mp)
        engine = harness.Engine(b.sglang, b.config, dtype=dtype, ssm_dtype=ssm_dtype, **(engine_args or {}))
        reqs = plan_runner(engine, plan)
    return Run(reqs, b.hf, time.time() - t0, records.messages, calls, engine.backend, device_calls)
