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

from sglang_ascend_hybrid.ops.errors import bad_input


def cuda_layout_view(window_major: torch.Tensor, state_len: Optional[int] = None) -> torch.Tensor:
    """``[..., slots, window, C]`` -> ``[..., slots, C, state_len]`` view of the last ``state_len`` rows."""
    if window_major.dim() < 2:
        raise bad_input("window_major", window_major, "shape (..., window, channels)", op="cuda_layout_view")
    window = window_major.shape[-2]
    state_len = window if state_len is None else int(state_len)
    if not 1 <= state_len <= window:
        raise bad_input("state_len", state_len, f"1 <= state_len <= window ({window})", op="cuda_layout_view")
    return window_major[..., window - state_len:, :].transpose(-1, -2)


def window_major_view(cuda_view: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`cuda_layout_view`: ``[..., C, S]`` -> ``[..., S, C]`` (a view)."""
    return cuda_view.transpose(-1, -2)


def shares_storage(view: torch.Tensor, pool: torch.Tensor) -> bool:
    return view.untyped_storage().data_ptr() == pool.untyped_storage().data_ptr()


def draft_window(view: torch.Tensor, rows: int) -> torch.Tensor:
    """The window-major draft window ``[slots, rows, C]`` behind a :func:`cuda_layout_view`
    ``[slots, C, S]`` of a pool's LAST ``S`` rows (as :func:`layer_cache_cuda_view` hands them out
    with ``state_lens``): the same memory, ``rows - S`` rows further back.  The pool's per-slot
    stride must be exactly ``rows`` rows (``_init_npu_conv_state``'s contiguous
    ``[layers, slots, (W-1) + (draft-1), C]``); anything else raises ``ValueError``."""
    wm = window_major_view(view)
    if wm.dim() != 3 or wm.stride(2) != 1:
        raise bad_input("view", f"shape {tuple(view.shape)} strides {view.stride()}", "the (slots, C, S) transposed "
                        "view of a window-major pool", op="draft_window")
    state_len, channels = wm.shape[1], wm.shape[2]
    if rows < state_len or wm.stride(1) != channels or wm.stride(0) != rows * channels:
        raise bad_input("rows", rows, f"the pool's rows per slot (its slot stride {wm.stride(0)} is "
                        f"{wm.stride(0) / max(channels, 1):g} rows of {channels} channels, the view holds {state_len})",
                        op="draft_window")
    offset = wm.storage_offset() - (rows - state_len) * channels
    if offset < 0:
        before = wm.storage_offset() // max(channels, 1)
        raise bad_input("rows", rows, f"at most {state_len + before} (the view's {state_len} rows and the {before} "
                        "rows before them in the pool)", op="draft_window")
    return wm.as_strided((wm.shape[0], rows, channels), (wm.stride(0), channels, 1), offset)


def layer_cache_cuda_view(layer_cache, window_major: Optional[Sequence[bool]] = None,
                          state_lens: Optional[Sequence[Optional[int]]] = None):
    """A copy of a ``MambaPool.State`` (frozen dataclass) whose window-major
    ``conv`` entries are replaced by :func:`cuda_layout_view` s of their last ``state_lens[i]``
    rows (None: all window rows, right when the pool has no draft rows); entries marked False in
    ``window_major`` and every other field are shared unchanged."""
    convs = list(layer_cache.conv)
    flags = list(window_major) if window_major is not None else [True] * len(convs)
    lens = list(state_lens) if state_lens is not None else [None] * len(convs)
    if len(flags) != len(convs) or len(lens) != len(convs):
        name, got = ("window_major", flags) if len(flags) != len(convs) else ("state_lens", lens)
        raise bad_input(name, got, f"one entry per conv state ({len(convs)})", op="layer_cache_cuda_view")
    views = [cuda_layout_view(c, n) if wm else c for c, wm, n in zip(convs, flags, lens)]
    return dataclasses.replace(layer_cache, conv=views)
