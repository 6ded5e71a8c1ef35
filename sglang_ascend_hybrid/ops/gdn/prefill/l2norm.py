"""The l2-normalisation of q and k before a GDN prefill: the ``gdn_qk_l2norm`` ladder.

SGLang's Ascend ``chunk_gdn`` runs sgl-kernel-npu's Triton ``l2norm_fwd`` on q and on k before
``torch.ops.npu.chunk_gated_delta_rule`` (which takes them normalised).  Rungs:

``npu_l2norm``  that kernel (contract: ``l2norm_refusal_reason`` in :mod:`..contract`), on contiguous
                copies where q / k are strided (it reads row t at ``t * D`` whatever the strides)
``torch``       ``x * rsqrt(sum x^2 + 1e-6)`` in fp32, in x's dtype (:func:`..torch_impl.l2norm`): the
                same math

Capture-safe: metadata only, no host read.
"""

from __future__ import annotations

import logging
from typing import Optional

import torch

from sglang_ascend_hybrid.logutil import log_once
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.gdn import contract as caps
from sglang_ascend_hybrid.ops.gdn.contract import OP_L2NORM
from sglang_ascend_hybrid.ops.gdn.signature import GdnSignature, rejection_line
from sglang_ascend_hybrid.ops.gdn.torch_impl import l2norm
from sglang_ascend_hybrid.ops.ladder import Absent, Ladder, Rung
from sglang_ascend_hybrid.ops.signature import dtype_name

logger = logging.getLogger(__name__)


def _npu_supports(sig: GdnSignature, q: torch.Tensor, k: torch.Tensor) -> Optional[str]:
    if not seam.serves(OP_L2NORM, q, k):
        return Absent(f"{OP_L2NORM} is not installed for these tensors")
    return caps.l2norm_refusal_reason(q.shape[-1], q.element_size())


def _said(rung: str, q: torch.Tensor) -> None:
    log_once(logger, ("gdn-qk-l2norm", rung, q.shape[-1], q.dtype),
             "sglang-ascend-hybrid: GDN prefill normalises q and k (K=%d %s) on the %s kernel", q.shape[-1],
             dtype_name(q.dtype), rung)


def _npu_run(q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    out = seam.call(OP_L2NORM, q.contiguous()), seam.call(OP_L2NORM, k.contiguous())
    _said("npu_l2norm", q)
    return out


def _torch_run(q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    _said("torch", q)
    return l2norm(q), l2norm(k)


L2NORM = Ladder("gdn_qk_l2norm", [
    Rung("npu_l2norm", _npu_supports, _npu_run, caps.is_l2norm_refusal, device=True, ops=(OP_L2NORM,)),
    Rung("torch", lambda sig, q, k: None, _torch_run),
], rejection=rejection_line("qk l2norm"), log=logger)


def qk_l2norm(sig: GdnSignature, q: torch.Tensor, k: torch.Tensor,
              first: Optional[int] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """q and k (``[.., Hk, K]``) l2-normalised over the last dim, in their dtype (``first``: what
    ``L2NORM.first`` answered for this metadata, kept by the caller)."""
    return L2NORM(sig, q, k, first=first)
