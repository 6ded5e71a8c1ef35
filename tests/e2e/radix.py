"""Whole-model radix-cache runs driven by SGLang's own radix tree and scheduler batch code.

:class:`RadixScheduler` owns a real prefix cache around a :class:`harness.Engine` (the
model, SGLang's pools, the plugin's backend) and serves requests one scheduler step at
a time, the way SGLang's scheduler does with page 128 and the mamba ``extra_buffer``
strategy.

Real SGLang code (called, not restated):

* the cache: ``UnifiedRadixCache`` with the FULL + MAMBA components (what
  ``mem_cache/registry.py`` builds for a hybrid-SSM model, every release 0.5.20+) over
  ``PagedTokenToKVPoolAllocator(page_size=128)`` and the engine's
  ``HybridReqToTokenPool`` (ping-pong track slots, ``enable_overlap_schedule=True``).
  The allocator's ``kvcache`` is the engine's own ``MHATokenToKVPool`` (built with page 1,
  which only sets its padding row); the allocator is sized to the whole pages its
  buffers hold, so every location it hands out is a row of the pool the model writes;
* admission: ``Req.init_next_round_input(tree)`` (``match_prefix``: the matched
  prefix, the working mamba slot, the staged copy-on-write or clear);
* each step: ``ScheduleBatch.init_new`` / ``prepare_for_extend`` / ``filter_batch`` /
  ``prepare_for_decode`` (rows, KV locations, ``req_to_token``, every
  ``mamba_track_*`` field and host mirror, the deferred COW indices), then
  ``ModelRunner._maybe_execute_deferred_mamba_cow_and_clear`` before the forward;
* caching: ``checkpoint_kv_cache`` / ``release_kv_cache`` (``cache_unfinished_req`` via
  ``maybe_cache_unfinished_req`` / ``release_kv_cache(is_insert=)`` on 0.5.20 / 0.5.21),
  and after each decode step ``SchedulerBatchResultProcessor._handle_finish_state_updated_req``
  (decode track bookkeeping, ping-pong swap, release at finish).

Stand-ins (and why):

* ``model_config``: ``NS(vocab_size, hf_text_config=<the model's text config>,
  is_encoder_decoder=False)``, the only fields the batch code reads (the real
  ``ModelConfig`` wants a checkpoint on disk).
* the ``ForwardBatch`` is built from the ``ScheduleBatch`` field by field (what
  ``get_model_worker_batch`` + ``ForwardBatch.init_new`` copy; ``init_new`` wants a
  model runner); greedy sampling is ``argmax`` of the logits.
* the scheduler loop (what ``get_new_batch_prefill`` / ``PrefillAdder`` /
  ``process_batch_result_prefill`` do for these requests): the chunk end (given by the
  test, not the adder's budget rules), the lock on the matched node, the stash before
  the next chunk, and per request after prefill the token append,
  ``update_finish_state`` and the checkpoint / release call.  The real prefill result
  method wants a ``GenerationBatchResult``, streamer, metrics and logprob collaborators.
* pinning is off during ``prepare_for_decode``: it pins the track mask (and on 0.5.20 -
  0.5.22 the track positions) unconditionally, and a CUDA-less torch raises.
"""

from __future__ import annotations

import contextlib
from array import array
from dataclasses import dataclass, field
from types import SimpleNamespace as NS
from typing import Optional

import torch

PAGE = 128  # the NPU default page: the radix tree's page and the KV allocator's
CACHE_CHUNK = 128  # mamba_cache_chunk_size() = max(64-token state chunk, page)
SERVER_ARGS = dict(page_size=PAGE, disable_radix_cache=False, mamba_radix_cache_strategy="extra_buffer",
                   _mamba_cache_chunk_size=CACHE_CHUNK)
# 2 ping-pong track slots per request (the overlap scheduler's width, the server default);
# rows / slots are pool sizes: the pool and the allocator pick them
ENGINE_ARGS = dict(extra_buffer=True, overlap_schedule=True, max_context=512, rows=4, mamba_slots=16)
_MAMBA_FIELDS = ("mamba_track_indices", "mamba_track_mask", "mamba_track_seqlens", "mamba_prefill_track_mask_cpu",
                 "mamba_track_seqlens_cpu", "mamba_cow_src_indices", "mamba_cow_dst_indices",
                 "mamba_clear_indices")


@dataclass
class Served:
    """One request's life: what the real match returned and what the model produced."""

    rid: str
    prompt: list
    matched: int  # the prefix length match_prefix gave the request
    branching: Optional[int]  # req.mamba_branching_seqlen after the match
    tracked: list = field(default_factory=list)  # boundaries the batch code tracked (extends, then decodes)
    generated: list = field(default_factory=list)
    logits: list = field(default_factory=list)  # [vocab] fp32 row per generated token


@contextlib.contextmanager
def _cpu_pin_memory():
    """Pinning off for ``prepare_for_decode``, which pins unconditionally: ``.pin_memory()``
    (every release) and ``torch.tensor(..., pin_memory=True)`` (0.5.20 - 0.5.22)."""
    saved = torch.Tensor.pin_memory, torch.tensor

    def tensor(*args, pin_memory=False, **kwargs):
        return saved[1](*args, **kwargs)

    torch.Tensor.pin_memory, torch.tensor = (lambda self, *a, **k: self), tensor
    try:
        yield
    finally:
        torch.Tensor.pin_memory, torch.tensor = saved


def _prefix_len(req) -> int:
    return req.prefix_len if hasattr(req, "prefix_len") else len(req.prefix_indices)  # 0.5.22+ / older


def _set_extend_end(req, end: int) -> None:
    if hasattr(req, "set_extend_range"):  # 0.5.20 / 0.5.21
        req.set_extend_range(_prefix_len(req), end)
    else:
        req.extend_end = end


class RadixScheduler:
    """SGLang's radix tree, allocator and batch code around one engine (see the module doc)."""

    def __init__(self, engine):
        from sglang.srt.disaggregation.utils import DisaggregationMode
        from sglang.srt.managers.scheduler_components.batch_result_processor import SchedulerBatchResultProcessor
        from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams
        from sglang.srt.mem_cache.unified_cache.components.base import ComponentType
        from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

        self.engine, self.pool = engine, engine.req_to_token_pool
        kv = engine.token_to_kv_pool
        # page p holds locations [p * PAGE, (p + 1) * PAGE), pages 1..n (page 0 is the pad
        # page): n pages fit in the engine's KV buffers of size + 1 rows
        pages = (kv.size + kv.page_size) // PAGE - 1
        self.alloc = PagedTokenToKVPoolAllocator(size=pages * PAGE, page_size=PAGE, dtype=engine.dtype,
                                                 device="cpu", kvcache=kv, need_sort=False)
        self.tree = UnifiedRadixCache(CacheInitParams(
            req_to_token_pool=self.pool, token_to_kv_pool_allocator=self.alloc, page_size=PAGE, disable=False,
            tree_components=(ComponentType.FULL, ComponentType.MAMBA), enable_mamba_extra_buffer=True,
            eviction_policy="lru"))
        text_cfg = getattr(engine.cfg, "text_config", engine.cfg)
        self.model_config = NS(vocab_size=text_cfg.vocab_size, hf_text_config=text_cfg, is_encoder_decoder=False)
        self.proc = SchedulerBatchResultProcessor(
            is_generation=True, disaggregation_mode=DisaggregationMode.NULL, enable_overlap=False,
            enable_overlap_mlx=False, model_config=self.model_config, token_to_kv_pool_allocator=self.alloc,
            tree_cache=self.tree, hisparse_coordinator=None, req_to_token_pool=self.pool,
            decode_offload_manager=None, metrics_collector=None, metrics_reporter=None, draft_worker=None,
            model_worker=NS(), logprob_result_processor=None, output_streamer=None, beam_coordinator=None,
            abort_request=None)

    # ------------------------------------------------------------------ the scheduler loop

    def serve(self, rid: str, prompt: list, new_tokens: int, chunk: Optional[int] = None) -> Served:
        """Admit one request, prefill it (in chunks of ``chunk`` tokens when given),
        decode until ``new_tokens`` tokens are out; it is cached as SGLang caches it."""
        from sglang.srt.managers.schedule_batch import Req
        from sglang.srt.sampling.sampling_params import SamplingParams

        sp = SamplingParams(temperature=0, max_new_tokens=new_tokens, ignore_eos=True)
        sp.normalize(None)
        req = Req(rid=rid, origin_input_text="", origin_input_ids=array("q", prompt), sampling_params=sp)
        req.init_next_round_input(self.tree)  # match_prefix, mamba slot, staged COW
        out = Served(rid, list(prompt), _prefix_len(req), req.mamba_branching_seqlen)
        self._set_chunk(req, chunk)
        self._lock(req)
        batch = self._extend(req, out)
        while not out.generated:  # a middle chunk ran
            # the next chunk: Scheduler.stash_chunked_request, init_next_round_input()
            # (no tree: no rematch), PrefillAdder.add_chunked_req
            self._cache_unfinished(req, chunked=True)
            req.init_next_round_input()
            self._set_chunk(req, chunk)
            batch = self._extend(req, out)
        while not req.finished():
            self._decode(batch, out)
        batch.filter_batch()
        return out

    def check_idle(self) -> None:
        """The scheduler's idle invariants (``SchedulerInvariantChecker``, ``tree.sanity_check``):
        no request holds a row, every KV page and mamba slot is free or in the tree, nothing locked."""
        self.tree.sanity_check()
        assert self.pool.available_size() == self.pool.size, "a request row leaked"
        assert self.tree.full_protected_size() == 0 and self.tree.mamba_protected_size() == 0
        kv = self.alloc.available_size() + self.tree.full_evictable_size()
        assert kv == self.alloc.size, f"KV: {kv} of {self.alloc.size} free or cached"
        slots = self.pool.mamba_allocator.available_size() + self.tree.mamba_evictable_size()
        assert slots == self.pool.mamba_pool.size, f"mamba: {slots} of {self.pool.mamba_pool.size} free or cached"

    def flush(self) -> None:
        """``Scheduler.flush_cache``'s resets: an empty tree, every row, slot and page free."""
        self.tree.reset()
        self.pool.clear()
        self.alloc.clear()

    @staticmethod
    def _set_chunk(req, chunk):
        start, total = _prefix_len(req), len(req.full_untruncated_fill_ids)
        end = total if chunk is None else min(total, start + chunk)
        _set_extend_end(req, end)
        req.inflight_middle_chunks = int(end < total)

    def _lock(self, req):
        """``PrefillAdder._commit_prefill_admission``: lock the matched node for the request."""
        if hasattr(self.tree, "lock"):  # 0.5.22+
            req.lock = self.tree.lock(req.last_node)
        else:
            req.lock_receipt = self.tree.inc_lock_ref(req.last_node).to_dec_params()

    def _cache_unfinished(self, req, chunked: bool = False):
        from sglang.srt.mem_cache import common

        if hasattr(common, "checkpoint_kv_cache"):  # 0.5.22+
            common.checkpoint_kv_cache(req, self.tree)
        else:
            common.maybe_cache_unfinished_req(req, self.tree, **(dict(chunked=True) if chunked else {}))

    def _release(self, req):
        from sglang.srt.mem_cache import common

        if hasattr(common, "checkpoint_kv_cache"):  # 0.5.22+
            common.release_kv_cache(req, self.tree, checkpoint=True)
        else:
            common.release_kv_cache(req, self.tree, is_insert=True)

    # ------------------------------------------------------------------ steps

    def _extend(self, req, out: Served):
        from sglang.srt.managers.schedule_batch import ScheduleBatch
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        batch = ScheduleBatch.init_new([req], self.pool, self.alloc, self.tree, self.model_config,
                                       enable_overlap=False, spec_algorithm=SpeculativeAlgorithm.NONE)
        batch.prepare_for_extend()
        if bool(batch.mamba_track_mask[0]):
            out.tracked.append(req.kv.mamba_last_track_seqlen)
        logits = self._forward(batch, self._extend_batch(batch))
        # process_batch_result_prefill, per request
        for r, row in zip(batch.reqs, logits):
            if r.inflight_middle_chunks > 0:  # a middle chunk samples nothing, caches nothing
                r.inflight_middle_chunks -= 1
                continue
            self._append(r, row, out)
            r.update_finish_state()
            if r.finished():
                self._release(r)
            else:
                self._cache_unfinished(r)
        return batch

    def _decode(self, batch, out: Served):
        batch.filter_batch()
        with _cpu_pin_memory():
            batch.prepare_for_decode()
        logits = self._forward(batch, self._decode_batch(batch))
        result = NS(num_correct_drafts_per_req_cpu=None)  # a non-speculative GenerationBatchResult
        for i, (r, row) in enumerate(zip(batch.reqs, logits)):
            self._append(r, row, out)
            r.update_finish_state(1)
            self.proc._handle_finish_state_updated_req(r, batch, result, i, None)
            if batch.mamba_track_mask_cpu[i]:
                out.tracked.append(r.kv.mamba_last_track_seqlen)

    def _append(self, req, row, out: Served):
        tok = int(row.argmax())
        req.output_ids.append(tok)
        out.generated.append(tok)
        out.logits.append(row.clone())

    def _forward(self, batch, fb):
        from sglang.srt.model_executor.model_runner import ModelRunner

        ModelRunner._maybe_execute_deferred_mamba_cow_and_clear(
            NS(req_to_token_pool=self.pool, is_draft_worker=False), fb)
        logits = self.engine.forward(fb).float()
        assert logits.shape[0] == batch.batch_size(), logits.shape
        # run_batch's non-overlap tail: the sampled ids are the next decode's input ids
        batch.input_ids = logits.argmax(-1).to(torch.int64)
        return logits

    # ------------------------------------------------------------------ ScheduleBatch -> ForwardBatch

    def _extend_batch(self, batch):
        from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

        prefix, new = list(batch.prefix_lens), list(batch.extend_lens)
        ids = getattr(batch, "prefill_input_ids_cpu", None)
        ids = batch.input_ids if ids is None else ids
        seq = batch.seq_lens_cpu.to(torch.int64)
        fb = ForwardBatch(
            forward_mode=ForwardMode.EXTEND, batch_size=batch.batch_size(),
            input_ids=torch.as_tensor(ids, dtype=torch.int64), req_pool_indices=batch.req_pool_indices,
            seq_lens=batch.seq_lens, seq_lens_cpu=seq, out_cache_loc=batch.out_cache_loc,
            seq_lens_sum=int(seq.sum()),
            positions=torch.cat([torch.arange(p, p + n, dtype=torch.int64) for p, n in zip(prefix, new)]),
            extend_num_tokens=sum(new), extend_seq_lens=torch.tensor(new, dtype=torch.int32),
            extend_prefix_lens=torch.tensor(prefix, dtype=torch.int32),
            extend_start_loc=torch.tensor([sum(new[:i]) for i in range(len(new))], dtype=torch.int32),
            extend_prefix_lens_cpu=prefix, extend_seq_lens_cpu=new)
        return self._copy_mamba_fields(batch, fb)

    def _decode_batch(self, batch):
        from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

        seq = batch.seq_lens_cpu.to(torch.int64)
        fb = ForwardBatch(
            forward_mode=ForwardMode.DECODE, batch_size=batch.batch_size(), input_ids=batch.input_ids,
            req_pool_indices=batch.req_pool_indices, seq_lens=batch.seq_lens, seq_lens_cpu=seq,
            out_cache_loc=batch.out_cache_loc, seq_lens_sum=int(seq.sum()), positions=batch.seq_lens - 1)
        return self._copy_mamba_fields(batch, fb)

    @staticmethod
    def _copy_mamba_fields(batch, fb):
        for name in _MAMBA_FIELDS:
            if hasattr(fb, name):
                value = getattr(batch, name, None)
                setattr(fb, name, list(value) if name.endswith("_cpu") and value is not None else value)
        return fb
