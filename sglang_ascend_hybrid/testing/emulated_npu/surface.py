"""What the emulated Ascend device's ``torch_npu`` and ``sgl_kernel_npu`` expose, in one place.

Three tables of CPU emulators, each written from the op's upstream source or documentation (their
modules cite it):

- ``torch_npu.<name>`` and ``torch.ops.npu.<name>``: :mod:`.kernels_torch_npu` (norms, activation,
  rotary, attention, KV writes) and :mod:`.kernels_moe` (MoE routing, grouped matmul, finalize);
- ``sgl_kernel_npu.<module>:<name>``: :mod:`.kernels_norm_rope` (the fused split-norm-rope ops) and
  :mod:`.kernels_gdn_mem` (GDN-side helpers, allocator, mamba state moves);
- the plugin's own device ops: the emulators of :mod:`sglang_ascend_hybrid.emulators`, put behind
  the seam for the life of the process and bound to the names SGLang calls them by
  (``torch.ops.npu.causal_conv1d``, ``torch.ops.npu.chunk_gated_delta_rule``, the Python entries).

Every op is wrapped so that its first call in a process appends a record (op, pid, whether a probe
called it) to the file named by ``SGLANG_ASCEND_HYBRID_EMULATED_NPU_RECORDS``, and so does the first
call each plugin ladder rung serves (:func:`sglang_ascend_hybrid.ops.ladder.on_first_serve`).
A name SGLang reaches that no table emulates is not bound: ``torch_npu`` raises AttributeError,
an ``sgl_kernel_npu`` entry raises NotImplementedError naming it.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import threading
import types
from typing import Callable

# The emulated machine: an Atlas A3 with sgl-kernel-npu 2026.6.1 (tags up to 2026.08.21, which the
# plugin's GDN contracts know), the released conv ops (without the unmerged window-major v2 branch).
CHIP = "A3"
SGL_KERNEL_NPU_VERSION = "2026.6.1"
CONV_VARIANT = "release"

_TORCH_NPU_TABLES = ("kernels_torch_npu", "kernels_moe", "kernels_spec")
_SGL_TABLES = ("kernels_norm_rope", "kernels_gdn_mem", "kernels_spec")

_lock = threading.Lock()
_recorded: set = set()
_plugin_ops: dict[str, Callable] | None = None
_seam_context = None  # the seam's emulator context, entered once and kept for the process


# --------------------------------------------------------------------------- records


def record(kind: str, name: str, **extra) -> None:
    """Append one JSON line for (kind, name, extra) once per process, where records are asked for."""
    key = (kind, name, tuple(sorted(extra.items())))
    with _lock:
        if key in _recorded:
            return
        _recorded.add(key)
    from sglang_ascend_hybrid.envs import ENV

    path = ENV.EMULATED_NPU_RECORDS.get()
    if not path:
        return
    line = json.dumps({"kind": kind, "name": name, "pid": os.getpid(), **extra}, sort_keys=True)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line + "\n")


class _Recorded:
    """An op that records its first call (and its first call from a plugin probe) in this process.
    A Triton-launch emulator (``kernel[grid](...)``) stays indexable by its grid."""

    def __init__(self, kind: str, name: str, fn: Callable) -> None:
        self.kind, self.name, self.__wrapped__ = kind, name, fn
        self.__name__ = getattr(fn, "__name__", name.rpartition(":")[2].rpartition(".")[2])
        self.__doc__ = getattr(fn, "__doc__", None)

    def __call__(self, *args, **kwargs):
        from sglang_ascend_hybrid.ops import probes

        record(self.kind, self.name, probe=bool(probes.probing()))
        return self.__wrapped__(*args, **kwargs)

    def __getattr__(self, attr: str):
        """An overload of the op (``torch_npu.<op>.out``), recorded under its own name."""
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Recorded(self.kind, f"{self.name}.{attr}", getattr(self.__wrapped__, attr))

    def __getitem__(self, grid):
        return _Recorded(self.kind, self.name, self.__wrapped__[grid])

    def __repr__(self) -> str:
        return f"<emulated {self.name}>"


def recorded(kind: str, name: str, fn: Callable) -> Callable:
    """``fn``, recording its first call in this process (see :class:`_Recorded`)."""
    return _Recorded(kind, name, fn)


# --------------------------------------------------------------------------- tables


def _table(module: str, attr: str) -> dict[str, Callable]:
    mod = importlib.import_module(f"sglang_ascend_hybrid.testing.emulated_npu.{module}")
    return dict(getattr(mod, attr))


def torch_npu_ops() -> dict[str, Callable]:
    table: dict[str, Callable] = {}
    for module in _TORCH_NPU_TABLES:
        table.update(_table(module, "TORCH_NPU"))
    return table


def torch_ops_npu() -> dict[str, Callable]:
    table: dict[str, Callable] = {}
    for module in _TORCH_NPU_TABLES:
        table.update(_table(module, "TORCH_OPS_NPU"))
    for name, fn in plugin_ops().items():  # the plugin's torch.ops.npu ops (seam names without a module)
        if ":" not in name:
            table[name] = fn
    from sglang_ascend_hybrid.envs import ENV

    if ENV.EMULATED_NPU_WIDEN_FP32.get() and "causal_conv1d" in table:
        # SGLang's Ascend GDN backend calls torch.ops.npu.causal_conv1d itself; for fp32 numerics runs
        # that call takes fp32 (a separate instance, so its tiling cache is not the plugin's); the
        # plugin's own conv ladder keeps the strict op behind the seam and decides from its contract
        from sglang_ascend_hybrid.emulators.causal_conv1d import NpuCausalConv1d

        table["causal_conv1d"] = NpuCausalConv1d(widen_fp32=True)
    return table


def sgl_kernel_npu_ops() -> dict[str, Callable]:
    """``"sgl_kernel_npu.<module>:<attr>" -> emulator``."""
    table: dict[str, Callable] = {}
    for module in _SGL_TABLES:
        table.update(_table(module, "OPS"))
    for name, fn in plugin_ops().items():
        if ":" in name:
            table[name] = fn
    return table


def plugin_ops() -> dict[str, Callable]:
    """The plugin's own device-op emulators, keyed by seam name, as this machine has them."""
    global _plugin_ops
    if _plugin_ops is None:
        from sglang_ascend_hybrid import patches
        from sglang_ascend_hybrid.emulators import causal_conv1d as conv_emu
        from sglang_ascend_hybrid.emulators import gdn_decode as decode_emu
        from sglang_ascend_hybrid.emulators import gdn_sets
        from sglang_ascend_hybrid.ops.gdn.decode import contract as decode_contract

        # the Triton prefill entry where the installed SGLang's GDN prefill calls it
        triton = patches.release_state(patches.by_name("gdn-extend-ladder")) is None
        ops = dict(conv_emu.emulators(**conv_emu.VARIANTS[CONV_VARIANT]))
        ops.update(gdn_sets.emulators(chip=CHIP, npu_chunk=True, triton=triton, version=SGL_KERNEL_NPU_VERSION))
        entry = decode_contract.installed_decode_entry()
        if entry is not None:
            ops.update(decode_emu.emulators(entry, layout="key_first"))
        _plugin_ops = {name: recorded("device-op", name, fn) for name, fn in ops.items()}
    return _plugin_ops


# --------------------------------------------------------------------------- binding


def install_plugin_emulators() -> None:
    """Put the plugin's emulators behind the seam and the machine's facts in place, for the process."""
    global _seam_context
    if _seam_context is not None:
        return
    from sglang_ascend_hybrid.ops import ladder, seam

    context = seam.install_emulators(plugin_ops())
    context.__enter__()
    facts = seam.install_device_facts(chip=CHIP, sgl_kernel_npu_version=SGL_KERNEL_NPU_VERSION)
    facts.__enter__()
    _seam_context = (context, facts)  # kept alive: a collected generator would undo itself
    ladder.on_first_serve(lambda op, rung: record("rung", op, rung=rung))


# torch_npu names imported at module top by code that runs in SGLang's processes but not called on
# the paths the runtime tests cover: transformers' NPU flash-attention integration
# (``integrations/npu_flash_attention.py``) imports the first two as soon as ``torch_npu`` is
# importable; SGLang 0.5.20's ``distributed/device_communicators/npu_communicator.py`` imports
# ``npu_dynamic_quant`` for its quantised all-reduce.
IMPORTED_NOT_CALLED = ("npu_fusion_attention", "npu_fusion_attention_grad", "npu_dynamic_quant")


def _not_emulated(name: str) -> Callable:
    def op(*args, **kwargs):
        raise NotImplementedError(
            f"{name} is not emulated on the emulated Ascend device (sglang_ascend_hybrid.testing.emulated_npu): "
            "it is only imported on the paths the runtime tests cover; write its emulator from the op's "
            "upstream source before a test reaches it")

    op.__name__ = name.rpartition(".")[2].rpartition(":")[2]
    return op


def bind_torch_npu(namespace: dict) -> None:
    """Fill the fake ``torch_npu`` module's namespace and ``torch.ops.npu``."""
    import torch

    for name in IMPORTED_NOT_CALLED:
        namespace[name] = _not_emulated(f"torch_npu.{name}")
    for name, fn in torch_npu_ops().items():
        namespace[name] = recorded("device-op", f"torch_npu.{name}", fn)
    namespace["_apply_patches"] = _apply_patches
    for name, fn in torch_ops_npu().items():
        setattr(torch.ops.npu, name, recorded("device-op", f"torch.ops.npu.{name}", fn))
    install_plugin_emulators()


def _apply_patches(patches) -> None:
    """torch_npu's patch API (SGLang maps ``torch.profiler`` names to NPU ones): the emulated
    device keeps torch's CPU profiler, so nothing is replaced."""
    return None


def torch_npu_npu_module() -> types.ModuleType:
    """``torch_npu.npu``: ``torch.npu``'s names plus the graph-handler registration SGLang imports."""
    from sglang_ascend_hybrid.testing.emulated_npu import npu_module

    module = types.ModuleType("torch_npu.npu", "torch_npu.npu of the emulated Ascend device")
    for name in dir(npu_module):
        if not name.startswith("__"):
            setattr(module, name, getattr(npu_module, name))
    module.NpuGraphOpHandler = NpuGraphOpHandler
    module.register_npu_graph_handler = register_npu_graph_handler
    sys.modules["torch_npu.npu"] = module
    return module


class NpuGraphOpHandler:
    """Base of torch_npu's per-op graph-update handlers; the emulated graph re-runs the forward,
    so handlers are registered and never asked."""


def register_npu_graph_handler(op_names):
    def register(cls):
        return cls

    return register


def entry(module: str, attr: str) -> Callable:
    """What the generated ``sgl_kernel_npu`` tree binds ``module.attr`` to: the emulator, or a callable
    that raises NotImplementedError naming the entry."""
    name = f"{module}:{attr}"
    table = sgl_kernel_npu_ops()
    if name in table:
        fn = table[name]
        return fn if getattr(fn, "__wrapped__", None) is not None else recorded("device-op", name, fn)
    return _not_emulated(name)
