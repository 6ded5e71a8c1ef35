"""The physical layout of SGLang's GDN SSM pool, decided from strides, never from the view's shape.

Every NPU op on the pool (``chunk_gated_delta_rule``, ``recurrent_gated_delta_rule``), SGLang's
speculative commit (sgl-kernel-npu ``move_intermediate_cache``, which copies raw memory) and PD
transfer (``data_ptr`` byte ranges) take the pool's **bytes** as value first ``[.., Hv, V, K]``.
SGLang allocates it so (``temporal_state_shape == (HV, V, K)``), but it does not always hand the
GDN layers a view in that order: SGLang 0.5.20 with speculative decoding on NPU hands them
``temporal_state.transpose(-1, -2)`` (sglang ``mem_cache/memory_pool.py`` ~739-746 of 0.5.20), a
view that is logically ``[.., Hv, K, V]`` while its bytes stay value first.  Code that indexes such
a view logically as value first writes the pool physically key first, and the commit then hands
every later step a transposed state.

So the plugin reads and writes the pool only through :func:`value_first`, the view whose logical
order is the physical one, and gives SGLang back what it writes through its own view in that view's
order (:func:`in_view_order`).  The decision is made from the tensor's strides (host metadata: no
device sync, capture-safe), never from the SGLang release.  A layout that is neither the contiguous
order nor that transposed view is refused (:class:`PoolLayoutError`): at startup by
:func:`check_pool` (the GDN backend probe), and at call time by :func:`value_first`.
"""

from __future__ import annotations

from typing import Optional

import torch

VALUE_FIRST = "value_first"          # the view's order is the physical order [.., V, K]
TRANSPOSED_VIEW = "transposed_view"  # a transpose(-1, -2) view [.., K, V] of value-first bytes


class PoolLayoutError(ValueError):
    """A GDN SSM pool whose memory layout the plugin does not recognise."""


def _inner_order(t: torch.Tensor) -> Optional[str]:
    """How the last two dims of ``t`` lie in memory: the view's order, its transpose, or neither."""
    rows, cols = t.shape[-2], t.shape[-1]
    s_rows, s_cols = t.stride(-2), t.stride(-1)
    if (s_cols == 1 or cols == 1) and (s_rows == cols or rows == 1):
        return VALUE_FIRST
    if s_rows == 1 and s_cols == rows:  # (a size-1 dim makes both orders one: value first above)
        return TRANSPOSED_VIEW
    return None


def layout_of(t: torch.Tensor, name: str = "ssm_states") -> str:
    """:data:`VALUE_FIRST` or :data:`TRANSPOSED_VIEW` for a pool (or rows of it) ``[.., Hv, a, b]``;
    :class:`PoolLayoutError` naming ``name`` for anything else."""
    if t.dim() < 3:
        raise PoolLayoutError(f"{name}: expected a GDN state tensor [.., Hv, V, K], got shape {tuple(t.shape)}")
    order = _inner_order(t)
    if order is None:
        raise PoolLayoutError(
            f"{name}: shape {tuple(t.shape)} with strides {tuple(t.stride())} is neither value first "
            f"[.., Hv, V, K] in memory nor a transpose(-1, -2) view of it; the NPU ops and SGLang's "
            f"speculative commit address the pool's bytes as value first, so the plugin does not serve it")
    return order


def value_first(t: torch.Tensor, name: str = "ssm_states") -> torch.Tensor:
    """The view of ``t`` whose logical order ``[.., Hv, V, K]`` is its physical order (``t`` itself,
    or ``t.transpose(-1, -2)`` for a transposed view).  Shares ``t``'s memory."""
    if t.dim() >= 3 and t.stride(-1) == 1 and t.stride(-2) == t.shape[-1]:   # the common case, asked first
        return t
    return t if layout_of(t, name) == VALUE_FIRST else t.transpose(-1, -2)


def in_view_order(x: Optional[torch.Tensor], layout: str) -> Optional[torch.Tensor]:
    """A value-first result ``x`` put in the order of a view of ``layout``, so that SGLang assigning
    it through that view (``ssm_states[idx] = x``) writes value-first bytes."""
    if x is None or layout == VALUE_FIRST:
        return x
    return x.transpose(-1, -2)


def check_pool(temporal: torch.Tensor, *, value_dim: Optional[int] = None, key_dim: Optional[int] = None,
               intermediate: Optional[torch.Tensor] = None) -> str:
    """Startup check of a GDN pool ``[layers, slots, Hv, a, b]`` (and the speculative scratch, which
    the verify op writes by raw offsets and the commit reads the same way, so it must be contiguous).
    Returns the pool's layout; raises :class:`PoolLayoutError` with one message otherwise."""
    layout = layout_of(temporal, "mamba pool temporal state")
    vf = value_first(temporal)
    dims = (vf.shape[-2], vf.shape[-1])
    for label, want, got in (("value", value_dim, dims[0]), ("key", key_dim, dims[1])):
        if want is not None and want != got:
            raise PoolLayoutError(
                f"mamba pool temporal state: shape {tuple(temporal.shape)} strides {tuple(temporal.stride())} "
                f"gives {label} head dim {got} in memory, the model's is {want}; the pool is not value first")
    if intermediate is not None and not intermediate.is_contiguous():
        raise PoolLayoutError(
            f"speculative intermediate SSM cache: shape {tuple(intermediate.shape)} strides "
            f"{tuple(intermediate.stride())} is not contiguous; the verify op and SGLang's commit address it by "
            f"raw offsets")
    return layout
