"""CPU emulator of ``torch.ops.npu.chunk_gated_delta_rule`` (sgl-kernel-npu PR #747), mirroring
:mod:`sglang_ascend_hybrid.ops.gdn.contract` (SKN-747 = PR #747 as merged, read at b878a61a
(sgl-project/sgl-kernel-npu) and 0a96db2f (zhaozx-cn/sgl-kernel-npu, branch add_chunkgdn_0820)).
Memory the real op leaves unwritten is filled with NaN here; calls the real op would take and
compute wrongly without an error (a dtype it reinterprets, an index it reads out of bounds)
raise :class:`~sglang_ascend_hybrid.ops.errors.EmulatorContractViolation`.

``torch.ops.npu.chunk_gated_delta_rule`` (:func:`make_npu_chunk_emulator`; SKN-747)
    ``(q, k, v, *, beta, initial_state, actual_seq_lengths, scale=1.0, chunk_state=None, g=None)`` ->
    ``(out [T, Nv, Dv] bf16, final [B, Nv, Dv, Dk] in the state's dtype)``; q and k are used as given
    (the caller normalises); beta post-sigmoid; g log-space; chunk_state receives the entering
    state of every 64-token chunk, sequence-major (rows past those are left unwritten: NaN).
    Host checks of the merged head (b878a61a / 0a96db2f) in order with their texts; the chip
    generation decides whether an fp32 state is accepted (OPP and the host: fp32 states only on
    Ascend 950).  beta and g must be 2-D ``(T, Nv)`` (every stored host checks it; whether the
    merged head accepts SGLang's 3-D ``[1, T, Nv]`` is not known, so the emulator is strict).  The
    host reads no value (no sync); lengths and the chunk_state size are unchecked, so what the
    kernel would do out of bounds is a contract violation and what it leaves unwritten is NaN.
    A bf16 state is rounded to bf16 at every 64-token chunk boundary (stage 2 ``CalGCumExp``,
    ``CAST_RINT``).
"""

from __future__ import annotations

from typing import Callable, Optional

import torch

from sglang_ascend_hybrid.emulators.gdn_common import violation as _violation
from sglang_ascend_hybrid.ops.gdn import contract as caps
from sglang_ascend_hybrid.ops.gdn.naive import naive_recurrent_gated_delta_rule


def make_npu_chunk_emulator(refuse: Optional[Callable[[int, int], bool]] = None, *, chip: Optional[str] = "A3"
                            ) -> Callable:
    """An emulator of ``torch.ops.npu.chunk_gated_delta_rule`` on ``chip`` (``"A2"``, ``"A3"`` or
    ``"950"``); ``refuse(Nv, Nk)`` makes it refuse more head pairs with the heads text.

    Host checks, texts and their order: SKN-747 host ``chunk_gated_delta_rule.cpp`` as merged (read
    at b878a61a in sgl-project/sgl-kernel-npu and 0a96db2f in zhaozx-cn/sgl-kernel-npu; the pre-merge
    heads with length checks are in no release): presence, ranks, dtypes (g's rank with its dtype),
    shapes, ``dims must be positive``, heads / dims / ratio, g's shape, the fp32 rule, chunk_state.
    The host reads no value (no device-to-host sync); the lengths are the kernel's (arch22
    ``Process``), which checks none of them: a negative length, lengths summing past T, or a
    chunk_state with fewer rows than the ``sum(ceil(len / 64))`` the kernel writes are read / written
    out of bounds (contract violations); an empty sequence's final state and the outputs of tokens
    past the lengths' sum are left unwritten (NaN).  (This emulator reads the lengths on the host:
    it is a CPU model, not the op.)  beta, g and chunk_state must be what the stored hosts check
    (2-D beta / g; whether the merged head takes SGLang's 3-D ``[1, T, Nv]`` is not known without
    the merge commit or a device, so the emulator is strict).  The host makes every input
    contiguous; a non-contiguous chunk_state would be written into that copy and lost (contract
    violation).

    Arithmetic (kernel ``op_kernel/arch22/chunk_gated_delta_rule.h`` / ``_stage2.h`` at 3d5a9eef and 0a96db2f):
    64-token chunks; fp32 within a chunk.  With a bf16 state the state lives in the bf16
    ``finalState`` buffer between chunks: stage 2 (``CalGCumExp``) reads the entering state, stores
    it to chunk_state, scales it by ``exp(sum of the chunk's g)`` in fp32 and rounds that to bf16
    (``Cast(..., CAST_RINT)``), and the chunk's update is added into the bf16 buffer; so the state is
    rounded to bf16 at every chunk boundary (twice: the decayed part, then the sum).  The bf16
    outputs of the cube's intermediate matmuls (``cT2 = bfloat16_t``) are not modelled.  With an fp32
    state (Ascend 950, arch35) the state stays fp32.
    """
    texts = caps.NPU_CHUNK_TEXTS
    name = "chunk_gated_delta_rule"

    def check(ok: bool, key: str, extra: str = "") -> None:
        if not ok:
            raise RuntimeError(texts[key] + extra)

    def chunk_gated_delta_rule(q, k, v, *, beta=None, initial_state=None, actual_seq_lengths=None, scale=None,
                               chunk_state=None, g=None):
        check(q is not None and k is not None and v is not None, "qkv_defined")
        check(beta is not None, "beta_provided")
        check(initial_state is not None, "state_provided")
        check(actual_seq_lengths is not None, "lengths_provided")
        check(q.dim() == 3 and k.dim() == 3 and v.dim() == 3, "qkv_3d")
        check(beta.dim() == 2, "beta_2d")
        check(initial_state.dim() == 4, "state_4d")
        check(actual_seq_lengths.dim() == 1, "lengths_1d")
        check(q.dtype == k.dtype == v.dtype == torch.bfloat16, "qkv_dtype")
        check(beta.dtype == torch.bfloat16, "beta_dtype")
        check(initial_state.dtype in caps.NPU_CHUNK_STATE_DTYPES, "state_dtype")
        check(actual_seq_lengths.dtype == torch.int32, "lengths_dtype")
        if g is not None:
            check(g.dtype == torch.float32, "g_dtype")
            check(g.dim() == 2, "g_2d")
        T, Nk, Dk = q.shape
        Nv, Dv = v.shape[1], v.shape[2]
        B = initial_state.shape[0]
        check(tuple(k.shape) == (T, Nk, Dk), "key_shape")
        check(v.shape[0] == T, "value_shape")
        check(tuple(beta.shape) == (T, Nv), "beta_shape")
        check(tuple(initial_state.shape[1:]) == (Nv, Dv, Dk), "state_shape")
        check(actual_seq_lengths.shape[0] == B, "lengths_size")
        check(min(Nk, Nv, Dk, Dv, T, B) > 0, "positive")
        check(Nk <= caps.NPU_CHUNK_MAX_HEADS and Nv <= caps.NPU_CHUNK_MAX_HEADS, "heads")
        check(Dk <= caps.NPU_CHUNK_MAX_HEAD_DIM and Dv <= caps.NPU_CHUNK_MAX_HEAD_DIM, "dims")
        check(Nv % Nk == 0, "ratio")
        if g is not None:
            check(tuple(g.shape) == (T, Nv), "g_shape")
        check(initial_state.dtype in caps.npu_chunk_state_dtypes(chip), "fp32_state")
        if chunk_state is not None:
            check(chunk_state.dim() == 4, "chunk_state_4d")
            check(tuple(chunk_state.shape[1:]) == (Nv, Dv, Dk), "chunk_state_shape")
            check(chunk_state.dtype == initial_state.dtype, "chunk_state_dtype")
            check(chunk_state.device == q.device, "chunk_state_device")
            if not chunk_state.is_contiguous():
                _violation(name, "chunk_state is not contiguous: the host writes into a contiguous copy "
                                 "(chunk_state->contiguous()), the caller's tensor is never updated")
        if refuse is not None and refuse(Nv, Nk):
            raise RuntimeError(texts["heads"])
        # --- what the kernel reads without a check (the real op reads the lengths on the device)
        lens = actual_seq_lengths.tolist()
        if any(x < 0 for x in lens):
            _violation(name, f"actual_seq_lengths={lens} has a negative length (the kernel's offsets run backwards)")
        if sum(lens) > T:
            _violation(name, f"sum(actual_seq_lengths)={sum(lens)} > T={T}: tokens read and written past the end")
        if chunk_state is not None and chunk_state.shape[0] < caps.npu_chunk_rows_written(lens):
            _violation(name, f"chunk_state has {chunk_state.shape[0]} rows, the kernel writes "
                             f"{caps.npu_chunk_rows_written(lens)} (sum of ceil(len / 64)): written past its end")
        scale = 1.0 if scale is None else float(scale)  # the host's default
        gates = torch.zeros(T, Nv) if g is None else g.float()  # no g: no gating
        bf16_state = initial_state.dtype == torch.bfloat16
        if chunk_state is not None:
            chunk_state.fill_(float("nan"))  # rows the op does not write stay undefined
        out = torch.full((T, Nv, Dv), float("nan"), dtype=torch.float32)  # at::empty: tokens past the lengths
        final = torch.full((B, Nv, Dv, Dk), float("nan"), dtype=initial_state.dtype)  # empty sequences: unwritten
        row, start = 0, 0
        for s, length in enumerate(lens):
            if length == 0:
                continue  # Process: no chunk group, finalState[s] never written
            state = initial_state[s].clone()  # in the state's dtype, as the kernel's state buffer holds it
            for c0 in range(start, start + length, caps.NPU_CHUNK_CHUNK):
                c1 = min(c0 + caps.NPU_CHUNK_CHUNK, start + length)
                if chunk_state is not None:
                    chunk_state[row] = state  # the entering state, before the decay
                entering = state.float()
                o, st = naive_recurrent_gated_delta_rule(
                        q[None, c0:c1], k[None, c0:c1], v[None, c0:c1], gates[None, c0:c1],
                                            beta[None, c0:c1], cu_seqlens=torch.tensor([0, c1 - c0]),
                                            initial_state=entering[None], scale=scale)
                out[c0:c1] = o[0].float()
                if bf16_state:
                    decayed = entering * gates[c0:c1].sum(0).exp()[:, None, None]
                    update = st[0] - decayed
                    state = (decayed.to(torch.bfloat16).float() + update).to(torch.bfloat16)
                else:
                    state = st[0]
                row += 1
            final[s] = state
            start += length
        return out.to(torch.bfloat16), final

    return chunk_gated_delta_rule
