"""CPU emulator of sgl-kernel-npu's GDN speculative commit, ``move_intermediate_cache``.

Source: sgl-project/sgl-kernel-npu ``python/sgl_kernel_npu/sgl_kernel_npu/mamba/mamba_state_update_triton.py``
at f425bdf1e191a7682296d3b2ed0b927d4e37d671 (``main``, tag ``2026.08.21``): the host function
(~101-158) and ``move_cache_dynamic_last_kernel_h_block`` (~20-98).  SGLang calls it from
``AscendHybridLinearAttnBackend.update_mamba_state_after_mtp_verify`` after a target verify, with
the whole pool (``[L, slots, ...]``) as ``ssm_states`` and the verify scratch
(``[L, size + 1, draft, ...]``) as ``intermediate_state_cache``.

What the code does (copied here, defects included):

- The host takes ``L, S, D, H, V, K = intermediate_state_cache.shape``, the source's first three
  strides and the destination's first two strides, nothing else.
- Per valid entry ``i`` (``last_steps[i] >= 0``) and layer ``l`` the kernel loads ``H * V * K``
  elements at **linear offsets** ``h*V*K + v*K + k`` from
  ``src + l*layer_stride + src_idx*size_stride + step*draft_stride`` and stores them at the same
  linear offsets from ``dst + l*dst_layer_stride + dst_idx*dst_size_stride``.  Element strides
  are ignored on both sides: it copies **physical memory**.  A destination that is a transposed
  view (SGLang 0.5.20's speculative NPU pool, ``temporal_state.transpose(-1, -2)``) therefore
  receives the scratch's bytes in the scratch's physical order, whatever its logical shape says.
- The store converts to the destination's element type (``tl.store``).
- The host asserts the three index vectors have one length (texts below, ``AssertionError``).
- With ``H * V * K == 0`` (the zero-size SSM state of a short-conv model's pool: LFM2 / ZAYA1 speculative
  decoding reaches this commit too) every load and store is masked (``k_offsets < dim_k`` etc.): nothing
  is read or written.
- There is no bounds check: an index outside the pool or the scratch reads or writes outside
  the tensors; this emulator raises :class:`EmulatorContractViolation` instead.

sgl-kernel-npu PR #748 (merged 2026-08-25, "preserve physical Mamba state storage semantics")
keeps the physical meaning and adds layout / dtype / range validation whose texts are not
readable here; unmerged PR heads af20022a and c030065d (the latter "Transpose-load NEXTN verify
commit into the K-major SSM pool") index the destination through its element strides instead,
which would disagree with SGLang 0.5.20's transposed view; neither is in a tag.
"""

from __future__ import annotations

import torch

from sglang_ascend_hybrid.ops.errors import EmulatorContractViolation

SOURCE = ("sgl-project/sgl-kernel-npu", "python/sgl_kernel_npu/sgl_kernel_npu/mamba/mamba_state_update_triton.py",
          "f425bdf1e191a7682296d3b2ed0b927d4e37d671")
DST_LENGTH_TEXT = "Destination indices lengths must match"
SRC_LENGTH_TEXT = "Source indices lengths must match"


def _violation(what: str) -> None:
    raise EmulatorContractViolation(f"move_intermediate_cache: {what}")


def _block(t: torch.Tensor, offset: int, numel: int) -> torch.Tensor:
    """``numel`` elements of ``t``'s storage from element ``t.storage_offset() + offset``, flat and
    in place (the kernel's raw pointer arithmetic); a range outside the storage is a violation."""
    start = t.storage_offset() + offset
    if numel == 0:   # H, V or K is 0 (a short-conv pool has no SSM state): every load / store is masked
        return t.new_empty((0,))
    if start < 0 or start + numel > t.untyped_storage().nbytes() // t.element_size():
        _violation(f"elements [{start}, {start + numel}) are outside the tensor's storage")
    return t.as_strided((numel,), (1,), start)


def emulate_move_intermediate_cache(ssm_states, intermediate_state_cache, dst_indices_tensor, src_indices_tensor,
                                    last_steps_tensor, h_block_size=2):
    """``move_intermediate_cache`` with the kernel's physical-memory semantics (module docstring).
    Returns ``ssm_states`` (written in place through its storage)."""
    del h_block_size  # tiling only
    L, _S, _D, H, V, K = intermediate_state_cache.shape
    layer_stride, size_stride, draft_stride = (int(s) for s in intermediate_state_cache.stride()[:3])
    dst_layer_stride, dst_size_stride = (int(s) for s in ssm_states.stride()[:2])
    assert len(dst_indices_tensor) == len(last_steps_tensor), DST_LENGTH_TEXT
    assert len(src_indices_tensor) == len(last_steps_tensor), SRC_LENGTH_TEXT
    numel = H * V * K
    for dst, src, step in zip(dst_indices_tensor.tolist(), src_indices_tensor.tolist(), last_steps_tensor.tolist()):
        if step < 0:
            continue
        if not (0 <= dst < ssm_states.shape[1] and 0 <= src < intermediate_state_cache.shape[1]
                and step < intermediate_state_cache.shape[2]):
            _violation(f"index out of bounds (dst={dst}, src={src}, step={step})")
        for layer in range(L):
            source = _block(intermediate_state_cache, layer * layer_stride + src * size_stride + step * draft_stride,
                            numel)
            target = _block(ssm_states, layer * dst_layer_stride + dst * dst_size_stride, numel)
            target.copy_(source.to(ssm_states.dtype))
    return ssm_states
