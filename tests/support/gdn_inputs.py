"""The one builder of random GDN inputs for every GDN test (ops, hooks, emulators).

:func:`packed` builds a packed prefill call -- q / k / v ``[1, T, H, D]``, fp32 gates ``g`` and ``beta``
``[1, T, Hv]``, ``cu_seqlens`` and an initial state or pool value first ``[rows, Hv, V, K]`` -- with the
knobs the tests vary (head pair, dims, dtypes, q / k normalisation, gate and value ranges, strongly
decaying heads, the pool's rows and dtype).  :func:`sglang_gating` builds the raw inputs of SGLang's
gated decode (``a``, ``b``, ``A_log``, ``dt_bias``) on top of it, and :func:`decode_step` one token per
request in the public recurrent op's ``[B, H, D]`` form.  Draws always come in one order (q, k, v, g,
the strong heads' gates, beta, the state), so a seed gives the same tensors whichever knobs are set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch
import torch.nn.functional as F


@dataclass
class GdnInputs:
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    g: torch.Tensor
    beta: torch.Tensor
    cu_seqlens: torch.Tensor
    state: Optional[torch.Tensor]

    def prefill(self) -> tuple:
        """``(q, k, v, g, beta, cu_seqlens, state)``, the order of the prefill ops' arguments."""
        return self.q, self.k, self.v, self.g, self.beta, self.cu_seqlens, self.state


def packed(lens: Sequence[int], *, hv: int, hk: int, k_dim: int, v_dim: Optional[int] = None, seed: int = 0,
           dtype: torch.dtype = torch.float32, qk: str = "normalized", v_scale: float = 1.0,
           gate_shift: Optional[float] = 2.0, strong_heads: Sequence[int] = (),
           beta_dtype: Optional[torch.dtype] = None, with_state: bool = True, state_scale: float = 0.1,
           state_dtype: torch.dtype = torch.float32,
           state_rows: Optional[int] = None, flat_qkv: bool = False,
           cu_dtype: torch.dtype = torch.int64) -> GdnInputs:
    """Random inputs for sequences of ``lens`` tokens.

    ``qk``: ``"normalized"`` (q and k l2-normalised, what the kernels take with
    ``use_qk_l2norm_in_kernel=False``), ``"raw"`` (as SGLang's layer hands them over, normalised in the
    kernel) or ``"key_scaled"`` (raw q, k divided by sqrt(K): the un-normalised delta rule stays stable).
    ``gate_shift``: ``g = logsigmoid(randn + gate_shift)``; None gives the constant 0.5 (no draw).
    ``strong_heads`` decay about -2.1 per token.  ``beta_dtype`` defaults to ``dtype``.
    The state has ``state_rows`` rows (default one per sequence), ``state_scale * randn``.
    ``flat_qkv`` drops the leading batch dimension of q / k / v (``[T, H, D]``).
    """
    if qk not in ("normalized", "raw", "key_scaled"):
        raise ValueError(f"qk={qk!r}: expected 'normalized', 'raw' or 'key_scaled'")
    v_dim = k_dim if v_dim is None else v_dim
    gen = torch.Generator().manual_seed(seed)
    T = sum(lens)
    q = torch.randn(1, T, hk, k_dim, generator=gen)
    k = torch.randn(1, T, hk, k_dim, generator=gen)
    if qk == "normalized":
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    elif qk == "key_scaled":
        k = k / k_dim ** 0.5
    v = torch.randn(1, T, hv, v_dim, generator=gen) * v_scale
    if gate_shift is None:
        g = torch.full((1, T, hv), 0.5)
    else:
        g = F.logsigmoid(torch.randn(1, T, hv, generator=gen) + gate_shift)
    for h in strong_heads:
        g[..., h] = F.logsigmoid(torch.randn(1, T, generator=gen) * 0.5 - 2.0)
    beta = torch.rand(1, T, hv, generator=gen).to(beta_dtype or dtype)
    rows = len(lens) if state_rows is None else state_rows
    state = (torch.randn(rows, hv, v_dim, k_dim, generator=gen) * state_scale).to(state_dtype) if with_state else None
    cu = torch.tensor([0, *lens]).cumsum(0).to(cu_dtype)
    q, k, v = (t.to(dtype) for t in (q, k, v))
    if flat_qkv:
        q, k, v = q[0], k[0], v[0]
    return GdnInputs(q, k, v, g, beta, cu, state)


def sglang_gating(tokens: int, *, hv: int, hk: int, k_dim: int, v_dim: Optional[int] = None, slots: int,
                  seed: int = 0, dtype: torch.dtype = torch.float32,
                  pool_dtype: torch.dtype = torch.float32) -> dict:
    """What SGLang's gated decode receives for ``tokens`` tokens: raw q / k / v ``[1, tokens, H, D]``,
    ``a`` / ``b`` ``[tokens, Hv]``, ``A_log`` and ``dt_bias`` ``[Hv]``, and a value-first pool of
    ``slots`` rows scaled by 1/sqrt(K)."""
    v_dim = k_dim if v_dim is None else v_dim
    gen = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=gen)  # noqa: E731
    return dict(q=r(1, tokens, hk, k_dim).to(dtype), k=r(1, tokens, hk, k_dim).to(dtype),
                v=r(1, tokens, hv, v_dim).to(dtype), a=r(tokens, hv).to(dtype), b=r(tokens, hv).to(dtype),
                A_log=0.3 * r(hv), dt_bias=(0.5 * r(hv)).to(dtype),
                pool=(r(slots, hv, v_dim, k_dim) / k_dim ** 0.5).to(pool_dtype))


def decode_step(batch: int, *, hv: int, hk: int, k_dim: int, v_dim: Optional[int] = None, slots: int,
                seed: int = 0, pool_dtype: torch.dtype = torch.float32, state_scale: float = 0.5) -> GdnInputs:
    """One token per request for the public recurrent decode op: q (raw), k (l2-normalised) ``[B, Hk, K]``,
    v ``[B, Hv, V]``, ``g = logsigmoid(randn)``, ``beta ~ U(0, 1)`` ``[B, Hv]`` and a pool of ``slots``
    rows (``state_scale * randn``) as ``state``; ``cu_seqlens`` counts one token per request."""
    v_dim = k_dim if v_dim is None else v_dim
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, hk, k_dim, generator=gen)
    k = F.normalize(torch.randn(batch, hk, k_dim, generator=gen), dim=-1)
    v = torch.randn(batch, hv, v_dim, generator=gen)
    g = F.logsigmoid(torch.randn(batch, hv, generator=gen))
    beta = torch.rand(batch, hv, generator=gen)
    pool = (torch.randn(slots, hv, v_dim, k_dim, generator=gen) * state_scale).to(pool_dtype)
    return GdnInputs(q, k, v, g, beta, torch.arange(batch + 1), pool)
