"""CPU emulators of the Ascend causal-conv1d entry points.

They implement the contract in :mod:`sglang_ascend_hybrid.ops.conv.contract` (sources, host
check order and texts, semantics, what stays unwritten); the source tags in the comments below
(``SKN``, ``HOST``, ``KERN``, ``EXT``, ``PY``) are the ones that module defines.  Where the real op
would read or write out of bounds or reinterpret a dtype, they raise
:class:`~sglang_ascend_hybrid.ops.errors.EmulatorContractViolation`; output rows the op leaves
unwritten are NaN.

:class:`NpuCausalConv1d` is ``torch.ops.npu.causal_conv1d``; :func:`emulate_causal_conv1d_update_v2`
the released Triton ``causal_conv1d_update_v2``; :func:`emulate_causal_conv1d_fn_v2` and
:func:`emulate_causal_conv1d_update_npu_v2` the unmerged branch's window-major ops.
:func:`emulators` builds the name -> callable table for
:func:`sglang_ascend_hybrid.ops.seam.install_emulators`; which ops exist is a parameter, so
tests run every build variant (conv op absent on Ascend 950 builds, v2 branch present or
not, released ``causal_conv1d_update_v2`` present or not).
"""

from __future__ import annotations

import threading
from typing import Optional

import torch
import torch.nn.functional as F

from sglang_ascend_hybrid.ops.conv.contract import (
    ERR_DTYPE,
    ERR_QSL,
    ERR_S_CONTIG,
    ERR_S_DTYPE,
    ERR_W_CONTIG,
    ERR_W_DIM,
    ERR_W_DTYPE,
    ERR_WIDTH,
    ERR_X_CONTIG,
    ERR_X_DIM,
    MAX_CAPTURE_NUM,
    NPU_DTYPES,
    OP_ACLNN,
    OP_FN_V2,
    OP_UPDATE_V2,
    OP_UPDATE_V2_MAIN,
)
from sglang_ascend_hybrid.ops.errors import EmulatorContractViolation


def _violate(msg: str) -> None:
    raise EmulatorContractViolation(msg)


def _ints(t: Optional[torch.Tensor]) -> Optional[list]:
    return None if t is None or t.numel() == 0 else [int(v) for v in t.reshape(-1).tolist()]


def _check_offsets(qsl: list, total: int, op: str) -> None:
    if qsl[0] < 0 or qsl[-1] > total or any(b < a for a, b in zip(qsl, qsl[1:])):
        _violate(f"{op}: query_start_loc {qsl} is not non-decreasing within [0, {total}]: the "
                 "kernel would read x out of bounds or mis-assign tokens (undefined behaviour)")


def _check_slots(used: list, slots: int, op: str) -> set:
    """``used``: slot per processed sequence (pads and empty sequences already removed).
    Out of range: a violation.  Returns the slots used more than once: parallel blocks race on
    them (read and write order unspecified), so the emulators leave those states and outputs
    NaN.  (SGLang's NPU graph padding sends every padded decode row to slot 0.)"""
    for s in used:
        if not 0 <= s < slots:
            _violate(f"{op}: slot index {s} outside [0, {slots}) and not pad_slot_id: "
                     "out-of-bounds state access (undefined behaviour)")
    return {s for s in used if used.count(s) > 1}


def _conv_fp32(hist: torch.Tensor, seq: torch.Tensor, weight_wd: torch.Tensor,
               bias: Optional[torch.Tensor], silu: bool) -> torch.Tensor:
    """hist [W-1, dim], seq [L, dim], weight [W, dim] (already in the values the kernel uses)
    -> fp32 [L, dim]: bias first, then taps oldest to newest, in fp32 (KERN ``RunSeq``)."""
    width = weight_wd.shape[0]
    full = torch.cat([hist.float(), seq.float()], dim=0)
    w = weight_wd.float()
    out = torch.zeros(seq.shape[0], seq.shape[1], dtype=torch.float32)
    if bias is not None:
        out += bias.float()
    for j in range(width):
        out += w[j] * full[j:j + seq.shape[0]]
    return F.silu(out) if silu else out


# --------------------------------------------------------------------------- torch.ops.npu.causal_conv1d


class NpuCausalConv1d:
    """``torch.ops.npu.causal_conv1d`` with the host's checks and the kernel's semantics.

    One instance stands for one process: it keeps the host's tiling cache (see module doc).
    """

    def __init__(self, *, widen_fp32: bool = False) -> None:
        """``widen_fp32``: also take fp32 (computed as every dtype is, in fp32): the emulated Ascend
        device's instrument for fp32 numerics checks of SGLang's direct calls, not the op's contract."""
        self._tiling: dict[tuple, torch.dtype] = {}
        self._lock = threading.Lock()
        self._dtypes = NPU_DTYPES + ((torch.float32,) if widen_fp32 else ())
        self.calls = 0

    def __call__(self, x, weight, conv_states, bias=None, query_start_loc=None, cache_indices=None,
                 has_initial_state=None, num_accepted_tokens=None, activation_mode=0, pad_slot_id=-1,
                 run_mode=0):
        self.calls += 1
        # ---- HOST checks, in order (RuntimeError with the real texts)
        if x.dim() not in (2, 3):
            raise RuntimeError(ERR_X_DIM)
        if weight.dim() != 2:
            raise RuntimeError(ERR_W_DIM)
        dtype = x.dtype
        if dtype not in self._dtypes:
            raise RuntimeError(ERR_DTYPE)
        if weight.dtype != dtype:
            raise RuntimeError(ERR_W_DTYPE)
        if conv_states.dtype != dtype:
            raise RuntimeError(ERR_S_DTYPE)
        if not x.is_contiguous():
            raise RuntimeError(ERR_X_CONTIG)
        if not weight.is_contiguous():
            raise RuntimeError(ERR_W_CONTIG)
        if not conv_states.is_contiguous():
            raise RuntimeError(ERR_S_CONTIG)
        width = weight.shape[0]
        if not 2 <= width <= 4:
            raise RuntimeError(ERR_WIDTH)
        varlen = x.dim() == 2
        dim = x.shape[-1]
        qsl = _ints(query_start_loc)
        if varlen:
            if qsl is None or len(qsl) < 2:
                raise RuntimeError(ERR_QSL)
            batch, seq_len, total = len(qsl) - 1, 0, x.shape[0]
        else:
            batch, seq_len = x.shape[0], x.shape[1]
            total = batch * seq_len
        op = "torch.ops.npu.causal_conv1d"
        # ---- what the kernel reads without checking (EmulatorContractViolation)
        if conv_states.dim() != 3 or conv_states.shape[2] != dim:
            _violate(f"{op}: conv_states {tuple(conv_states.shape)} is not [slots, state_len, {dim}]")
        slots, state_len = conv_states.shape[0], conv_states.shape[1]
        if weight.shape[1] != dim:
            _violate(f"{op}: weight {tuple(weight.shape)} is not [W, {dim}]: out-of-bounds weight reads")
        if state_len < width - 1:
            _violate(f"{op}: conv_states has {state_len} rows per slot, fewer than W-1 = {width - 1}")
        has_bias = bias is not None and bias.numel() > 0
        if has_bias and (bias.dtype != dtype or bias.numel() < dim):
            _violate(f"{op}: bias {bias.dtype} {tuple(bias.shape)} is read as {dim} x {dtype} "
                     "(the host checks neither its dtype nor its length)")
        idx = _ints(cache_indices)
        his = _ints(has_initial_state)
        acc = _ints(num_accepted_tokens)
        for name, vec in (("cache_indices", idx), ("has_initial_state", his),
                          ("num_accepted_tokens", acc)):
            if vec is not None and len(vec) < batch:
                _violate(f"{op}: {name} has {len(vec)} entries for {batch} sequences")
        if varlen:
            _check_offsets(qsl, total, op)
        windows = [(qsl[b], qsl[b + 1] - qsl[b]) if varlen else (b * seq_len, seq_len)
                   for b in range(batch)]
        todo = []
        for b, (start, length) in enumerate(windows):
            if length <= 0:                      # BuildSeqTaskWindow*: valid = len > 0
                continue
            slot = b if idx is None else idx[b]
            if idx is not None and slot == pad_slot_id:   # ResolveSeqCacheIndex
                continue
            todo.append((b, start, length, slot))
        racing = _check_slots([t[3] for t in todo], slots, op)
        spec = run_mode == 1 and acc is not None and width == 4   # IsUpdateSpecDecodingEnabled
        if spec and state_len < 3:
            _violate(f"{op}: speculative update with state_len {state_len} < 3")
        self._tiling_check((dim, total, seq_len, batch, int(not varlen), width, state_len, slots,
                            int(activation_mode), int(pad_slot_id), int(run_mode), int(has_bias),
                            int(idx is not None), int(his is not None), int(acc is not None)), dtype)

        # ---- kernel semantics
        x2 = x.reshape(-1, dim)
        out = torch.full_like(x2, float("nan"))             # at::empty_like(x)
        silu = activation_mode != 0
        snapshot = conv_states.clone()                       # init-state workspace (read before writes)
        w = weight
        b_vec = bias.reshape(-1)[:dim] if has_bias else None
        racing_rows: dict = {}
        for b, start, length, slot in todo:
            if run_mode == 1:
                offset = min(max(acc[b] - 1, 0), state_len - 3) if spec else 0
                hist = snapshot[slot, offset:offset + width - 1]
            elif his is not None and his[b] != 0:
                offset = 0
                hist = snapshot[slot, :width - 1]
            else:
                offset = 0
                hist = torch.zeros(width - 1, dim, dtype=dtype)
            seq = x2[start:start + length]
            out[start:start + length] = _conv_fp32(hist, seq, w, b_vec, silu).to(dtype)
            full = torch.cat([hist, seq], dim=0)
            if spec and 2 + length <= state_len:             # WriteBackStateSpec
                conv_states[slot, 0:2] = snapshot[slot, offset + 1:offset + 3]
                conv_states[slot, 2:2 + length] = seq
                written = 2 + length
            else:                                            # WriteBackState
                conv_states[slot, :width - 1] = full[-(width - 1):]
                written = width - 1
            if slot in racing:
                out[start:start + length] = float("nan")
                racing_rows[slot] = max(racing_rows.get(slot, 0), written)
        for slot, rows in racing_rows.items():
            conv_states[slot, :rows] = float("nan")
        return out.reshape(x.shape)

    def _tiling_check(self, key: tuple, dtype: torch.dtype) -> None:
        with self._lock:
            seen = self._tiling.get(key)
            if seen is None:
                if len(self._tiling) < MAX_CAPTURE_NUM:
                    self._tiling[key] = dtype
                return
        if seen != dtype:
            _violate(f"torch.ops.npu.causal_conv1d: tiling key {key} was cached for {seen}; its cache "
                     f"key omits the dtype, so this {dtype} call would run the {seen} kernel "
                     "(HOST CausalConv1dTilingKey has no dtype; the kernel reads dtypeKey from it)")


def emulate_npu_causal_conv1d(*args, **kwargs):
    """A one-call :class:`NpuCausalConv1d` (no tiling cache carried between calls)."""
    return NpuCausalConv1d()(*args, **kwargs)


# --------------------------------------------------------------------------- released causal_conv1d_update_v2


def emulate_causal_conv1d_update_v2(x, conv_state, weight, bias=None, activation=None,
                                    conv_state_indices=None, num_accepted_tokens=None,
                                    query_start_loc=None, max_query_len=-1, pad_slot_id=-1,
                                    block_idx_last_scheduled_token=None, initial_state_idx=None,
                                    validate_data=False):
    """PY ``causal_conv1d_update_v2`` (see module doc); overwrites the state-dtype copy of x."""
    op = "causal_conv1d_update_v2"
    if isinstance(activation, bool):
        activation = "silu" if activation is True else None
    elif activation is not None:
        assert activation in ["silu", "swish"]             # PY: a bare assert
    if block_idx_last_scheduled_token is not None or initial_state_idx is not None:
        _violate(f"{op}: prefix-cache (APC) indexing is not emulated")
    if conv_state_indices is None:
        _violate(f"{op}: conv_state_indices None is dereferenced by the kernel")
    original_dtype = x.dtype
    x = x.to(conv_state.dtype)                              # PY: same tensor when dtypes agree
    unsqueeze = query_start_loc is None and x.dim() == 2
    if unsqueeze:
        x = x.unsqueeze(1)
    if query_start_loc is None:
        batch, seqlen, dim = x.shape
    else:
        assert conv_state_indices is not None
        batch = conv_state_indices.size(0)
        dim = x.size(1)
        seqlen = max_query_len
    width, _ = weight.shape
    num_cache_lines, state_len_total, _ = conv_state.size()
    if weight.shape[1] != dim or conv_state.shape[2] != dim:
        _violate(f"{op}: weight {tuple(weight.shape)} / conv_state {tuple(conv_state.shape)} "
                 f"do not have {dim} channels")
    if bias is not None and bias.numel() < dim:
        _violate(f"{op}: bias has {bias.numel()} < {dim} entries")
    spec = num_accepted_tokens is not None
    eff_state_len = width - 1 + (seqlen - 1) if spec else width - 1
    np2 = 1 << max(eff_state_len - 1, 0).bit_length()      # triton.next_power_of_2
    idx = _ints(conv_state_indices)
    acc = _ints(num_accepted_tokens)
    qsl = _ints(query_start_loc)
    if len(idx) < batch or (acc is not None and len(acc) < batch):
        _violate(f"{op}: index vectors shorter than the batch ({batch})")
    if qsl is not None:
        if len(qsl) < batch + 1:
            _violate(f"{op}: query_start_loc has {len(qsl)} entries for {batch} sequences")
        _check_offsets(qsl[:batch + 1], x.shape[0], op)
    out = x
    todo = []
    for b in range(batch):
        coord = idx[b]
        if pad_slot_id is not None and coord == pad_slot_id:
            continue
        if qsl is not None:
            run_len = qsl[b + 1] - qsl[b]
            state_len_run = eff_state_len - (seqlen - run_len)
            tokens = x[qsl[b]:qsl[b + 1]]
            if run_len > max(seqlen, 0) and run_len > 0:
                _violate(f"{op}: sequence {b} has {run_len} tokens > max_query_len {seqlen}")
        else:
            run_len, state_len_run, tokens = seqlen, eff_state_len, x[b]
        if run_len <= 0:
            continue
        todo.append((b, coord, run_len, state_len_run, tokens))
    racing = _check_slots([t[1] for t in todo], num_cache_lines, op)
    new_states, outputs = {}, []
    for b, coord, run_len, state_len_run, tokens in todo:
        offset = acc[b] - 1 if spec else 0
        shift = 1 if spec else run_len
        if offset < 0 or offset + width - 1 > state_len_total:
            _violate(f"{op}: history rows [{offset}, {offset + width - 1}) outside the "
                     f"{state_len_total}-row state")
        state = conv_state[coord]
        hist = state[offset:offset + width - 1].clone()
        new = state.clone()
        written: list = []
        # STEP 2 (A/B/C): chunked state update, bounded by NP2_STATELEN and state_len_run
        if run_len < state_len_run:
            keep = state_len_run - run_len
            for dst in range(min(keep, np2)):
                src = dst + shift
                if src < state_len_run:
                    if offset + src >= state_len_total:
                        _violate(f"{op}: state row {offset + src} read out of bounds")
                    new[dst] = state[offset + src]
                    written.append(dst)
            for t in range(run_len):
                if t < max(seqlen, 0) and keep + t < state_len_run:
                    if keep + t >= state_len_total:
                        _violate(f"{op}: state row {keep + t} written out of bounds")
                    new[keep + t] = tokens[t]
                    written.append(keep + t)
        else:
            tail = run_len - state_len_run
            for dst in range(min(max(state_len_run, 0), np2)):
                if dst >= state_len_total:
                    _violate(f"{op}: state row {dst} written out of bounds")
                new[dst] = tokens[tail + dst]
                written.append(dst)
        if coord in racing:                 # lanes race on this state: the rows they write are unspecified
            new = new_states.get(coord, new)
            new[written] = float("nan")
        new_states[coord] = new
        y = _conv_fp32(hist.to(torch.float16), tokens.to(torch.float16), weight.float(),
                       None if bias is None else bias.reshape(-1)[:dim].float(),
                       activation in ("silu", "swish"))
        outputs.append((b, run_len, y))
    for coord, new in new_states.items():
        conv_state[coord] = new
    for b, run_len, y in outputs:
        if idx[b] in racing:
            y = torch.full_like(y, float("nan"))
        if qsl is not None:
            out[qsl[b]:qsl[b] + run_len] = y.to(out.dtype)
        else:
            out[b] = y.to(out.dtype)
    if unsqueeze:
        out = out.squeeze(1)
    return out.to(original_dtype)


# --------------------------------------------------------------------------- unmerged v2 branch


def _branch_checks(op: str, dtypes: tuple, pool: torch.Tensor, width: int, dim: int) -> None:
    if len(set(dtypes)) != 1 or dtypes[0] not in NPU_DTYPES:
        _violate(f"{op}: dtypes {dtypes} -- the unmerged branch's dtype rules are not known; "
                 "only one shared fp16 / bf16 dtype is emulated")
    if pool.dim() != 3 or pool.shape[1] != width - 1 or pool.shape[2] != dim:
        _violate(f"{op}: pool {tuple(pool.shape)} -- only a [slots, W-1={width - 1}, {dim}] "
                 "window-major pool has known semantics for the unmerged branch")


def emulate_causal_conv1d_fn_v2(x, weight, bias, query_start_loc, cache_indices,
                                has_initial_state, conv_states, activation, pad_slot_id=-1):
    """Unmerged branch: ``x [dim, T]``, ``weight [dim, W]``, ``conv_states [slots, W-1, dim]``."""
    op = "causal_conv1d_fn_v2"
    dim, total = x.shape
    width = weight.shape[1]
    _branch_checks(op, (x.dtype, weight.dtype, conv_states.dtype), conv_states, width, dim)
    qsl = _ints(query_start_loc)
    idx = _ints(cache_indices)
    his = _ints(has_initial_state)
    if qsl is None or idx is None or len(idx) < len(qsl) - 1:
        _violate(f"{op}: query_start_loc / cache_indices missing or short")
    _check_offsets(qsl, total, op)
    todo = []
    for b in range(len(qsl) - 1):
        if idx[b] == pad_slot_id:
            continue
        if qsl[b + 1] == qsl[b]:
            _violate(f"{op}: zero-length sequence {b} on slot {idx[b]}: behaviour not known")
        todo.append((b, idx[b]))
    racing = _check_slots([t[1] for t in todo], conv_states.shape[0], op)
    out = torch.full_like(x, float("nan"))
    silu = activation in ("silu", "swish")
    for b, slot in todo:
        start, end = qsl[b], qsl[b + 1]
        use = his is not None and his[b] != 0
        hist = conv_states[slot].clone() if use else torch.zeros(width - 1, dim, dtype=x.dtype)
        seq = x[:, start:end].t()
        out[:, start:end] = _conv_fp32(hist, seq, weight.t(), bias, silu).to(x.dtype).t()
        conv_states[slot] = torch.cat([hist, seq], dim=0)[-(width - 1):]
    for b, slot in todo:
        if slot in racing:
            out[:, qsl[b]:qsl[b + 1]] = float("nan")
            conv_states[slot] = float("nan")
    return out


def emulate_causal_conv1d_update_npu_v2(x, conv_state, weight, bias=None, activation=None,
                                        conv_state_indices=None, pad_slot_id=-1):
    """Unmerged branch: ``x [B, dim]`` / ``[B, dim, L]``, ``conv_state [slots, W-1, dim]``."""
    op = "causal_conv1d_update_npu_v2"
    squeeze = x.dim() == 2
    x3 = x.unsqueeze(-1) if squeeze else x
    batch, dim, _ = x3.shape
    width = weight.shape[1]
    _branch_checks(op, (x.dtype, weight.dtype, conv_state.dtype), conv_state, width, dim)
    idx = _ints(conv_state_indices)
    if idx is None or len(idx) < batch:
        _violate(f"{op}: conv_state_indices missing or short")
    todo = [(b, idx[b]) for b in range(batch) if idx[b] != pad_slot_id]
    racing = _check_slots([t[1] for t in todo], conv_state.shape[0], op)
    out = torch.full_like(x3, float("nan"))
    silu = activation in ("silu", "swish")
    for b, slot in todo:
        hist = conv_state[slot].clone()
        seq = x3[b].t()
        out[b] = _conv_fp32(hist, seq, weight.t(), bias, silu).to(x.dtype).t()
        conv_state[slot] = torch.cat([hist, seq], dim=0)[-(width - 1):]
    for b, slot in todo:
        if slot in racing:
            out[b] = float("nan")
            conv_state[slot] = float("nan")
    return out.squeeze(-1) if squeeze else out


# --------------------------------------------------------------------------- factory


def emulators(*, conv_op: bool = True, v2_branch: bool = True, update_v2: bool = True) -> dict:
    """Name -> emulator for :func:`sglang_ascend_hybrid.ops.seam.install_emulators`.

    ``conv_op``: ``torch.ops.npu.causal_conv1d`` present (False: an Ascend 950 build);
    ``v2_branch``: the unmerged ``causal_conv1d_fn_v2`` / ``causal_conv1d_update_npu_v2``;
    ``update_v2``: the released ``causal_conv1d_update_v2``.  Each call makes a fresh
    :class:`NpuCausalConv1d`, i.e. a fresh process tiling cache.
    """
    table: dict = {}
    if conv_op:
        table[OP_ACLNN] = NpuCausalConv1d()
    if v2_branch:
        table[OP_FN_V2] = emulate_causal_conv1d_fn_v2
        table[OP_UPDATE_V2] = emulate_causal_conv1d_update_npu_v2
    if update_v2:
        table[OP_UPDATE_V2_MAIN] = emulate_causal_conv1d_update_v2
    return table


VARIANTS = {
    "all": dict(conv_op=True, v2_branch=True, update_v2=True),
    "release": dict(conv_op=True, v2_branch=False, update_v2=True),
    "conv_op_only": dict(conv_op=True, v2_branch=False, update_v2=False),
    "ascend950": dict(conv_op=False, v2_branch=False, update_v2=True),
    "v2_branch_only": dict(conv_op=False, v2_branch=True, update_v2=False),
    "none": dict(conv_op=False, v2_branch=False, update_v2=False),
}
