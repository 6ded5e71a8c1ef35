"""What every GDN ladder keys its decisions on, and the lines it says about them.

:class:`GdnSignature` is the :class:`~sglang_ascend_hybrid.ops.signature.Signature` of a call that
the prefill, decode and verify ladders hand their rungs' predicates (and remember refusals by);
:func:`rejection_line` and :func:`log_path` are the ladders' two log lines.  Shared by
:mod:`.prefill`, :mod:`.decode` and :mod:`.verify`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Optional

import torch

from sglang_ascend_hybrid.logutil import log_once
from sglang_ascend_hybrid.ops.signature import Signature, dtype_name

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class GdnSignature(Signature):
    """Shape facts a GDN kernel's acceptance depends on.  Its text names the head pair, the head
    dims, the inputs' dtype, then the state dtype and ``+chunk_states`` when given:
    ``(NumValueHeads, NumKeyHeads)=(32, 16) K=128 V=128 bfloat16 state=float32 +chunk_states``."""

    value_heads: int
    key_heads: int
    head_dim_k: int
    head_dim_v: int
    dtype: torch.dtype
    chunk_states: bool = False
    state_dtype: Optional[torch.dtype] = None  # dtype of the SSM states (the pool's); None: no state given

    def __str__(self) -> str:
        extra = " +chunk_states" if self.chunk_states else ""
        state = f" state={dtype_name(self.state_dtype)}" if self.state_dtype is not None else ""
        return (f"(NumValueHeads, NumKeyHeads)=({self.value_heads}, {self.key_heads}) "
                f"K={self.head_dim_k} V={self.head_dim_v} {dtype_name(self.dtype)}{state}{extra}")


def rejection_line(op: str):
    """The line a GDN ladder says once per rung and signature its predicate turns down."""
    return lambda rung, sig, reason: f"sglang-ascend-hybrid: GDN {op} {sig} cannot use the {rung} kernel: {reason}"


def log_path(op: str, rung: str, sig: GdnSignature, detail: str = "") -> None:
    """Say once per (op, rung, signature) which kernel serves (INFO)."""
    log_once(logger, ("gdn-path", op, rung, sig),
             "sglang-ascend-hybrid: GDN %s %s runs on the %s kernel%s", op, sig, rung, detail)


_PRECISION = {torch.float32: 3, torch.bfloat16: 1, torch.float16: 1}


def keeps_precision(kernel_state_dtype: torch.dtype, pool_dtype: Optional[torch.dtype]) -> bool:
    """A kernel may hold the state in ``kernel_state_dtype`` without lowering the pool's precision."""
    return pool_dtype is None or _PRECISION.get(kernel_state_dtype, 0) >= _PRECISION.get(pool_dtype, 3)
