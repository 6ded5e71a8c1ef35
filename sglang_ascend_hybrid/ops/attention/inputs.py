"""Input validation of packed attention (upstream-compatible messages first): the tensors and
both sides' boundaries, from the host copy when one is given (see :mod:`.api` for the host
boundary contract).  Every check raises ``ValueError`` naming the argument, its value and what
was expected."""

from __future__ import annotations

import operator
from itertools import pairwise
from typing import Sequence

import torch

from sglang_ascend_hybrid.envs import ENV

_DEVICE_TYPES = ("npu", "cpu")


def _host_values(host, name: str) -> tuple[int, ...]:
    """A caller's host copy as a tuple of ints (never reads device memory)."""
    host_name = f"{name}_host"
    if isinstance(host, torch.Tensor):
        if host.device.type != "cpu":
            raise ValueError(f"{host_name} is a tensor on {host.device}: expected host data (a list, "
                             "tuple or CPU tensor of ints); reading it would be a device-to-host sync")
        if host.dtype.is_floating_point or host.dtype.is_complex or host.dtype == torch.bool or host.ndim != 1:
            raise ValueError(f"{host_name} is a {host.ndim}D {host.dtype} tensor: expected a 1D integer tensor")
        return tuple(host.tolist())
    if isinstance(host, (str, bytes)) or not isinstance(host, Sequence):
        raise ValueError(f"{host_name}={host!r}: expected a list, tuple or CPU tensor of ints")
    values = []
    for b in host:
        try:
            if isinstance(b, bool):
                raise TypeError
            values.append(operator.index(b))
        except TypeError:
            raise ValueError(f"{host_name}={list(host)!r}: expected integers only") from None
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
    if cu_seqlens is None:
        raise ValueError(f"{name} is required for NPU packed attention")
    if not isinstance(cu_seqlens, torch.Tensor):
        raise ValueError(f"{name} must be a 1D int32 or int64 tensor; got {type(cu_seqlens).__name__}")
    if cu_seqlens.ndim != 1 or cu_seqlens.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"{name} must be a 1D int32 or int64 tensor")
    if cu_seqlens_host is None:
        bounds = tuple(cu_seqlens.tolist())
    else:
        bounds = _host_values(cu_seqlens_host, name)
        if len(bounds) != cu_seqlens.numel():
            raise ValueError(f"{name} and its host copy must have the same length")
        if ENV.DEBUG_CHECKS.get():
            device_values = tuple(cu_seqlens.tolist())
            if device_values != bounds:
                raise ValueError(
                    f"{name}_host={list(bounds)} disagrees with {name}={list(device_values)}: expected the "
                    f"host copy to equal the device tensor ({ENV.DEBUG_CHECKS.name}=1 compares them; "
                    "without it the host copy is trusted)")
    if len(bounds) < 2 or bounds[0] != 0:
        raise ValueError(f"{name} must start with 0 and contain at least one sequence")
    if bounds[-1] != total_tokens:
        raise ValueError(
            f"{name} must end at the packed token count {total_tokens}, got {bounds[-1]}")
    if any(stop < start for start, stop in pairwise(bounds)):
        raise ValueError(f"{name} must be non-decreasing")
    return bounds


def check_tensors(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    tensors = {"q": q, "k": k, "v": v}
    for n, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"NPU packed attention requires q, k, and v to be tensors; {n} is a "
                             f"{type(t).__name__}")
    bad = [n for n, t in tensors.items() if t.ndim != 3]
    if bad:
        raise ValueError("NPU packed attention requires q, k, and v in [T, N, D] layout; "
                         f"invalid tensors: {', '.join(bad)} (got "
                         f"{', '.join(f'{n} of shape {list(tensors[n].shape)}' for n in bad)})")
    # Upstream accepts NPU tensors only; CPU tensors are accepted here too (they
    # take the torch path, or an installed emulator).
    bad = [n for n, t in tensors.items()
           if t.device.type not in _DEVICE_TYPES or t.device != q.device]
    if bad:
        raise ValueError("NPU packed attention requires q, k, and v on the same NPU; "
                         f"invalid tensors: {', '.join(bad)} (got "
                         f"{', '.join(f'{n} on {tensors[n].device}' for n in bad)}, q on {q.device})")
    for n, t in tensors.items():  # the dtype check upstream leaves to the kernel
        if not t.dtype.is_floating_point:
            raise ValueError(f"NPU packed attention requires floating-point q, k, and v; got {n} with "
                             f"dtype {t.dtype}")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError("NPU packed attention requires q, k, and v with the same dtype; got "
                         f"q {q.dtype}, k {k.dtype}, v {v.dtype}")
    if k.shape[:2] != v.shape[:2]:
        raise ValueError("NPU packed attention requires matching K/V token and head counts; got "
                         f"k [T, N] = {list(k.shape[:2])}, v [T, N] = {list(v.shape[:2])}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError("NPU packed attention requires matching Q/K head dimensions; got "
                         f"q D = {q.shape[-1]}, k D = {k.shape[-1]}")
    for n, t in tensors.items():
        if t.shape[1] == 0 or t.shape[2] == 0:
            raise ValueError(f"NPU packed attention requires at least one head and a head dimension "
                             f">= 1; got {n} of shape {list(t.shape)}")
    # Upstream leaves this to the kernel; the torch path needs it too.
    if k.shape[1] == 0 or q.shape[1] % k.shape[1]:
        raise ValueError(f"NPU packed attention requires the query head count to be a "
                         f"multiple of the key/value head count, got q heads={q.shape[1]}, "
                         f"k heads={k.shape[1]}")
