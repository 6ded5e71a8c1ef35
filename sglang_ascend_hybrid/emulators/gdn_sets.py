"""The GDN emulator set of one machine (:func:`emulators`, keyed by seam name for
``seam.install_emulators``) and :func:`missing_torch_op`, what a build without a registered op does.
The emulators themselves: :mod:`.gdn_gating`, :mod:`.gdn_l2norm`, :mod:`.gdn_mega`, :mod:`.gdn_npu_chunk`,
:mod:`.gdn_npu_recurrent`, :mod:`.gdn_triton_chunk` (each with its upstream source)."""

from __future__ import annotations

from typing import Callable, Optional

from sglang_ascend_hybrid.emulators.gdn_gating import fused_gdn_gating_npu
from sglang_ascend_hybrid.emulators.gdn_l2norm import l2norm_fwd
from sglang_ascend_hybrid.emulators.gdn_mega import make_mega_emulator
from sglang_ascend_hybrid.emulators.gdn_npu_chunk import make_npu_chunk_emulator
from sglang_ascend_hybrid.emulators.gdn_npu_recurrent import make_npu_recurrent_emulator
from sglang_ascend_hybrid.emulators.gdn_triton_chunk import make_triton_chunk_emulator
from sglang_ascend_hybrid.ops.gdn import contract as caps
from sglang_ascend_hybrid.ops.gdn.contract import (
    OP_GATING,
    OP_L2NORM,
    OP_MEGA,
    OP_NPU_CHUNK,
    OP_NPU_RECURRENT,
    OP_TRITON,
)


def missing_torch_op(op: str) -> Callable:
    """What calling ``torch.ops.npu.<op>`` does in a build that does not register it: the
    ``AttributeError`` of torch's op namespace (e.g. ``mega_chunk_gdn`` on Ascend 950)."""

    def call(*args, **kwargs):
        raise AttributeError(f"'_OpNamespace' 'npu' object has no attribute '{op}'")

    call.__name__ = f"missing_{op}"
    return call


def emulators(mega_predicate=None, npu_chunk_refuse=None, *, chip: Optional[str] = "A3",
              mega_variant: Optional[caps.MegaVariant] = caps.MEGA_CURRENT,
              recurrent: bool = True, npu_chunk: bool = True, triton: bool = False,
              version: Optional[str] = None, environ=None, l2norm: bool = True,
              gating: bool = True) -> dict[str, Callable]:
    """The GDN emulators of one machine, keyed by seam name (for ``seam.install_emulators``).

    ``chip``: the chip generation.  On ``"950"`` the sgl-kernel-npu build has neither
    ``recurrent_gated_delta_rule`` nor ``mega_chunk_gdn`` (SKN f425bdf1 csrc/CMakeLists.txt ~9-13:
    SGL_KERNEL_ENABLE_A3_ONLY_OPS is OFF for ``ascend950*``; both ops are inside it, CMakeLists.txt
    ~59-61 and ~171-175, pytorch_extensions.cpp ~121-139 and ~272-274): the mega wrapper imports but
    its op is missing, so the seam reports it absent and the Triton entry, when it routes to it,
    raises AttributeError.  The chunk op (PR #747) has an Ascend 950 path (its host's
    ``isAscend950``, arch35 kernels), so it is offered there; ``npu_chunk`` decides.
    ``mega_variant=None``: a release without the mega kernel (tags before ``2026.05.01.post3``).
    ``triton``: also the Triton entry (:func:`make_triton_chunk_emulator`, of ``version``, reading
    ``environ``).  ``l2norm``: also the Triton ``l2norm_fwd`` (:mod:`.gdn_l2norm`; every build has it).
    ``gating``: also the Triton ``fused_gdn_gating_npu`` (:mod:`.gdn_gating`; builds from 2026.01.09 on).
    """
    ops: dict[str, Callable] = {OP_L2NORM: l2norm_fwd} if l2norm else {}
    if gating:
        ops[OP_GATING] = fused_gdn_gating_npu
    mega_registered = mega_variant is not None and chip != "950"
    if mega_registered:
        ops[OP_MEGA] = make_mega_emulator(mega_predicate, variant=mega_variant)
    if npu_chunk:
        ops[OP_NPU_CHUNK] = make_npu_chunk_emulator(npu_chunk_refuse, chip=chip)
    if recurrent and chip != "950":
        ops[OP_NPU_RECURRENT] = make_npu_recurrent_emulator()
    if triton:
        mega = (ops[OP_MEGA] if mega_registered else
                missing_torch_op("mega_chunk_gdn") if mega_variant is not None else None)
        ops[OP_TRITON] = make_triton_chunk_emulator(mega=mega, version=version, environ=environ)
    return ops
