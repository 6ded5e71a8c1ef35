"""The contract of the Ascend causal-conv1d entry points, written from their upstream source.

Sources (read, not guessed; every rule below names the one it comes from):

``SKN``  = ``sgl-project/sgl-kernel-npu`` at ``f425bdf1e191a7682296d3b2ed0b927d4e37d671``
           (``main``, tag ``2026.08.21``; the conv op last changed in 8f13e502, #592, 2026-07-10)
``HOST`` = SKN ``csrc/causal_conv1d/op_host/causal_conv1d.cpp``
``KERN`` = SKN ``csrc/causal_conv1d/op_kernel/causal_conv1d.h``, ``causal_conv1d.cpp``,
           ``causal_conv1d_fn.h``, ``causal_conv1d_fn_tasks.h``
``EXT``  = SKN ``csrc/pytorch_extensions.cpp``
``PY``   = SKN ``python/sgl_kernel_npu/sgl_kernel_npu/mamba/causal_conv1d.py``

Four entry points (the emulators in :mod:`sglang_ascend_hybrid.emulators.causal_conv1d`
implement them; the rungs of :mod:`sglang_ascend_hybrid.ops.conv.dispatch` call them):

``torch.ops.npu.causal_conv1d`` (:data:`OP_ACLNN`).
    Registered by sgl-kernel-npu inside ``#ifdef SGL_KERNEL_ENABLE_A3_ONLY_OPS`` (EXT), i.e.
    on every build except Ascend 950.  Schema (EXT)::

        causal_conv1d(Tensor x, Tensor weight, Tensor conv_states, Tensor? bias=None,
                      Tensor? query_start_loc=None, Tensor? cache_indices=None,
                      Tensor? has_initial_state=None, Tensor? num_accepted_tokens=None,
                      int activation_mode=0, int pad_slot_id=-1, int run_mode=0) -> Tensor

    ``x [T, dim]`` (varlen by ``query_start_loc``) or ``[B, S, dim]``; ``weight [W, dim]``;
    ``conv_states [slots, state_len, dim]`` window major.  Host checks, in order, raised as
    ``RuntimeError`` by ``TORCH_CHECK`` with exactly these texts (HOST ``causal_conv1d_impl``):
    ``x must be 2D or 3D tensor``, ``weight must be 2D tensor``,
    ``Only BF16 and FP16 are supported``, ``weight dtype must match x dtype``,
    ``conv_states dtype must match x dtype``, ``x must be contiguous``,
    ``weight must be contiguous``, ``conv_states must be contiguous``,
    ``Only support width in [2,4]``, and for 2-D x ``query_start_loc must have at least 2
    elements`` (EXT turns None into an empty tensor).  Nothing else is checked: no ``dim % 16``
    rule, no bias dtype, no ``weight.size(1) == dim``, no index ranges.
    Semantics (KERN): per sequence, a zero-length window (``end - start <= 0``) is skipped
    (``BuildSeqTaskWindowVarlen``), a cache index equal to ``pad_slot_id`` is skipped
    (``ResolveSeqCacheIndex``); without cache_indices sequence ``b`` uses slot ``b``.  The
    history is rows ``[0, W-1)`` of the slot (``InitRing``: ``pos = stateTokenOffset + i``,
    offset 0), zeros in run_mode 0 when ``has_initial_state`` is absent or 0
    (``ResolveSeqHasInit``), always the state in run_mode 1 (``hasInit = true`` in
    ``ProcessDefaultByWindowMode``).  The output accumulates in fp32 (bias first, then taps
    oldest to newest), optional SiLU (``activation_mode != 0``), rounded to x's dtype
    (``CAST_RINT``).  The state write-back (``WriteBackState``) puts the last ``W-1`` rows of
    ``[history, tokens]`` into rows ``[0, W-1)``; rows ``>= W-1`` are never touched.  In run
    mode 1 with ``num_accepted_tokens`` and ``W == 4`` (``IsUpdateSpecDecodingEnabled``) the
    history is read at row offset ``clamp(accepted - 1, 0, state_len - 3)`` and, when
    ``2 + len <= state_len``, the write-back (``WriteBackStateSpec``) stores rows
    ``offset+1, offset+2`` into rows 0, 1 and the tokens into rows ``2 ..``; otherwise the plain
    write-back.  Run mode 0 ignores ``num_accepted_tokens`` (``(void)numAcceptedTokens`` in
    ``causal_conv1d_fn.h``).  The output is ``at::empty_like(x)``: rows of skipped sequences
    (and tokens outside every sequence) stay uninitialised -- NaN here.
    Tiling cache (HOST): the tiling data is cached per ``CausalConv1dTilingKey`` (dim,
    cuSeqlen, seqLen, batch, inputMode, width, stateLen, numCacheLines, activation,
    pad_slot_id, run_mode, has bias / cache_indices / has_initial_state / num_accepted),
    which omits the dtype although the tiling data carries ``dtypeKey`` and the kernel picks
    its bf16 / fp16 instantiation from it (KERN ``causal_conv1d.cpp``): a second call of the
    same key in the other dtype runs the wrong instantiation.  Up to ``MAX_CAPTURE_NUM``
    (1024) keys are cached, later keys are not.  (The emulator keeps that cache per instance.)
    Corroborated by SKN's own golden, ``tests/python/sgl_kernel_npu/test_conv1d_prefill.py``
    ``reference_causal_conv1d`` (rows ``[:W-1]``, empty and pad sequences skipped, zeros
    without an initial state).  That test file is older than the host: its negative cases
    expect texts of the replaced PTO kernel (#572: widths ``2..64``, ``conv_states.shape[2]
    must equal dim``, ``query_start_loc dtype must be int32``) that the f425bdf1 host lacks.

Released ``sgl_kernel_npu.mamba.causal_conv1d:
    causal_conv1d_update_v2`` (:data:`OP_UPDATE_V2_MAIN`, PY), a Triton kernel: x token major
    ``[batch, dim]`` / ``[batch, seqlen, dim]`` / varlen ``[tokens, dim]``, ``conv_state
    [slots, state_len, dim]`` (any strides), ``weight [W, dim]``.  It converts x to the state's
    dtype and **overwrites that tensor in place** (``out = x``): the caller's x when the dtypes
    agree.  History rows ``[offset, offset + W-1)`` (offset ``accepted - 1`` with
    num_accepted_tokens, else 0) and the tokens are cast to **fp16** before the fp32
    accumulation (``.to(tl.float16)``); weight and bias are read as fp32.  Pad and empty
    sequences are skipped: their output rows keep x.  Checked against PY's Triton kernel itself
    run in Triton's CPU interpreter (dim 512: below 512 its tiling uses a 48-wide ``tl.arange``
    that only Triton-Ascend accepts): outputs and states bit-identical in fp16 (widths 2-4,
    1-3 tokens, longer states, pads, num_accepted_tokens, varlen), bf16 outputs within one ulp.

``causal_conv1d_fn_v2``, ``causal_conv1d_update_npu_v2`` -- the
    window-major ops of an unmerged sgl-kernel-npu branch used by open sglang PR #38252
    (:data:`OP_FN_V2`, :data:`OP_UPDATE_V2`); no release has them.  Only their signatures are
    known (read from the sgl-kernel-npu branch that sglang PR #38252 installs; its later version
    skips pad rows), so everything not pinned raises
    :class:`~sglang_ascend_hybrid.ops.errors.EmulatorContractViolation`: a pool window other than
    ``W - 1``, dtypes other than one shared fp16 / bf16, zero-length non-pad sequences.

Everywhere: where the real op would read or write out of bounds (a slot index outside the
pool that is not ``pad_slot_id``, offsets outside x, short index vectors, a bias or weight
of another length), or reinterpret a dtype (a bias of another dtype is read as x's dtype),
the emulators raise
:class:`~sglang_ascend_hybrid.ops.errors.EmulatorContractViolation`.  Two processed sequences on one slot
race (parallel blocks / lanes, no ordering): the rows they write and their outputs are left
NaN (unspecified), not an error -- SGLang's NPU graph padding sends every padded decode row
to slot 0 by design.
"""

from __future__ import annotations

import torch

SOURCE_COMMIT = "sgl-project/sgl-kernel-npu@f425bdf1e191a7682296d3b2ed0b927d4e37d671"

OP_ACLNN = "causal_conv1d"
OP_FN_V2 = "sgl_kernel_npu.mamba.causal_conv1d:causal_conv1d_fn_v2"
OP_UPDATE_V2 = "sgl_kernel_npu.mamba.causal_conv1d:causal_conv1d_update_npu_v2"
OP_UPDATE_V2_MAIN = "sgl_kernel_npu.mamba.causal_conv1d:causal_conv1d_update_v2"

# HOST TORCH_CHECK texts, in check order.
ERR_X_DIM = "x must be 2D or 3D tensor"
ERR_W_DIM = "weight must be 2D tensor"
ERR_DTYPE = "Only BF16 and FP16 are supported"
ERR_W_DTYPE = "weight dtype must match x dtype"
ERR_S_DTYPE = "conv_states dtype must match x dtype"
ERR_X_CONTIG = "x must be contiguous"
ERR_W_CONTIG = "weight must be contiguous"
ERR_S_CONTIG = "conv_states must be contiguous"
ERR_WIDTH = "Only support width in [2,4]"
ERR_QSL = "query_start_loc must have at least 2 elements"
REFUSAL_TEXTS = (ERR_X_DIM, ERR_W_DIM, ERR_DTYPE, ERR_W_DTYPE, ERR_S_DTYPE, ERR_X_CONTIG,
                 ERR_W_CONTIG, ERR_S_CONTIG, ERR_WIDTH, ERR_QSL)
MAX_CAPTURE_NUM = 1024  # HOST: tiling entries cached per process
NPU_DTYPES = (torch.float16, torch.bfloat16)  # HOST: "Only BF16 and FP16 are supported"
WIDTHS = range(2, 5)  # HOST: "Only support width in [2,4]"
SPEC_WIDTH = 4  # KERN IsUpdateSpecDecodingEnabled: run mode 1 reads num_accepted_tokens only at width 4
DEVICE_OPS = (OP_FN_V2, OP_UPDATE_V2, OP_ACLNN, OP_UPDATE_V2_MAIN)
# What an operator sees for each op (kernel reports): its name, and a note on its builds.
KERNEL_NOTES = {
    OP_ACLNN: ("torch.ops.npu.causal_conv1d", "sgl-kernel-npu (not built for Ascend 950)"),
    OP_FN_V2: ("sgl_kernel_npu causal_conv1d_fn_v2", "unmerged sgl-kernel-npu branch (sglang PR #38252)"),
    OP_UPDATE_V2: ("sgl_kernel_npu causal_conv1d_update_npu_v2", "unmerged sgl-kernel-npu branch (sglang PR #38252)"),
    OP_UPDATE_V2_MAIN: ("sgl_kernel_npu causal_conv1d_update_v2", "released main"),
}


def npu_conv_supports(width: int, dim: int, dtype: torch.dtype) -> bool:
    """Whether ``torch.ops.npu.causal_conv1d``'s host accepts this width and dtype (it has no
    ``dim`` rule; shared with the ``plan`` CLI)."""
    return width in WIDTHS and dtype in NPU_DTYPES


def is_refusal(exc: BaseException) -> bool:
    """One of ``torch.ops.npu.causal_conv1d``'s host ``TORCH_CHECK`` texts."""
    text = str(exc)
    return isinstance(exc, RuntimeError) and any(t in text for t in REFUSAL_TEXTS)
