"""Window-major NPU conv pool <-> the CUDA-layout views model code expects, without copies.

SGLang's NPU mamba pool (``_init_npu_conv_state`` in
``sglang/srt/hardware_backend/npu/memory_pool_npu.py``) stores every conv state
window-major, ``[layers, slots, window, channels]`` with
``window = (W - 1) + (draft - 1)``; the state of a request is the last ``W - 1``
window rows.  Short-conv model code (LFM2's ``causal_conv1d_*`` calls, ZAYA1's
``cca_extend`` / ``cca_decode``) indexes the CUDA layout ``[slots, channels, W - 1]``.

:func:`cuda_layout_view` is a transposed strided view of the last ``W - 1``
rows: reads see the pool, in-place writes (``index_copy_``, ``__setitem__``,
the conv ops) land in the pool, and rows of requests outside the batch are never
touched.  :func:`window_major_view` is its inverse.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import torch


def cuda_layout_view(window_major: torch.Tensor, state_len: Optional[int] = None) -> torch.Tensor:
    """``[..., slots, window, C]`` -> ``[..., slots, C, state_len]`` view of the last ``state_len`` rows."""
    if window_major.dim() < 2:
        raise ValueError(f"window_major has shape {tuple(window_major.shape)}: expected (..., window, channels)")
    window = window_major.shape[-2]
    state_len = window if state_len is None else int(state_len)
    if not 1 <= state_len <= window:
        raise ValueError(f"state_len={state_len}: expected 1 <= state_len <= window ({window})")
    return window_major[..., window - state_len:, :].transpose(-1, -2)


def window_major_view(cuda_view: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`cuda_layout_view`: ``[..., C, S]`` -> ``[..., S, C]`` (a view)."""
    return cuda_view.transpose(-1, -2)


def shares_storage(view: torch.Tensor, pool: torch.Tensor) -> bool:
    return view.untyped_storage().data_ptr() == pool.untyped_storage().data_ptr()


def layer_cache_cuda_view(layer_cache, window_major: Optional[Sequence[bool]] = None):
    """A copy of a ``MambaPool.State`` (frozen dataclass) whose window-major
    ``conv`` entries are replaced by :func:`cuda_layout_view` s (all window rows:
    the pool has no draft rows when speculative decoding is off); entries marked
    False in ``window_major`` and every other field are shared unchanged."""
    convs = list(layer_cache.conv)
    flags = list(window_major) if window_major is not None else [True] * len(convs)
    if len(flags) != len(convs):
        raise ValueError(f"window_major has {len(flags)} entries: expected one per conv state ({len(convs)})")
    views = [cuda_layout_view(c) if wm else c for c, wm in zip(convs, flags)]
    return dataclasses.replace(layer_cache, conv=views)
