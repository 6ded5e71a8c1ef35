"""Speculative decoding (MTP / NEXTN, linear draft chain) of a whole GDN model, driven the way
SGLang's EAGLE worker drives the target model on NPU.

What is real SGLang here (called, not restated), on top of :mod:`tests.e2e.harness`:

* the pool: ``HybridReqToTokenPool`` built as SGLang builds it with speculative decoding on
  (``speculative_num_draft_tokens`` and ``speculative_eagle_topk`` passed; ``memory_pool._is_npu``
  on): conv windows longer by ``draft - 1`` (``_init_npu_conv_state``), the per-draft-token
  intermediate SSM cache, and on SGLang 0.5.20 the temporal state handed out as
  ``temporal_state.transpose(-1, -2)``;
* the TARGET_VERIFY forward: a ``ForwardBatch`` in ``ForwardMode.TARGET_VERIFY`` with a real
  ``EagleVerifyInput`` (topk 1), through ``HybridLinearAttnBackend.init_forward_metadata`` and
  ``AscendGDNAttnBackend.init_forward_metadata`` / ``prepare_gdn_inputs`` / ``forward_extend``'s
  verify branch (``torch.ops.npu.causal_conv1d`` with ``num_accepted_tokens``, then
  ``fused_recurrent_gated_delta_rule_update``, which the plugin's ``gdn-verify-ladder`` hook
  serves), the model class and ``LogitsProcessor`` (every window row's logits);
* acceptance: SGLang's own greedy tree-verify kernel ``verify_tree_greedy_triton`` (the Triton
  form of ``verify_tree_greedy``; run by Triton's CPU interpreter) on the target's argmax, over the
  chain's ``retrieve_index`` / ``retrieve_next_token`` / ``retrieve_next_sibling``;
  ``accept_lens = accepted drafts + 1`` as ``eagle_sample`` returns it;
* the commit: SGLang's ``commit_mamba_states_after_verify`` (its ``_verify_commit_step_indices``,
  including the radix-track step when ``mamba_track_indices`` is given) ->
  ``AscendHybridLinearAttnBackend.update_mamba_state_after_mtp_verify`` ->
  sgl-kernel-npu ``move_intermediate_cache`` (the plugin's emulator with the kernel's
  physical-memory semantics, :mod:`sglang_ascend_hybrid.emulators.mamba_state_update`) and
  ``conv_state_rollback`` (:func:`conv_state_rollback`, below).

Stand-ins (and why):

* the draft model: none.  Draft tokens are the greedy tokens of the same model without
  speculative decoding (transformers' greedy tokens where a bf16 run left that path at a near
  tie), with chosen positions deliberately wrong (:class:`SpecPlan`, :class:`DraftOracle`), so
  the acceptance is partial and the commit rolls back.
* no DECODE step on the target: with speculative decoding SGLang's scheduler never runs one (every
  step after a prefill is draft + TARGET_VERIFY).  On this pool a DECODE would not be a real path
  either: ``forward_decode`` reads conv rows ``[0, W-1)`` while prefill and verify keep the live
  window in the last rows.
* graph mode (``SpecPlan.graph_buckets``): the linear backend's graph-replay metadata only
  (``init_cuda_graph_state`` once, ``init_forward_metadata_out_graph`` per step, batches padded as
  the graph runner pads them); nothing is captured and full attention keeps eager metadata.
* radix tracking: the verify steps carry track slots and SGLang's commit stores the states at
  track-grid crossings (grid 8: ``mamba_track_interval`` / ``_mamba_cache_chunk_size`` 8, page 1);
  a hit is restored as :mod:`tests.e2e.prefix` does (``copy_mamba_state``, shared KV rows).  No
  ``UnifiedRadixCache`` or ping-pong slots (:mod:`tests.e2e.radix` drives those for plain decode).
* full attention in the verify window: ``TorchNativeAttnBackend`` (the harness's stand-in of
  the Ascend attention backend) run as a causal extend of the window over the request's prefix
  (:func:`verify_window_attention`): what the Ascend backend does for a topk-1 chain by adding
  ``draft_token_num`` to the prefix lengths.
* the NPU ops SGLang's verify and commit call directly (not through the plugin):
  ``fused_gdn_gating_kernel_without_sigmoid``, ``conv_state_rollback`` and, in fp32 runs,
  ``torch.ops.npu.causal_conv1d`` with ``num_accepted_tokens`` -- plain torch written from
  sgl-kernel-npu's source (below); in bf16 runs the conv op is the plugin's emulator, which has
  the op's speculative mode.
* the EAGLE worker around the calls: the ``ScheduleBatch`` / ``TpModelWorker`` the commit reads
  are namespaces with the fields it reads (``forward_mode``, ``req_pool_indices``, ``seq_lens``,
  ``mamba_track_indices``, ``tree_cache.page_size``; ``model_runner``'s ``model_config``,
  ``req_to_token_pool``, ``attn_backend``, ``model``); the draft model's forward, draft-extend and
  the KV allocator's bookkeeping are not run (KV locations are fixed per row and position, so a
  rejected draft's KV row is simply overwritten by the next window).
"""

from __future__ import annotations

import contextlib
import copy
import functools
from dataclasses import dataclass
from types import SimpleNamespace as NS
from typing import Callable, Optional

import pytest
import torch

from sglang_ascend_hybrid.emulators.gdn_gating import fused_gdn_gating_kernel_without_sigmoid
from tests.e2e import harness, npu_standins

DRAFT_TOKENS = 4  # speculative_num_draft_tokens: the root + 3 MTP drafts (speculative_num_steps 3)


def server_args(draft_tokens: int = DRAFT_TOKENS) -> dict:
    """The server arguments of an MTP / NEXTN run (NEXTN becomes EAGLE in SGLang's argument
    resolution; topk 1 is a linear chain)."""
    return dict(speculative_algorithm="EAGLE", speculative_eagle_topk=1,
                speculative_num_draft_tokens=draft_tokens, speculative_num_steps=draft_tokens - 1)


def engine_args(draft_tokens: int = DRAFT_TOKENS) -> dict:
    return dict(speculative_num_draft_tokens=draft_tokens, speculative_eagle_topk=1)


# --------------------------------------------------------------------------- NPU stand-ins


def conv_state_rollback(conv_states, state_indices, step_indices, draft_token_num):
    """sgl-kernel-npu ``mamba/mamba_state_update_triton.py`` ``conv_state_rollback`` /
    ``_conv_state_rollback_kernel``: per request with ``step >= 0`` and
    ``shift = (draft_token_num - 1) - step > 0``, every layer's window rows ``[0, W - shift)`` of
    the slot move to ``[shift, W)`` (top down, in place; rows ``[0, shift)`` keep what they held)."""
    if state_indices.shape[0] == 0:
        return
    if conv_states.ndim != 4:
        raise ValueError(f"conv_states must be 4D, got {conv_states.ndim}D")
    if state_indices.ndim != 1 or step_indices.ndim != 1:
        raise ValueError("state_indices and step_indices must be 1D")
    if state_indices.shape[0] != step_indices.shape[0]:
        raise ValueError("state_indices and step_indices must have the same length")
    window = conv_states.shape[2]
    for slot, step in zip(state_indices.tolist(), step_indices.tolist()):
        shift = (draft_token_num - 1) - step
        if step < 0 or shift <= 0:
            continue
        for row in reversed(range(window - shift)):
            conv_states[:, slot, row + shift] = conv_states[:, slot, row]


def causal_conv1d(x, weight, conv_states, bias=None, query_start_loc=None, cache_indices=None,
                  has_initial_state=None, num_accepted_tokens=None, activation_mode=0, pad_slot_id=-1,
                  run_mode=0):
    """``torch.ops.npu.causal_conv1d`` in any float dtype, with the op's speculative update mode
    (the contract of :mod:`sglang_ascend_hybrid.ops.conv.contract`, ``IsUpdateSpecDecodingEnabled``:
    run mode 1 with ``num_accepted_tokens`` and width 4): the history is read at row offset
    ``clamp(accepted - 1, 0, state_len - 3)``; when ``2 + len <= state_len`` rows 0, 1 get the
    history's last two rows and rows ``2 ..`` the tokens (``WriteBackStateSpec``).  Every other
    call is :func:`tests.e2e.npu_standins.causal_conv1d` (run mode 0 ignores the accepted counts)."""
    width = weight.shape[0]
    if run_mode != 1 or num_accepted_tokens is None or width != 4:
        return npu_standins.causal_conv1d(x, weight, conv_states, bias, query_start_loc, cache_indices,
                                          has_initial_state, None, activation_mode, pad_slot_id, run_mode)
    state_len = conv_states.shape[1]
    snapshot = conv_states.clone()
    out = torch.empty_like(x)
    bounds = query_start_loc.tolist()
    accepted = num_accepted_tokens.tolist()
    for i in range(len(bounds) - 1):
        slot = int(cache_indices[i])
        lo, hi = bounds[i], bounds[i + 1]
        if slot == pad_slot_id or hi == lo:
            continue
        offset = min(max(accepted[i] - 1, 0), state_len - 3)
        hist = snapshot[slot, offset:offset + 3].float()
        full = torch.cat([hist, x[lo:hi].float()])
        y = sum(weight[k].float() * full[k:k + hi - lo] for k in range(width))
        if bias is not None:
            y = y + bias.float()
        out[lo:hi] = (torch.nn.functional.silu(y) if activation_mode else y).to(x.dtype)
        if 2 + hi - lo <= state_len:
            conv_states[slot, 0:2] = snapshot[slot, offset + 1:offset + 3]
            conv_states[slot, 2:2 + hi - lo] = x[lo:hi].to(conv_states.dtype)
        else:
            conv_states[slot, :3] = full[-3:].to(conv_states.dtype)
    return out


def _gating_kernel() -> Callable:
    """SGLang's verify gating kernel as the run calls it: the emulator, wrapped in the plugin's hook when the
    run's plugin has the gdn-verify-gates patch applied."""
    from sglang_ascend_hybrid.patches.status import APPLIED, STATUS

    state = STATUS.patches.get("gdn-verify-gates")
    if state is None or state.state != APPLIED:
        return fused_gdn_gating_kernel_without_sigmoid
    from sglang_ascend_hybrid.integration.gdn_hooks import ascend_verify_gates

    return functools.wraps(fused_gdn_gating_kernel_without_sigmoid)(
        functools.partial(ascend_verify_gates, fused_gdn_gating_kernel_without_sigmoid))


@contextlib.contextmanager
def spec_npu_ops(*, fp32_conv: bool = True):
    """The NPU ops SGLang's verify and commit call directly, bound where SGLang's modules bound
    them: the gating kernel, the commit's two kernels (``move_intermediate_cache``: the plugin's
    emulator) and, with ``fp32_conv``, the speculative conv stand-in :func:`causal_conv1d`.
    Yields the call counts (``move_intermediate_cache``, ``conv_state_rollback``)."""
    from sglang.srt.hardware_backend.npu.attention import ascend_gdn_backend as gdn_mod
    from sglang.srt.hardware_backend.npu.attention import ascend_hybrid_linear_attn_backend as hybrid_mod

    from sglang_ascend_hybrid.emulators.mamba_state_update import emulate_move_intermediate_cache

    calls: dict = {}

    def counted(name, fn):
        @functools.wraps(fn)
        def op(*args, **kwargs):
            calls[name] = calls.get(name, 0) + 1
            return fn(*args, **kwargs)
        return op

    with pytest.MonkeyPatch.context() as mp:
        # the plugin's emulator of it (emulators/gdn_gating.py: its tiling defect and its addressing included),
        # under the plugin's gdn-verify-gates hook where that patch is in place, as SGLang's HookRegistry wraps
        # the kernel sgl-kernel-npu's module holds (here the stub of tests/npu_stubs)
        mp.setattr(gdn_mod, "fused_gdn_gating_kernel_without_sigmoid", _gating_kernel())
        mp.setattr(hybrid_mod, "move_intermediate_cache",
                   counted("move_intermediate_cache", emulate_move_intermediate_cache))
        mp.setattr(hybrid_mod, "conv_state_rollback", counted("conv_state_rollback", conv_state_rollback))
        if fp32_conv:
            mp.setattr(torch.ops.npu, "causal_conv1d", causal_conv1d, raising=False)
        yield calls


def fast_split(dev: Optional[Callable]) -> Callable:
    """``dev`` (a device context of :mod:`tests.e2e.device`, or None) plus the GDN models' projection
    split and attention output gate in plain torch (:func:`tests.e2e.npu_standins.torch_model_kernels`:
    what SGLang's Triton kernels compute, which Triton's CPU interpreter runs at ~35 ms a launch)."""
    @contextlib.contextmanager
    def both():
        with npu_standins.torch_model_kernels():
            if dev is None:
                yield None
            else:
                with dev() as calls:
                    yield calls
    return both


# --------------------------------------------------------------------------- SGLang pieces by release


def _verify_tree_greedy():
    """SGLang's Triton greedy tree verify (0.5.23: kernels/ops/speculative/spec_tree.py; older
    releases: srt/speculative/eagle_utils.py)."""
    try:
        from sglang.kernels.ops.speculative.spec_tree import verify_tree_greedy_triton
    except ImportError:
        from sglang.srt.speculative.eagle_utils import verify_tree_greedy_triton
    return verify_tree_greedy_triton


def verify_window_attention(full_backend, draft_tokens: int) -> None:
    """Make the harness's full-attention stand-in (``TorchNativeAttnBackend``) serve TARGET_VERIFY:
    the window is a causal extend of ``draft_tokens`` tokens over the request's prefix
    (``forward_batch.seq_lens``, as SGLang's verify batch states it), which is what the Ascend
    attention backend computes for a topk-1 chain (it adds ``draft_token_num`` to the prefix
    lengths).  Other modes pass through."""
    real = full_backend.forward_extend

    def forward_extend(q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
        if forward_batch.forward_mode.is_target_verify():
            window = copy.copy(forward_batch)
            prefix = forward_batch.seq_lens
            window.seq_lens = prefix + draft_tokens
            window.extend_prefix_lens = prefix.to(torch.int32)
            window.extend_seq_lens = torch.full_like(prefix, draft_tokens, dtype=torch.int32)
            forward_batch = window
        return real(q, k, v, layer, forward_batch, save_kv_cache, **kwargs)

    full_backend.forward_extend = forward_extend


# --------------------------------------------------------------------------- the scheduler


@dataclass
class VerifyStep:
    """What one verify step did for one request."""

    name: str
    drafts: list
    accepted: int  # drafts accepted (accept_lens - 1)
    committed_step: int  # the window step the commit copied (last_correct_step_indices)


class SpecScheduler(harness.Scheduler):
    """:class:`harness.Scheduler` plus SGLang's TARGET_VERIFY step and commit."""

    def __init__(self, engine: harness.Engine, draft_tokens: int = DRAFT_TOKENS, graph_buckets: tuple = ()):
        super().__init__(engine)
        self.draft_tokens = draft_tokens
        self.graph_buckets = tuple(sorted(graph_buckets))
        self.steps: list[VerifyStep] = []
        verify_window_attention(engine.backend.full_attn_backend, draft_tokens)
        if self.graph_buckets:
            # what SGLang's graph runner does once at startup: the linear backend's static buffers
            # for the largest batch, draft_tokens tokens per request
            engine.backend.linear_attn_backend.init_cuda_graph_state(
                self.graph_buckets[-1], self.graph_buckets[-1] * draft_tokens)

    def _forward_graph_metadata(self, fb):
        """``Engine.forward`` with the linear backend's graph-replay metadata
        (``init_forward_metadata_out_graph``: the static per-bucket index buffers, ``graph_mode``
        on, so the verify hook takes its graph branch).  No graph is captured: the forward runs
        eagerly on that metadata.  Full attention keeps its eager metadata (the stand-in has no
        graph path)."""
        from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
        from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

        engine = self.engine
        fb.capture_hidden_mode = CaptureHiddenMode.NULL
        fb.req_to_token_pool = engine.req_to_token_pool
        fb.token_to_kv_pool = engine.token_to_kv_pool
        fb.attn_backend = engine.backend
        engine.backend.full_attn_backend.init_forward_metadata(fb)
        engine.backend.linear_attn_backend.init_forward_metadata_out_graph(fb)
        # the GDN backend's verify hook takes its graph branch on this flag (the short-conv sidecar has none)
        assert getattr(engine.backend.linear_attn_backend, "graph_mode", True)
        with forward_context(ForwardContext(attn_backend=engine.backend)):
            return engine.model.forward(fb.input_ids, fb.positions, fb).next_token_logits

    def verify(self, reqs, drafts: dict, track: Optional[dict] = None) -> list:
        """One TARGET_VERIFY step of ``reqs``: each window is the request's last sampled token
        (not yet in the caches) and ``drafts[name]`` (``draft_tokens - 1`` tokens); then SGLang's
        greedy acceptance and commit.  ``track`` = {request name: track slot}: the radix-cache
        tracking SGLang sets for verify (``prepare_mamba_track_for_verify``: the batch's
        ``mamba_track_indices``, no mask).  Returns this step's :class:`VerifyStep` rows."""
        from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode
        from sglang.srt.speculative.eagle_info import EagleVerifyInput
        from sglang.srt.speculative.spec_utils import commit_mamba_states_after_verify

        D = self.draft_tokens
        bs = len(reqs)
        ids, pos, locs, prefix = [], [], [], []
        for req in reqs:
            assert req.done == len(req.tokens) - 1, (req.name, req.done, len(req.tokens))
            window = [req.tokens[req.done]] + list(drafts[req.name])
            assert len(window) == D, (req.name, window)
            for j in range(D):
                p = req.done + j
                self.pool.req_to_token[req.row, p] = self._loc(req, p)
                locs.append(self._loc(req, p))
                pos.append(p)
            ids += window
            prefix.append(req.done)
        input_ids = torch.tensor(ids, dtype=torch.int64)
        positions = torch.tensor(pos, dtype=torch.int64)
        seq_lens = torch.tensor(prefix, dtype=torch.int64)
        rows_ = [r.row for r in reqs]
        padded = bs
        if self.graph_buckets:
            # padded to the next captured batch size as SGLang's graph runner pads: request row 0
            # (its mamba slot the reserved pad slot 0), cache location 0, seq len the backends'
            # fill value 0
            padded = next(n for n in self.graph_buckets if n >= bs)
            pad = padded - bs
            ids, pos, locs = ids + [0] * (pad * D), pos + list(range(D)) * pad, locs + [0] * (pad * D)
            prefix, rows_ = prefix + [0] * pad, rows_ + [0] * pad
        chain = torch.arange(D, dtype=torch.int64)
        spec_info = EagleVerifyInput(
            draft_token=input_ids, custom_mask=None, positions=positions,
            retrieve_index=(torch.arange(bs, dtype=torch.int64).view(bs, 1) * D + chain).contiguous(),
            retrieve_next_token=torch.where(chain + 1 < D, chain + 1, -1).repeat(bs, 1),
            retrieve_next_sibling=torch.full((bs, D), -1, dtype=torch.int64), retrieve_cum_len=None,
            spec_steps=D - 1, topk=1, draft_token_num=D, capture_hidden_mode=CaptureHiddenMode.FULL,
            seq_lens_sum=sum(prefix), seq_lens_cpu=seq_lens.clone())
        req_pool_indices = torch.tensor([r.row for r in reqs], dtype=torch.int64)
        fb_seq_lens = torch.tensor(prefix, dtype=torch.int64)
        fb = ForwardBatch(
            forward_mode=ForwardMode.TARGET_VERIFY, batch_size=padded, input_ids=torch.tensor(ids, dtype=torch.int64),
            req_pool_indices=torch.tensor(rows_, dtype=torch.int64), seq_lens=fb_seq_lens,
            seq_lens_cpu=fb_seq_lens.clone(), out_cache_loc=torch.tensor(locs, dtype=torch.int64),
            seq_lens_sum=sum(prefix), positions=torch.tensor(pos, dtype=torch.int64), spec_info=spec_info)
        fb.global_num_token_non_padded_cpu = bs * D
        track_indices = None
        if track is not None:
            track_indices = torch.tensor([track[r.name] for r in reqs], dtype=torch.int64)
            fb.mamba_track_indices = track_indices
        if self.graph_buckets:
            logits = self._forward_graph_metadata(fb).float()[:bs * D]  # the live rows
        else:
            logits = self.engine.forward(fb).float()
        assert logits.shape[0] == bs * D, logits.shape

        # SGLang's greedy acceptance (eagle_sample's greedy branch)
        target_predict = logits.argmax(-1).reshape(bs, D)
        predict = torch.zeros(bs * D, dtype=torch.int32)
        accept_index = torch.full((bs, spec_info.max_tree_depth), -1, dtype=torch.int32)
        num_correct = torch.empty(bs, dtype=torch.int32)
        _verify_tree_greedy()(predict, accept_index, num_correct, input_ids.reshape(bs, D),
                              spec_info.retrieve_index, spec_info.retrieve_next_token,
                              spec_info.retrieve_next_sibling, target_predict)
        accept_lens = num_correct + 1

        # SGLang's commit of the accepted step (and the track step)
        runner = NS(model_config=self.engine.runner.model_config, req_to_token_pool=self.pool,
                    attn_backend=self.engine.backend, model=self.engine.model)
        batch = NS(forward_mode=ForwardMode.TARGET_VERIFY, req_pool_indices=req_pool_indices, seq_lens=seq_lens,
                   mamba_track_indices=track_indices, tree_cache=NS(page_size=harness.PAGE))
        committed = []
        real_update = self.engine.backend.update_mamba_state_after_mtp_verify

        def update(**kwargs):
            committed.append(kwargs["last_correct_step_indices"].tolist())
            return real_update(**kwargs)

        self.engine.backend.update_mamba_state_after_mtp_verify = update
        try:
            commit_mamba_states_after_verify(NS(model_runner=runner), batch, accept_lens, accept_index, D)
        finally:
            del self.engine.backend.update_mamba_state_after_mtp_verify
        assert len(committed) == 1, "SGLang's commit did not reach update_mamba_state_after_mtp_verify"

        rows = []
        for b, req in enumerate(reqs):
            n = int(accept_lens[b])
            idx = accept_index[b, :n].long()
            assert idx.tolist() == list(range(b * D, b * D + n)), accept_index[b]  # a chain accepts a prefix
            tokens = predict[idx].tolist()
            assert tokens == target_predict[b, :n].tolist()
            assert tokens[:-1] == list(drafts[req.name][:n - 1])
            for j in range(n):
                req.logits.append(logits[b * D + j].clone())
            req.generated += tokens
            req.done += n
            rows.append(VerifyStep(req.name, list(drafts[req.name]), n - 1, committed[0][b]))
        self.steps += rows
        return rows


# --------------------------------------------------------------------------- the plan


TRACK_INTERVAL = 8  # mamba_track_interval (>= draft tokens, a multiple of the page, as SGLang requires)
TRACK_ARGS = dict(mamba_track_interval=TRACK_INTERVAL, _mamba_cache_chunk_size=TRACK_INTERVAL)


@dataclass(frozen=True)
class SpecPlan:
    """The prefills of :class:`harness.StepPlan` (a chunked prefill of A, then A's continuation
    with new requests B and C), then TARGET_VERIFY steps.  Step ``i`` verifies the requests
    ``batches[i]`` in that order (the batch position is the intermediate cache's row).  A
    request's drafts are the next greedy tokens of transformers on its history (a perfect draft
    model), with the draft positions ``wrong[i][name]`` (0-based) made wrong: the chain is
    accepted up to the first wrong one.  With ``track`` every verify step carries track slots
    (``track_slots``) and SGLang's commit stores the state at each crossing of the track grid
    (:data:`TRACK_INTERVAL`); afterwards a new request resumes from each request's last tracked
    state (rows / slots ``resume_rows`` / ``resume_slots``) and runs ``resume_steps`` verify steps."""

    base: harness.StepPlan = harness.StepPlan()
    draft_tokens: int = DRAFT_TOKENS
    batches: tuple = (("A", "B", "C"), ("A", "B", "C"), ("C", "A"), ("A", "B", "C"), ("B", "C", "A"),
                      ("A", "B", "C"))
    wrong: tuple = (
        {"A": (1,), "C": (0,)},            # A accepts 1 draft, B all 3, C none
        {"A": (2,), "B": (0, 2), "C": (1,)},
        {"C": (2,)},                       # C accepts 2, A all
        {"A": (0,), "B": (1,), "C": ()},
        {"B": (0,), "A": (1, 2)},
        {"A": (), "B": (2,), "C": (0,)},
    )
    track: bool = True
    track_slots: tuple = (1, 2, 4)
    resume_rows: tuple = (7, 0, 3)
    resume_slots: tuple = (8, 5, 11)
    resume_wrong: tuple = ({"A'": (1,), "B'": (), "C'": (0,)}, {"A'": (), "B'": (2,), "C'": (1,)})
    # with graph buckets (e.g. (1, 2, 4)) every verify step runs on the linear backend's graph-replay
    # metadata, padded to the next bucket (:meth:`SpecScheduler._forward_graph_metadata`)
    graph_buckets: tuple = ()

    def tokens_needed(self) -> int:
        """Tokens per request (prompt excluded) a greedy run without speculative decoding must
        generate to supply every planned draft: the first token, each step's accepted drafts and
        bonus, and the last step's look-ahead."""
        accepted: dict = {}
        for name, n in self.planned_accepts():
            accepted[name] = accepted.get(name, 0) + n + 1
        return 1 + max(accepted.values()) + self.draft_tokens - 1

    def planned_accepts(self) -> list:
        """(name, drafts accepted) per request and step, as planned (all drafts otherwise right)."""
        full = self.draft_tokens - 1
        return [(n, min(w.get(n, ()), default=full)) for names, w in zip(self.batches, self.wrong) for n in names]


def corrupt(token: int, vocab: int) -> int:
    return (token + 1) % vocab


class DraftOracle:
    """A perfect draft model: the next greedy tokens after a history.  From ``known`` ({request
    name: prompt + greedy tokens of the run without speculative decoding}) when the history is a
    prefix of one of them with enough tokens after it; else, with ``fallback``, transformers'
    greedy tokens (full recompute, its torch paths; memoised per history; ``fallbacks`` counts
    them), without it the tokens at the same positions of the request's (or, for a resumed
    request ``X'``, its owner ``X``'s) known sequence (negative controls, whose histories leave
    the greedy path: any drafts do there)."""

    def __init__(self, hf_model, known: dict, fallback: bool = True):
        self.hf, self.known, self.fallback = hf_model, {k: list(v) for k, v in known.items()}, fallback
        self.memo, self.fallbacks = {}, 0

    @torch.no_grad()
    def _next(self, ids: list) -> int:
        key = tuple(ids)
        if key not in self.memo:
            self.fallbacks += 1
            with harness.transformers_torch_paths(self.hf):
                self.memo[key] = int(self.hf(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1].argmax())
        return self.memo[key]

    def greedy(self, name: str, tokens: list, n: int) -> list:
        for seq in self.known.values():
            if len(seq) >= len(tokens) + n and seq[:len(tokens)] == tokens:
                return seq[len(tokens):len(tokens) + n]
        if not self.fallback:
            seq = self.known[name.rstrip("'")]
            return (seq[len(tokens):len(tokens) + n] + [0] * n)[:n]
        out, ids = [], list(tokens)
        for _ in range(n):
            out.append(self._next(ids))
            ids.append(out[-1])
        return out

    def drafts(self, req: harness.Request, wrong, draft_tokens: int, vocab: int) -> list:
        good = self.greedy(req.name, req.tokens, draft_tokens - 1)
        return [corrupt(t, vocab) if j in wrong else t for j, t in enumerate(good)]


@dataclass
class Snapshot:
    owner: str
    boundary: int  # tokens the tracked state covers
    slot: int


@dataclass
class SpecResult:
    reqs: list  # A, B, C
    resumed: list  # requests resumed from tracked states (A', B', C')
    steps: list  # VerifyStep rows, in order
    snapshots: dict  # owner name -> its last Snapshot
    layout: str  # how SGLang hands out the pool's temporal state (:func:`temporal_layout`)
    commit_calls: dict
    pool_shapes: dict  # temporal, intermediate_ssm, conv (first conv state) shapes of the pool


def _track_crossings(sched: SpecScheduler, batch, before: dict, slots: dict, snaps: dict) -> None:
    """The crossings SGLang's commit just tracked (``_verify_commit_step_indices``: pre / post
    lengths in different grid cells): the tracked state covers the post length's grid floor."""
    for req in batch:
        pre, post = before[req.name], req.done
        if pre // TRACK_INTERVAL != post // TRACK_INTERVAL:
            snaps[req.name] = Snapshot(req.name, post // TRACK_INTERVAL * TRACK_INTERVAL, slots[req.name])


def resume(sched: SpecScheduler, owner: harness.Request, snap: Snapshot, name: str, row: int,
           slot: int) -> harness.Request:
    """A new request with ``owner``'s first ``snap.boundary + 1`` tokens, its caches restored the way
    a radix-cache hit does (SGLang's ``HybridReqToTokenPool.copy_mamba_state`` of the tracked slot into
    the new slot, the owner's KV rows shared); its next step verifies from token ``boundary``."""
    req = sched.admit(harness.Request(name, owner.tokens[:snap.boundary + 1], row, slot))
    sched.pool.copy_mamba_state(torch.tensor([snap.slot]), torch.tensor([slot]))
    sched.pool.req_to_token[row, :snap.boundary] = sched.pool.req_to_token[owner.row, :snap.boundary]
    req.done = snap.boundary
    return req


def temporal_layout(temporal: torch.Tensor) -> str:
    """How SGLang hands out the pool's temporal state, read from its strides here (not through the
    plugin's pool_layout, which a negative control replaces): ``"value_first"`` (contiguous) or
    ``"transposed_view"`` (a ``transpose(-1, -2)`` view of a contiguous allocation)."""
    if temporal.is_contiguous():
        return "value_first"
    assert temporal.transpose(-1, -2).is_contiguous(), (tuple(temporal.shape), temporal.stride())
    return "transposed_view"


def run_spec_plan(engine: harness.Engine, plan: SpecPlan, oracle: DraftOracle, vocab: int) -> SpecResult:
    """Prefills, then the verify steps of ``plan`` (drafts from ``oracle``), then the resumed
    requests' verify steps."""
    base = plan.base
    cache = engine.req_to_token_pool.mamba_pool.mamba_cache
    layout = temporal_layout(cache.temporal)
    shapes = dict(temporal=tuple(cache.temporal.shape), intermediate_ssm=tuple(cache.intermediate_ssm.shape),
                  conv=tuple(cache.conv[0].shape))
    sched = SpecScheduler(engine, plan.draft_tokens, plan.graph_buckets)
    reqs = {n: sched.admit(harness.Request(n, list(p), r, s))
            for n, p, r, s in zip("ABC", base.prompts, base.rows, base.slots)}
    a, b, c = reqs["A"], reqs["B"], reqs["C"]
    sched.extend([(a, base.first_chunk)])
    sched.extend([(a, len(a.prompt) - base.first_chunk), (b, len(b.prompt)), (c, len(c.prompt))])
    slots = dict(zip("ABC", plan.track_slots))
    snaps: dict = {}
    with spec_npu_ops(fp32_conv=engine.dtype == torch.float32) as calls:
        for names, wrong in zip(plan.batches, plan.wrong):
            batch = [reqs[n] for n in names]
            drafts = {r.name: oracle.drafts(r, wrong.get(r.name, ()), plan.draft_tokens, vocab)
                      for r in batch}
            before = {r.name: r.done for r in batch}
            sched.verify(batch, drafts, track={n: slots[n] for n in names} if plan.track else None)
            if plan.track:
                _track_crossings(sched, batch, before, slots, snaps)
        resumed = []
        if plan.track:
            for n, row, slot in zip("ABC", plan.resume_rows, plan.resume_slots):
                resumed.append(resume(sched, reqs[n], snaps[n], n + "'", row, slot))
            for wrong in plan.resume_wrong:
                drafts = {r.name: oracle.drafts(r, wrong.get(r.name, ()), plan.draft_tokens, vocab)
                          for r in resumed}
                sched.verify(resumed, drafts)
    return SpecResult([a, b, c], resumed, sched.steps, snaps, layout, dict(calls), shapes)


def assert_matches_plain(run, res: SpecResult, base, plan: SpecPlan, fp32: bool) -> list:
    """The checks every speculative whole-model run makes against the same model without speculative
    decoding (``base``) and transformers: fp32, every token equal and the planned acceptance; bf16,
    both runs decisive-equal (a caller adds its own near-tie rule).  Returns A, B, C of the run."""
    cmp = run.compare()
    a_b_c = run.reqs[:3]
    if fp32:
        assert base.compare().fp32_ok(), str(base.compare())
        assert cmp.fp32_ok(), str(cmp)
        for got, want in zip(a_b_c, base.reqs):
            assert got.generated == want.generated[:len(got.generated)], (got.name, got.generated, want.generated)
        assert [(s.name, s.accepted) for s in res.steps[:len(plan.planned_accepts())]] == plan.planned_accepts()
    else:
        assert base.compare().bf16_ok(), str(base.compare())
        assert cmp.bf16_ok(), str(cmp)
    return a_b_c


def run_spec(name: str, *, dtype: torch.dtype = torch.float32, ssm_dtype: Optional[torch.dtype] = None,
             device: Optional[Callable] = None, breakage: Optional[Callable] = None, plan: SpecPlan = SpecPlan(),
             known: Optional[dict] = None, fallback: bool = True):
    """:func:`tests.e2e.runner.run_family` of ``plan`` with speculative decoding on (server arguments,
    pool), drafts from a :class:`DraftOracle` over ``known`` (``fallback``: its transformers
    fallback); returns (the run, whose requests are A, B, C and the resumed ones, and the
    :class:`SpecResult`)."""
    from tests.e2e.runner import built, built_bf16, run_family

    models = built(name) if dtype == torch.float32 else built_bf16(name)
    held = {}

    def runner(engine, _plan):
        held["result"] = run_spec_plan(engine, plan, DraftOracle(models.hf, known or {}, fallback),
                                       getattr(models.hf.config, "text_config", models.hf.config).vocab_size)
        return held["result"].reqs + held["result"].resumed

    args = server_args(plan.draft_tokens)
    if plan.track:
        args.update(TRACK_ARGS)
    run = run_family(name, dtype=dtype, device=fast_split(device), breakage=breakage, ssm_dtype=ssm_dtype,
                     plan_runner=runner,
                     server_args=args, engine_args=engine_args(plan.draft_tokens))
    return run, held["result"]
