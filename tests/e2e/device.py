"""The device ops of a run, in one place (their factories' signatures follow the
contracts work): the plugin's emulators with the NPU contracts behind the seam, and the
two NPU ops SGLang's Ascend GDN backend calls directly (``torch.ops.npu.
chunk_gated_delta_rule``, ``torch.ops.npu.causal_conv1d``) bound to the same emulators."""

from __future__ import annotations

import contextlib
from typing import Callable, Optional

import pytest
import torch

from sglang_ascend_hybrid.emulators import causal_conv1d as conv_emu
from sglang_ascend_hybrid.emulators import gdn as gdn_emu
from sglang_ascend_hybrid.ops import seam


def gdn_emulators(*, npu_chunk_refuse: Optional[Callable] = None) -> dict:
    return gdn_emu.emulators(npu_chunk_refuse=npu_chunk_refuse)


@contextlib.contextmanager
def chunk_op_only(*, npu_chunk_refuse: Optional[Callable] = None):
    """fp32 GDN runs: SGLang's direct call of ``torch.ops.npu.chunk_gated_delta_rule`` meets
    the emulator of that op (which takes fp16 / bf16 only, so an fp32 model is refused and
    the plugin's ladder takes over); nothing else behind the seam, so the ladder ends on
    its torch rung."""
    ops = gdn_emulators(npu_chunk_refuse=npu_chunk_refuse)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch.ops.npu, "chunk_gated_delta_rule", ops[gdn_emu.OP_NPU_CHUNK], raising=False)
        yield ops


@contextlib.contextmanager
def npu_emulators(*, npu_chunk_refuse: Optional[Callable] = None, mega_predicate: Optional[Callable] = None,
                  wrap_chunk: Optional[Callable] = None):
    """bf16 runs: every emulator behind the seam; SGLang's direct NPU calls bound to the
    same emulators.  ``wrap_chunk(op)`` may wrap the chunk op SGLang calls (a refusal
    mid-model)."""
    ops = dict(conv_emu.emulators())
    ops.update(gdn_emu.emulators(npu_chunk_refuse=npu_chunk_refuse, mega_predicate=mega_predicate))
    if wrap_chunk is not None:
        ops[gdn_emu.OP_NPU_CHUNK] = wrap_chunk(ops[gdn_emu.OP_NPU_CHUNK])
    calls: dict = {}
    ops = {name: _counted(name, fn, calls) for name, fn in ops.items()}
    with seam.install_emulators(ops), pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch.ops.npu, "chunk_gated_delta_rule", ops[gdn_emu.OP_NPU_CHUNK], raising=False)
        mp.setattr(torch.ops.npu, "causal_conv1d", ops[conv_emu.OP_ACLNN], raising=False)
        yield calls


def _counted(name: str, fn: Callable, calls: dict) -> Callable:
    """``calls[name]``: how many times the op was entered (refusals included)."""
    def op(*args, **kwargs):
        calls[name] = calls.get(name, 0) + 1
        return fn(*args, **kwargs)

    return op


# Ops by name, for the tests' call counts.
OP_CONV_FN_V2, OP_CONV_UPDATE_V2, OP_CONV_ACLNN = conv_emu.OP_FN_V2, conv_emu.OP_UPDATE_V2, conv_emu.OP_ACLNN
OP_GDN_CHUNK, OP_GDN_MEGA = gdn_emu.OP_NPU_CHUNK, gdn_emu.OP_MEGA
