"""One GDN prefill call as the prefill ladder's rungs take it (:class:`ChunkCall`), and the wrapper that
hands a kernel the call's non-empty sequences only (:func:`without_empty_sequences`)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Optional

import torch

from sglang_ascend_hybrid.ops.gdn.signature import GdnSignature
from sglang_ascend_hybrid.ops.gdn.torch_impl import CHUNK_SIZE


def chunk_offsets(lengths, chunk: int = CHUNK_SIZE) -> list:
    """Where each sequence's chunk states start in ``h`` (the per-sequence ``ceil(len / chunk)``
    states laid end to end), with the total last: ``[0, n_0, n_0 + n_1, ...]``."""
    offsets = [0]
    for n in lengths:
        offsets.append(offsets[-1] + (int(n) + chunk - 1) // chunk)
    return offsets


@dataclass
class ChunkCall:
    """One prefill call, q / k already l2-normalised.  States value-first [N, Hv, V, K].

    Batched: q / k ``[B, T, Hk, K]``, v ``[B, T, Hv, V]``, g / beta ``[B, T, Hv]`` and o ``[B, T, Hv, V]``
    (packed varlen: B = 1).  ``packed``: the batch-1 call without its batch dim, as SGLang's Ascend extend
    hands it (q / k ``[T, Hk, K]``, v ``[T, Hv, V]``, g / beta ``[T, Hv]``, o ``[T, Hv, V]``): the npu_chunk
    op takes those tensors as they are; every other rung is handed :meth:`batched` (:func:`on_batched`).
    """

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    g: torch.Tensor
    beta: torch.Tensor
    cu_seqlens: torch.Tensor
    initial_state: Optional[torch.Tensor]
    scale: float
    chunk_states: bool = False  # also return the state at the start of every 64-token chunk
    # (sequence, chunk) pairs whose chunk state must keep the initial state's precision; None: every
    # chunk state must (a rung whose chunk states are rounded then does not serve)
    exact_chunks: Optional[tuple] = None
    packed: bool = False
    _lengths: Optional[list] = None
    _max_abs: Optional[float] = None
    _signature: Optional[GdnSignature] = None
    _batched: Optional["ChunkCall"] = None

    @property
    def num_sequences(self) -> int:
        return self.cu_seqlens.numel() - 1

    @property
    def lengths(self) -> list:
        """Per-sequence lengths on the host (prefill already reads the offsets on the host)."""
        if self._lengths is None:
            bounds = self.cu_seqlens.tolist()
            self._lengths = [int(b) - int(a) for a, b in zip(bounds, bounds[1:])]
        return self._lengths

    def signature(self) -> GdnSignature:
        if self._signature is None:
            self._signature = GdnSignature(self.v.shape[-2], self.q.shape[-2], self.q.shape[-1], self.v.shape[-1],
                                           self.q.dtype, self.chunk_states,
                                           None if self.initial_state is None else self.initial_state.dtype)
        return self._signature

    def batched(self) -> "ChunkCall":
        """This call with batched tensors (itself when it is; a packed call's views ``[1, T, ...]``, made once)."""
        if not self.packed:
            return self
        if self._batched is None:
            self._batched = ChunkCall(self.q.unsqueeze(0), self.k.unsqueeze(0), self.v.unsqueeze(0),
                                      self.g.unsqueeze(0), self.beta.unsqueeze(0), self.cu_seqlens,
                                      self.initial_state, self.scale, self.chunk_states, self.exact_chunks,
                                      _lengths=self._lengths, _max_abs=self._max_abs, _signature=self._signature)
        return self._batched

    def key_first_state(self) -> Optional[torch.Tensor]:
        """Fresh key-first [N, Hv, K, V] fp32 copy of the initial state (FLA-layout kernels)."""
        if self.initial_state is None:
            return None
        return self.initial_state.float().transpose(-1, -2).contiguous()

    def num_chunks(self, chunk: int = CHUNK_SIZE) -> int:
        return chunk_offsets(self.lengths, chunk)[-1]

    def max_abs(self) -> float:
        """Largest magnitude among q, k, v, beta and the initial state (the tensors the mega wrapper
        casts to fp16); NaN when any is NaN.  Read on the host once per call (one sync; prefill
        already reads the offsets on the host), only when a 16-bit-range kernel is about to run."""
        if self._max_abs is None:
            parts = [t.detach().abs().amax().float() for t in (self.q, self.k, self.v, self.beta, self.initial_state)
                     if t is not None and t.numel()]
            self._max_abs = float(torch.stack(parts).max()) if parts else 0.0
        return self._max_abs


def on_batched(run):
    """``run`` (a rung's runner of batched calls) for any call: a packed call is handed as :meth:`ChunkCall.batched`
    and its o given back packed ``[T, Hv, V]``."""

    def batched_run(call: ChunkCall):
        if not call.packed:
            return run(call)
        o, final, h = run(call.batched())
        return o[0], final, h

    batched_run.__name__ = getattr(run, "__name__", "run")
    return batched_run


def without_empty_sequences(run):
    """``run`` (a rung's runner) on the call's non-empty sequences only, the empty ones' results put back:
    o and the per-chunk states are untouched (an empty sequence has no token and no chunk), the final
    state of an empty sequence is its initial state (zeros without one), as the torch rung returns it.

    For the rungs fed by cu_seqlens whose kernels mishandle empty sequences: sgl-kernel-npu's Triton
    entry numbers chunks by the non-empty sequences before them (``prepare_chunk_indices``, SKN
    f425bdf1 ``fla/utils.py`` ~155-164), so every sequence after an empty one is computed from
    unwritten buffers (:func:`sglang_ascend_hybrid.emulators.gdn_triton_chunk.empty_sequence_before_tokens`);
    the mega kernel's ``chunk_h`` (SKN f425bdf1 ``csrc/mega_chunk_gdn/op_kernel/chunk_h.cpp`` ~519-560)
    stores an empty sequence's initial state into the ``h`` row of the next sequence's first chunk (past
    the end of ``h`` when it is the last) and signals a cross-core flag its cube side never waits for.
    The lengths are on the host already (prefill reads the offsets there)."""

    def without_empty(call: ChunkCall):
        keep = [i for i, n in enumerate(call.lengths) if n > 0]
        if len(keep) == call.num_sequences:
            return run(call)
        dev = call.q.device
        if keep:
            kept = [call.lengths[i] for i in keep]
            cu = torch.tensor([0, *itertools.accumulate(kept)], dtype=call.cu_seqlens.dtype, device=dev)
            rows = torch.tensor(keep, dtype=torch.long, device=dev)
            renumber = {old: new for new, old in enumerate(keep)}
            exact = (None if call.exact_chunks is None
                     else tuple((renumber[i], c) for i, c in call.exact_chunks))  # only non-empty ones have chunks
            sub = ChunkCall(call.q, call.k, call.v, call.g, call.beta, cu,
                            None if call.initial_state is None else call.initial_state.index_select(0, rows),
                            call.scale, call.chunk_states, exact, _lengths=kept, _max_abs=call._max_abs)
            o, final_kept, h = run(sub)
        Hv, V, K = call.v.shape[2], call.v.shape[3], call.q.shape[3]
        final = (torch.zeros(call.num_sequences, Hv, V, K, dtype=torch.float32, device=dev)
                 if call.initial_state is None else call.initial_state.float().clone())
        if not keep:  # no token at all: nothing for a kernel to do
            o = call.q.new_empty(1, 0, Hv, V)
            h = call.q.new_empty(0, Hv, V, K, dtype=torch.float32) if call.chunk_states else None
            return o, final, h
        final[rows] = final_kept.float()
        return o, final, h

    without_empty.__name__ = getattr(run, "__name__", "run")
    return without_empty
