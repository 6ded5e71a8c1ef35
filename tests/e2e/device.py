"""The device ops of a run, in one place: the plugin's emulators with the NPU contracts
(``sglang_ascend_hybrid.emulators``) behind the seam, on an emulated Atlas A3, and the
NPU ops SGLang's Ascend GDN backend calls directly (``torch.ops.npu.causal_conv1d``,
``torch.ops.npu.chunk_gated_delta_rule``) bound to the same emulators."""

from __future__ import annotations

import contextlib
from typing import Callable, Optional

import pytest
import torch

from sglang_ascend_hybrid.emulators import causal_conv1d as conv_emu
from sglang_ascend_hybrid.emulators import gdn_decode as decode_emu
from sglang_ascend_hybrid.emulators import gdn_sets
from sglang_ascend_hybrid.ops import probes, seam
from sglang_ascend_hybrid.ops.gdn.contract import OP_MEGA, OP_NPU_CHUNK
from sglang_ascend_hybrid.ops.gdn.decode import contract as decode_contract

CHIP = "A3"  # Atlas A3: the sgl-kernel-npu build with every op; fp32 GDN states refused by the chunk op


DECODE_ENTRY = decode_contract.installed_decode_entry()  # what the installed SGLang's gdn_triton imports
OP_GDN_DECODE = decode_contract.DECODE_ENTRIES[DECODE_ENTRY]


def gdn_emulators(*, npu_chunk_refuse: Optional[Callable] = None, mega_predicate: Optional[Callable] = None,
                  npu_chunk: bool = True, decode_layout: str = "key_first", triton: Optional[bool] = None) -> dict:
    """``triton``: also sgl-kernel-npu's Triton prefill entry (of the current release, reading
    ``os.environ`` at every call); default: where the installed SGLang's GDN prefill calls it
    (:func:`tests.e2e.npu_standins.entry_route_serves_prefill`).  ``npu_chunk=False``: an sgl-kernel-npu build
    without ``torch.ops.npu.chunk_gated_delta_rule``
    (every tag up to 2026.08.21: the op is sgl-kernel-npu PR #747).  ``decode_layout``: how the
    build's Triton decode kernel addresses the SSM pool (key first as its readable source does,
    or value first)."""
    if triton is None:
        from tests.e2e.npu_standins import entry_route_serves_prefill

        triton = entry_route_serves_prefill()
    ops = gdn_sets.emulators(mega_predicate, npu_chunk_refuse, chip=CHIP, npu_chunk=npu_chunk, triton=triton)
    ops.update(decode_emu.emulators(DECODE_ENTRY, layout=decode_layout))
    return ops


@contextlib.contextmanager
def machine():
    """The device facts of the emulated machine (chip generation)."""
    with seam.install_device_facts(chip=CHIP):
        yield


@contextlib.contextmanager
def gdn_fp32(decode_layout: str = "key_first"):
    """fp32 GDN runs: the GDN emulators behind the seam on the emulated machine; their
    contracts (bf16 / fp16 only) rule every device rung out, so the plugin's ladder
    predicts the refusals and serves the model on its torch rung.  SGLang's direct conv
    call stays on the fp32 stand-in of :mod:`tests.e2e.npu_standins`."""
    calls: dict = {}
    ops = {name: _counted(name, fn, calls) for name, fn in gdn_emulators(decode_layout=decode_layout).items()}
    with machine(), seam.install_emulators(ops):
        yield calls


@contextlib.contextmanager
def npu_emulators(*, npu_chunk_refuse: Optional[Callable] = None, mega_predicate: Optional[Callable] = None,
                  wrap_chunk: Optional[Callable] = None, npu_chunk: bool = True, conv_variant: str = "all",
                  decode_layout: str = "key_first", triton: Optional[bool] = None):
    """bf16 runs: every emulator behind the seam; SGLang's direct NPU calls bound to the
    same emulators.  ``wrap_chunk(op)`` may wrap the chunk op SGLang calls (a refusal
    mid-model).  ``conv_variant``: which sgl-kernel-npu conv entry points the build has
    (``conv_emu.VARIANTS``: ``"all"``, or ``"release"`` -- the released ops without the
    unmerged window-major v2 branch)."""
    ops = dict(conv_emu.emulators(**conv_emu.VARIANTS[conv_variant]))
    ops.update(gdn_emulators(npu_chunk_refuse=npu_chunk_refuse, mega_predicate=mega_predicate, npu_chunk=npu_chunk,
                             decode_layout=decode_layout, triton=triton))
    if wrap_chunk is not None:
        ops[OP_NPU_CHUNK] = wrap_chunk(ops[OP_NPU_CHUNK])
    calls: dict = {}
    ops = {name: _counted(name, fn, calls) for name, fn in ops.items()}
    with machine(), seam.install_emulators(ops), pytest.MonkeyPatch.context() as mp:
        # SGLang's Ascend GDN backend calls these two directly (the plugin's prefill hook
        # replaces the chunk op's call site with its ladder, which reaches the op via the seam)
        if OP_NPU_CHUNK in ops:
            mp.setattr(torch.ops.npu, "chunk_gated_delta_rule", ops[OP_NPU_CHUNK], raising=False)
        else:
            mp.delattr(torch.ops.npu, "chunk_gated_delta_rule", raising=False)
        mp.setattr(torch.ops.npu, "causal_conv1d", ops[conv_emu.OP_ACLNN], raising=False)
        yield calls


def _counted(name: str, fn: Callable, calls: dict) -> Callable:
    """``calls[name]``: how many times the op was entered to serve (refusals included);
    ``calls["probe:" + name]``: how many times a probe called it (before serving)."""
    def op(*args, **kwargs):
        key = f"probe:{name}" if probes.probing() else name
        calls[key] = calls.get(key, 0) + 1
        return fn(*args, **kwargs)

    return op


# Ops by name, for the tests' call counts.
OP_CONV_FN_V2, OP_CONV_UPDATE_V2, OP_CONV_ACLNN = conv_emu.OP_FN_V2, conv_emu.OP_UPDATE_V2, conv_emu.OP_ACLNN
OP_CONV_UPDATE_V2_MAIN = conv_emu.OP_UPDATE_V2_MAIN
OP_GDN_CHUNK, OP_GDN_MEGA = OP_NPU_CHUNK, OP_MEGA
