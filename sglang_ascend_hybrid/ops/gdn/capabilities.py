"""What each GDN device kernel accepts (the kernel table), without touching a device.

The mega chunk kernel of sgl-kernel-npu (``csrc/mega_chunk_gdn``) checks its
input in ``check_shape``; its accepted (value heads, key heads) set changed
between releases, so the set is looked up by the installed sgl-kernel-npu
version.  No released version number is known to map to an older set, so
every version currently gets :data:`CURRENT_MEGA_VALUE_HEADS`; add rows to
:data:`MEGA_KERNEL_TABLE` when a release changes the set.  Call-time refusals
(see :mod:`.dispatch`) catch a table that is wrong for the installed build.
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Optional

import torch

PairPredicate = Callable[[int, int], bool]

# sgl-kernel-npu main (mega_chunk_gdn.cpp, is_supported_head_pair)
CURRENT_MEGA_VALUE_HEADS = frozenset({8, 12, 16, 24, 32, 48, 64})
MEGA_HEAD_DIM = 128
# run_mega_chunk_gdn casts q/k/v/beta to fp16 itself; fp32 input would silently lose precision.
MEGA_INPUT_DTYPES = (torch.float16, torch.bfloat16)

# torch.ops.npu.chunk_gated_delta_rule / recurrent_gated_delta_rule (reported limits)
NPU_OP_MAX_HEADS = 256
NPU_OP_MAX_HEAD_DIM = 512
NPU_OP_DTYPES = (torch.float16, torch.bfloat16)

# chunk_gated_delta_rule_npu (Triton) asserts q.dtype != float32.
TRITON_DTYPES = (torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class MegaKernelEntry:
    """Head pairs one range of sgl-kernel-npu releases accepts."""

    min_version: str  # first release (PEP 440 text) with this set
    value_heads: frozenset

    def supports(self, value_heads: int, key_heads: int) -> bool:
        return key_heads > 0 and value_heads % key_heads == 0 and value_heads in self.value_heads


CURRENT_MEGA_ENTRY = MegaKernelEntry("0", CURRENT_MEGA_VALUE_HEADS)
# Newest first.  Only the current release's set is known to be tied to a version.
MEGA_KERNEL_TABLE: tuple[MegaKernelEntry, ...] = (CURRENT_MEGA_ENTRY,)


@lru_cache(maxsize=1)
def installed_kernel_version() -> Optional[str]:
    """Version of the installed sgl-kernel-npu distribution (read from metadata, no import)."""
    for dist in ("sgl-kernel-npu", "sgl_kernel_npu"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _version_key(text: str) -> tuple:
    parts = []
    for piece in text.split("+")[0].split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def mega_entry(version: Optional[str] = None) -> MegaKernelEntry:
    """The table row for ``version`` (default: the installed one; unknown -> current release)."""
    version = installed_kernel_version() if version is None else version
    if version is None:
        return CURRENT_MEGA_ENTRY
    for entry in MEGA_KERNEL_TABLE:
        if _version_key(version) >= _version_key(entry.min_version):
            return entry
    return CURRENT_MEGA_ENTRY


def mega_pair_predicate(version: Optional[str] = None) -> PairPredicate:
    """``(value_heads, key_heads) -> bool`` for the mega kernel of ``version``."""
    return mega_entry(version).supports


def mega_supports_layout(head_dim_k: int, head_dim_v: int, dtype: torch.dtype) -> bool:
    return head_dim_k == MEGA_HEAD_DIM and head_dim_v == MEGA_HEAD_DIM and dtype in MEGA_INPUT_DTYPES


def npu_op_supports(value_heads: int, key_heads: int, head_dim_k: int, head_dim_v: int,
                    dtype: torch.dtype) -> bool:
    """Reported limits of the fused Ascend GDN ops (chunk and recurrent)."""
    return (0 < key_heads <= NPU_OP_MAX_HEADS and 0 < value_heads <= NPU_OP_MAX_HEADS
            and value_heads % key_heads == 0
            and 0 < head_dim_k <= NPU_OP_MAX_HEAD_DIM and 0 < head_dim_v <= NPU_OP_MAX_HEAD_DIM
            and dtype in NPU_OP_DTYPES)


def triton_supports(value_heads: int, key_heads: int, dtype: torch.dtype) -> bool:
    return key_heads > 0 and value_heads % key_heads == 0 and dtype in TRITON_DTYPES
