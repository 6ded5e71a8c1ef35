"""Input validation of packed attention: the tensors and both sides' boundaries, from the host copy
when one is given (see :mod:`.api` for the host boundary contract).  Every check raises
:func:`~sglang_ascend_hybrid.ops.errors.bad_input` (``ValueError``, ``"fused_infer_attention_varlen:
<argument>=<value>: expected <what>"``); the conditions are upstream's checks and the ones it leaves to
the kernel."""

from __future__ import annotations

import operator
from itertools import pairwise
from typing import Sequence

import torch

from sglang_ascend_hybrid.envs import ENV
from sglang_ascend_hybrid.ops.errors import bad_input, shown

OP = "fused_infer_attention_varlen"
_DEVICE_TYPES = ("npu", "cpu")
_CU_DTYPES = (torch.int32, torch.int64)


def _host_values(host, name: str) -> tuple[int, ...]:
    """A caller's host copy as a tuple of ints (never reads device memory)."""
    host_name = f"{name}_host"
    if isinstance(host, torch.Tensor):
        if host.device.type != "cpu":
            raise bad_input(f"{host_name}.device", host.device, "cpu: host data (a list, tuple or CPU tensor of "
                            "ints); reading a device tensor would be a device-to-host sync", op=OP)
        if host.dtype.is_floating_point or host.dtype.is_complex or host.dtype == torch.bool or host.ndim != 1:
            raise bad_input(host_name, host, "a 1D integer tensor (or a list / tuple of ints)", op=OP)
        return tuple(host.tolist())
    if isinstance(host, (str, bytes)) or not isinstance(host, Sequence):
        raise bad_input(host_name, repr(host), "a list, tuple or CPU tensor of ints", op=OP)
    values = []
    for b in host:
        try:
            if isinstance(b, bool):
                raise TypeError
            values.append(operator.index(b))
        except TypeError:
            raise bad_input(host_name, list(host), "integers only", op=OP) from None
    return tuple(values)


def packed_boundaries(
    cu_seqlens: torch.Tensor | None,
    cu_seqlens_host: Sequence[int] | None,
    total_tokens: int,
    name: str,
) -> tuple[int, ...]:
    """Validated host boundaries of one side; reads the device tensor (one
    ``.tolist()``) only when no host copy is given, or to compare it with the
    host copy under ``SGLANG_ASCEND_HYBRID_DEBUG_CHECKS=1``."""
    if not isinstance(cu_seqlens, torch.Tensor) or cu_seqlens.ndim != 1:
        raise bad_input(name, cu_seqlens, "a 1D int32 or int64 tensor", op=OP)
    if cu_seqlens.dtype not in _CU_DTYPES:
        raise bad_input(f"{name}.dtype", cu_seqlens.dtype, "torch.int32 or torch.int64", op=OP)
    source = name
    if cu_seqlens_host is None:
        bounds = tuple(cu_seqlens.tolist())
    else:
        source = f"{name}_host"
        bounds = _host_values(cu_seqlens_host, name)
        if len(bounds) != cu_seqlens.numel():
            raise bad_input(source, list(bounds), f"{cu_seqlens.numel()} entries, as many as {name} has", op=OP)
        if ENV.DEBUG_CHECKS.get():
            device_values = tuple(cu_seqlens.tolist())
            if device_values != bounds:
                raise bad_input(source, list(bounds), f"the values of {name}, {shown(list(device_values))} "
                                f"({ENV.DEBUG_CHECKS.name}=1 compares them; without it the host copy is trusted)",
                                op=OP)
    if len(bounds) < 2 or bounds[0] != 0:
        raise bad_input(source, list(bounds), "offsets starting at 0, at least one sequence", op=OP)
    if bounds[-1] != total_tokens:
        raise bad_input(source, list(bounds), f"offsets ending at the packed token count {total_tokens}", op=OP)
    if any(stop < start for start, stop in pairwise(bounds)):
        raise bad_input(source, list(bounds), "non-decreasing offsets", op=OP)
    return bounds


def check_tensors(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    tensors = {"q": q, "k": k, "v": v}
    for n, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise bad_input(n, t, "a torch.Tensor", op=OP)
    for n, t in tensors.items():
        if t.ndim != 3:
            raise bad_input(n, t, "a 3D tensor in [T, N, D] layout", op=OP)
    # Upstream accepts NPU tensors only; CPU tensors are accepted here too (they
    # take the torch path, or an installed emulator).
    if q.device.type not in _DEVICE_TYPES:
        raise bad_input("q.device", q.device, "an NPU (or the CPU)", op=OP)
    for n, t in (("k", k), ("v", v)):
        if t.device != q.device:
            raise bad_input(f"{n}.device", t.device, f"q's device ({q.device})", op=OP)
    for n, t in tensors.items():  # the dtype check upstream leaves to the kernel
        if not t.dtype.is_floating_point:
            raise bad_input(f"{n}.dtype", t.dtype, "a floating-point dtype", op=OP)
        if t.dtype != q.dtype:
            raise bad_input(f"{n}.dtype", t.dtype, f"q's dtype ({q.dtype})", op=OP)
    if k.shape[:2] != v.shape[:2]:
        raise bad_input("v", v, f"k's token and head counts [T, N] = {list(k.shape[:2])}", op=OP)
    if q.shape[-1] != k.shape[-1]:
        raise bad_input("k", k, f"q's head dimension D = {q.shape[-1]}", op=OP)
    for n, t in tensors.items():
        if t.shape[1] == 0 or t.shape[2] == 0:
            raise bad_input(n, t, "at least one head and a head dimension >= 1", op=OP)
    # Upstream leaves this to the kernel; the torch path needs it too.
    if q.shape[1] % k.shape[1]:
        raise bad_input("q", q, f"a head count that is a multiple of the key/value head count ({k.shape[1]})", op=OP)
