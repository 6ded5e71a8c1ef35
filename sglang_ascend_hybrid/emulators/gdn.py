"""CPU emulators of the Ascend GDN kernels, mirroring :mod:`sglang_ascend_hybrid.ops.gdn.contract`.

Every rule below cites its source (abbreviations as in :mod:`sglang_ascend_hybrid.ops.gdn.contract`: SKN = sgl-project/
sgl-kernel-npu f425bdf1, SKN-462 = ff984786, SKN-517 = 12f136d3, SKN-533 = 3558cea0,
SKN-747 = PR #747 as merged, read at b878a61a (sgl-project/sgl-kernel-npu) and 0a96db2f
(zhaozx-cn/sgl-kernel-npu, branch add_chunkgdn_0820)).
Memory the real op leaves unwritten is filled with NaN here; calls the real op would take and
compute wrongly without an error (a dtype it reinterprets, an index it reads out of bounds)
raise :class:`~sglang_ascend_hybrid.ops.errors.EmulatorContractViolation`.

``run_mega_chunk_gdn`` (:func:`make_mega_emulator`; SKN ``python/.../fla/mega_chunk_gdn.py`` and
``csrc/mega_chunk_gdn/op_host/mega_chunk_gdn.cpp``)
    Casts q, k, v, beta and the initial state to fp16 (wrapper: ``t.half()``), cu_seqlens to int32,
    then ``check_shape`` with the variant's texts (hint or not) and head-pair set; returns the
    7-tuple ``(g_sum, (out * scale).to(q.dtype), A_inv, final fp32 [N, H, K, V] or None, w, h, v_new)``
    with h per 128-token chunk ``[1, NT, H, K, V]``.  The kernel keeps the state in fp16 (its
    ``final_state`` buffer), so the emulated state is rounded through fp16 after every chunk, and
    writes the output into an fp16 buffer (``out = torch.empty_like(v)`` of the halved v) that the
    wrapper scales in fp16: magnitudes beyond 65504 become inf, in the inputs (the casts) as in
    the state and the output.
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
``sgl_kernel_npu.fla.chunk:chunk_gated_delta_rule_npu`` (:func:`make_triton_chunk_emulator`; SKN
``python/sgl_kernel_npu/sgl_kernel_npu/fla/chunk.py``)
    The Triton entry; runs the mega kernel instead when its release and the environment say so
    (``GDN_USE_MEGA_GDN=1`` from ac3a564f, by default before it), with the mega kernel's contract.
``torch.ops.npu.recurrent_gated_delta_rule`` (:func:`make_npu_recurrent_emulator`; SKN
``csrc/recurrent_gated_delta_rule/op_host/recurrent_gated_delta_rule.cpp`` and
``op_kernel/recurrent_gated_delta_rule_kernel.cpp``, unchanged since 878309c5 / #403)
    Host ``TORCH_CHECK`` texts and the vStep refusal; bf16 only (violation otherwise); index
    tensors read as int32 without a cast (violation otherwise); mix_qkv, beta and the state used
    in place (violation when not contiguous; the host copies a non-contiguous intermediate_state,
    so its writes would be lost: violation); S <= 8 (violation).  Per batch b: initial row
    ``r0 = ssm_state_indices[b, num_accepted_tokens[b] - 1]`` (``[b, 0]`` without it), read from
    intermediate_state[r0] when given, else recurrent_state[r0]; with intermediate_state and
    ``r0 % S == 0`` from ``recurrent_state[cache_indices[b]]`` instead.  Per token
    ``t < actual_seq_lengths[b]``: q, k l2-normalised in fp32 (``x * rsqrt(sum x^2 + 1e-6)``), q
    scaled; ``beta = sigmoid(beta)`` (the kernel applies it); ``S = exp(g) S`` (no gating when g
    is None); ``u = beta (v - S k)``; ``S += u k^T``; ``o = S q``; the state is written (rounded
    to bf16, CAST_RINT) to row ``ssm_state_indices[b, t]`` of intermediate_state when given, else
    of recurrent_state.  Output ``[B, S, nv, dv]`` from ``torch::empty``: rows past a sequence's
    length are NaN.  Value head h reads key head ``h // (nv / nk)``.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import torch

from sglang_ascend_hybrid.ops.errors import EmulatorContractViolation
from sglang_ascend_hybrid.ops.gdn import contract as caps
from sglang_ascend_hybrid.ops.gdn.reference import recurrent_reference
from sglang_ascend_hybrid.ops.gdn.contract import OP_MEGA, OP_NPU_CHUNK, OP_NPU_RECURRENT, OP_TRITON
from sglang_ascend_hybrid.emulators.gdn_triton_chunk import make_triton_chunk_emulator  # noqa: F401 (emulators(); callers)


MEGA_HINT = caps.MEGA_HINT
MEGA_CHUNK = 128


def _violation(op: str, what: str) -> None:
    raise EmulatorContractViolation(f"{op}: {what} (undefined behaviour on the real op, which does not check it)")


# ----------------------------------------------------------------------------- mega kernel


def make_mega_emulator(predicate: Optional[Callable[[int, int], bool]] = None, *,
                       variant: caps.MegaVariant = caps.MEGA_CURRENT) -> Callable:
    """An emulator of ``run_mega_chunk_gdn`` of ``variant`` (a :data:`caps.MEGA_VARIANTS` entry);
    ``predicate`` replaces the variant's head-pair set (tests of the planner)."""
    pair_ok = predicate or variant.supports

    def check(ok: bool, message: str) -> None:
        if not ok:
            raise RuntimeError(variant.refusal_text(message))

    def run_mega_chunk_gdn(q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens):
        if scale is None:
            scale = k.shape[-1] ** -0.5
        q_dtype, k_dtype, v_dtype = q.dtype, k.dtype, v.dtype
        q, k, v, beta = (t.half() for t in (q, k, v, beta))  # the wrapper's casts
        T = q.shape[1] if q.dim() == 4 else 0
        cu = (torch.tensor([0, T], dtype=torch.int32) if cu_seqlens is None else cu_seqlens.to(torch.int32))
        has_init = initial_state is not None
        if has_init:
            initial_state = initial_state.half()
        D = caps.MEGA_HEAD_DIM
        check(q.dim() == 4, "q must have shape [B, T, Hg, D]")
        check(k.dim() == 4, "k must have shape [B, T, Hg, D]")
        check(v.dim() == 4, "v must have shape [B, T, H, D]")
        check(g.dim() == 3, "g must have shape [B, T, H]")
        check(beta.dim() == 3, "beta must have shape [B, T, H]")
        check(q.shape[0] == 1, "mega_chunk_gdn currently supports packed B=1 input")
        check(q.shape == k.shape, "q and k must have the same shape")
        check(q.shape[1] == v.shape[1], "q/k and v sequence lengths must match")
        check(pair_ok(v.shape[2], q.shape[2]), caps.MEGA_PAIR_TEXT)
        check(q.shape[3] == D and v.shape[3] == D, "mega_chunk_gdn supports head dimension 128")
        check(g.shape[0] == 1 and beta.shape[0] == 1, "g and beta must use packed B=1 layout")
        check(g.shape[1] == q.shape[1] and beta.shape[1] == q.shape[1], "g/beta sequence lengths must match q")
        check(g.shape[2] == v.shape[2] and beta.shape[2] == v.shape[2], "g/beta must use the same NumValueHeads as v")
        check(g.dtype == torch.float32, "g must be float32")
        check(q.is_contiguous() and k.is_contiguous() and v.is_contiguous(), "q, k, and v must be contiguous")
        check(g.is_contiguous() and beta.is_contiguous() and cu.is_contiguous(),
              "g, beta, and cu_seqlens must be contiguous")
        n = cu.numel() - 1
        if has_init:
            check(initial_state.dim() == 4, "initial_state must have shape [N, H, D, D]")
            check(initial_state.shape[0] == n, "initial_state.size(0) must match cu_seqlens sequences")
            check(initial_state.shape[1] == v.shape[2], "initial_state.size(1) must match NumValueHeads")
            check(initial_state.shape[2] == D and initial_state.shape[3] == D,
                  "initial_state must use head dimensions 128 x 128")
        H = v.shape[2]
        bounds = cu.tolist()
        empty = [s for s in range(n) if bounds[s + 1] == bounds[s]]
        if empty:  # SKN csrc/mega_chunk_gdn/op_kernel/chunk_h.cpp ~505-560 (f425bdf1): a sequence with no chunk
            # still stores its entering state at h row ``chunk_offset`` (the next sequence's first chunk, or past
            # the end of h) and raises a cross-core flag no consumer waits for
            _violation(OP_MEGA, f"sequence(s) {empty} of cu_seqlens {bounds} are empty: the kernel writes their "
                                f"state into another sequence's (or past the last) chunk row of h")
        out = torch.empty(1, T, H, D, dtype=torch.float16)  # SKN fla/mega_chunk_gdn.py ~153: empty_like(v.half())
        final = torch.zeros(n, H, D, D, dtype=torch.float32)  # key first
        num_chunks = sum(math.ceil((b - a) / MEGA_CHUNK) for a, b in zip(bounds, bounds[1:]))
        h = torch.full((1, num_chunks, H, D, D), float("nan"))
        row = 0
        for s in range(n):
            state_vf = (initial_state[s].float().transpose(-1, -2) if has_init
                        else torch.zeros(H, D, D))  # value first for the reference
            for c0 in range(bounds[s], bounds[s + 1], MEGA_CHUNK):
                c1 = min(c0 + MEGA_CHUNK, bounds[s + 1])
                h[0, row] = state_vf.transpose(-1, -2)
                o, state_vf = recurrent_reference(q[:, c0:c1], k[:, c0:c1], v[:, c0:c1], g[:, c0:c1],
                                                  beta[:, c0:c1], cu_seqlens=torch.tensor([0, c1 - c0]),
                                                  initial_state=state_vf[None], scale=1.0)
                state_vf = state_vf[0].half().float()  # the kernel's fp16 state buffer
                out[0, c0:c1] = o[0].half()
                row += 1
            final[s] = state_vf.transpose(-1, -2)
        return (torch.zeros_like(g), (out * scale).to(q_dtype),  # fp16 product, as the wrapper's
                torch.zeros(1, T, H, MEGA_CHUNK, dtype=k_dtype),
                final if output_final_state else None, torch.zeros_like(v, dtype=k_dtype), h.to(k_dtype),
                torch.zeros_like(v, dtype=v_dtype))

    return run_mega_chunk_gdn


# ----------------------------------------------------------------------------- npu chunk op


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
                o, st = recurrent_reference(q[None, c0:c1], k[None, c0:c1], v[None, c0:c1], gates[None, c0:c1],
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


# ----------------------------------------------------------------------------- triton chunk entry


def missing_torch_op(op: str) -> Callable:
    """What calling ``torch.ops.npu.<op>`` does in a build that does not register it: the
    ``AttributeError`` of torch's op namespace (e.g. ``mega_chunk_gdn`` on Ascend 950)."""

    def call(*args, **kwargs):
        raise AttributeError(f"'_OpNamespace' 'npu' object has no attribute '{op}'")

    call.__name__ = f"missing_{op}"
    return call


# ----------------------------------------------------------------------------- npu recurrent op


def _recurrent_check(ok: bool, text: str) -> None:
    if not ok:
        raise RuntimeError(text)


def make_npu_recurrent_emulator(*, ub_bytes: int = caps.UB_BYTES) -> Callable:
    """An emulator of ``torch.ops.npu.recurrent_gated_delta_rule`` (decode and speculative verify).

    Rows shared between requests: the kernel splits its ``(request, value head)`` work items over
    the AI cores in contiguous ranges with no order between cores (SKN ``op_kernel/
    recurrent_gated_delta_rule_kernel.cpp`` ``Process``: ``workIdx`` from ``blockIdx * avgload``), and
    every item reads its initial state before it stores its tokens' states (``ProcessHead``:
    ``CopyInState``, then ``Compute`` per token, ``CopyOutState`` to ``ssm_state_indices[seq_i]``).
    So a row two requests store has no defined value (NaN here), and a request whose initial state is
    a row another request stores in the same call reads no defined value (its state and outputs NaN).
    A request re-reading or re-writing its own rows is ordered (one work item per head)."""
    name = "recurrent_gated_delta_rule"

    def recurrent_gated_delta_rule(mix_qkv, recurrent_state, beta, scale, actual_seq_lengths, ssm_state_indices,
                                   nk, nv, intermediate_state=None, cache_indices=None, num_accepted_tokens=None,
                                   g=None, gk=None):
        _recurrent_check(mix_qkv.dim() == 3, "MixQKV must be 3-dimensional (B, S, D)")
        _recurrent_check(recurrent_state.dim() == 4, "State must be 4-dimensional (N, nv, dv, dk)")
        B, S, D = mix_qkv.shape
        dv, dk = recurrent_state.shape[2], recurrent_state.shape[3]
        expected = 2 * nk * dk + nv * dv
        _recurrent_check(D == expected, f"mix_qkv width mismatch. Expected: {expected}, Got: {D}. Formula: "
                                        f"D = nv*dv + 2*nk*dk, where nv={nv}, dv(or State.size(2))={dv}, "
                                        f"nk={nk}, dk(or State.size(3))={dk}")
        _recurrent_check(recurrent_state.shape[1] == nv, "State third dimension must match nv")
        _recurrent_check(beta.dim() == 3, "Beta must be 3-dimensional (B, S, nv)")
        _recurrent_check(beta.shape[0] == B, "Beta batch size must match MixQKV")
        _recurrent_check(beta.shape[1] == S, "Beta sequence length must match MixQKV")
        _recurrent_check(beta.shape[2] == nv, "Beta last dimension must equal nv")
        _recurrent_check(ssm_state_indices.dim() == 2, "ssm_state_indices must be 2-dimensional (B, S)")
        _recurrent_check(ssm_state_indices.shape[0] == B, "ssm_state_indices batch size must match MixQKV")
        _recurrent_check(ssm_state_indices.shape[1] == S, "ssm_state_indices sequence length must match MixQKV")
        _recurrent_check(caps.recurrent_vstep(nv, dk, dv, ub_bytes) >= 8, caps.RECURRENT_VSTEP_TEXT)
        # --- what the host does not check (undefined behaviour on the device)
        for label, t in (("mix_qkv", mix_qkv), ("beta", beta), ("recurrent_state", recurrent_state),
                         ("intermediate_state", intermediate_state)):
            if t is not None and t.dtype != caps.RECURRENT_DTYPE:
                _violation(name, f"{label} is {t.dtype}; the kernel is bf16-only and reads the bytes as bf16")
        for label, t in (("mix_qkv", mix_qkv), ("beta", beta), ("recurrent_state", recurrent_state)):
            if not t.is_contiguous():
                _violation(name, f"{label} is not contiguous (used in place by raw offsets)")
        if intermediate_state is not None and not intermediate_state.is_contiguous():
            _violation(name, "intermediate_state is not contiguous: the host writes into a contiguous copy, "
                             "the caller's tensor is never updated")
        for label, t in (("actual_seq_lengths", actual_seq_lengths), ("ssm_state_indices", ssm_state_indices)):
            if t.dtype != torch.int32:
                _violation(name, f"{label} is {t.dtype}; the kernel reads int32 without a cast")
        if S > caps.RECURRENT_MAX_TOKENS:
            _violation(name, f"S={S} > {caps.RECURRENT_MAX_TOKENS} (MAX_MTP buffers)")
        if nk <= 0 or nv % nk:
            _violation(name, f"nv={nv} is not a multiple of nk={nk}")
        if gk is not None:
            _violation(name, "gk is not emulated")
        states_out = intermediate_state if intermediate_state is not None else recurrent_state
        rows_out = states_out.shape[0]
        lens = actual_seq_lengths.tolist()
        idx = ssm_state_indices.tolist()
        nat = None if num_accepted_tokens is None else num_accepted_tokens.to(torch.int32).tolist()
        ci = None if cache_indices is None else cache_indices.to(torch.int32).tolist()
        ratio = nv // nk
        betas = torch.sigmoid(beta.float())
        gates = None if g is None else g.float().reshape(B, S, nv)
        out = torch.full((B, S, nv, dv), float("nan"), dtype=torch.float32)
        writers: dict[int, set] = {}  # row -> the requests that store it in this call
        for b in range(B):
            if not 0 <= lens[b] <= S:
                _violation(name, f"actual_seq_lengths[{b}]={lens[b]} outside [0, S={S}]")
            for t in range(lens[b]):
                dst = idx[b][t]
                if not 0 <= dst < rows_out:
                    _violation(name, f"ssm_state_indices[{b}, {t}]={dst} outside [0, {rows_out}) (no pad skip)")
                writers.setdefault(dst, set()).add(b)
        writes = []
        for b in range(B):
            length = lens[b]
            pos = 0 if nat is None else nat[b] - 1
            if not 0 <= pos < S:
                _violation(name, f"num_accepted_tokens[{b}]={pos + 1} outside [1, S={S}]")
            r0 = idx[b][pos]
            if intermediate_state is not None and r0 % S == 0:
                if ci is None:
                    _violation(name, "intermediate_state without cache_indices (reads a null pointer)")
                src, row = recurrent_state, ci[b]
            else:
                src, row = (intermediate_state if intermediate_state is not None else recurrent_state), r0
            if not 0 <= row < src.shape[0]:
                _violation(name, f"initial state row {row} of batch {b} outside [0, {src.shape[0]})")
            state = src[row].float().clone()  # [nv, dv, dk]
            if src is states_out and writers.get(row, set()) - {b}:
                state.fill_(float("nan"))  # another request stores this row: no order between the cores
            for t in range(length):
                dst = idx[b][t]
                tok = mix_qkv[b, t].float()
                q, k, v = torch.split(tok, [nk * dk, nk * dk, nv * dv])
                q, k, v = q.view(nk, dk), k.view(nk, dk), v.view(nv, dv)
                q = q * torch.rsqrt(q.pow(2).sum(-1, keepdim=True) + 1e-6) * scale
                k = k * torch.rsqrt(k.pow(2).sum(-1, keepdim=True) + 1e-6)
                q, k = q.repeat_interleave(ratio, 0), k.repeat_interleave(ratio, 0)
                if gates is not None:
                    state = state * gates[b, t].exp()[:, None, None]
                u = betas[b, t][:, None] * (v - torch.einsum("hvk,hk->hv", state, k))
                state = state + u[:, :, None] * k[:, None, :]
                out[b, t] = torch.einsum("hvk,hk->hv", state, q)
                writes.append((dst, state.to(torch.bfloat16)))
        for dst, value in writes:  # the real op writes per token as it goes
            states_out[dst] = value if len(writers[dst]) == 1 else float("nan")  # two requests: undefined
        return out.to(torch.bfloat16)

    return recurrent_gated_delta_rule


# ----------------------------------------------------------------------------- sets


def emulators(mega_predicate=None, npu_chunk_refuse=None, *, chip: Optional[str] = "A3",
              mega_variant: Optional[caps.MegaVariant] = caps.MEGA_CURRENT,
              recurrent: bool = True, npu_chunk: bool = True, triton: bool = False,
              version: Optional[str] = None, environ=None) -> dict[str, Callable]:
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
    ``environ``).
    """
    ops: dict[str, Callable] = {}
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
