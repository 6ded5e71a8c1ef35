"""What the short-conv ladders key their decisions on: :class:`ConvSignature`, and the conv-state
layout facts it names (:func:`is_window_major`, :func:`layout_tag`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from sglang_ascend_hybrid.ops.signature import Signature, dtype_name


def is_window_major(conv_states: Optional[torch.Tensor]) -> bool:
    """``[slots, dim, S]`` whose channel axis is the unit-stride one: a transposed
    view of a ``[slots, S, dim]`` (window-major) pool."""
    return (conv_states is not None and conv_states.dim() == 3
            and conv_states.stride(1) == 1 and conv_states.stride(2) >= max(conv_states.shape[1], 2))


def layout_tag(conv_states: Optional[torch.Tensor]) -> str:
    if conv_states is None:
        return "none"
    if is_window_major(conv_states):
        return "window-major" if conv_states.transpose(1, 2).is_contiguous() else "window-major-strided"
    return "channel-major"


@dataclass(frozen=True)
class ConvSignature(Signature):
    """Shape facts a short-conv kernel's acceptance depends on.  Its text is the base's field
    tuple: ``('update', 3, 64, 'float16', 'float16', 'float16', 'window-major', 2)``."""

    kind: str                  # the op: "fn" (prefill), "update" (decode) or "verify"
    width: int                 # the filter width W
    dim: int                   # channels
    x_dtype: str               # dtype names (:func:`~sglang_ascend_hybrid.ops.signature.dtype_name`)
    weight_dtype: str
    state_dtype: str           # "none": the call has no state
    layout: str                # :func:`layout_tag` of the ``[slots, dim, S]`` state view
    state_len: Optional[int]   # S, the state view's rows per slot (None: no state)

    @classmethod
    def of(cls, kind: str, x: torch.Tensor, weight: torch.Tensor, state: Optional[torch.Tensor], *,
           dim: int) -> ConvSignature:
        """The signature of a ``kind`` call on ``x`` (``dim`` channels) with ``weight [dim, W]`` and
        the ``[slots, dim, S]`` state view ``state`` (None: no state)."""
        return cls(kind, int(weight.shape[1]), dim, dtype_name(x.dtype), dtype_name(weight.dtype),
                   "none" if state is None else dtype_name(state.dtype), layout_tag(state),
                   None if state is None else int(state.shape[2]))
