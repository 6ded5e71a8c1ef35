"""Whole-model harness: a tiny model of a family, driven the way SGLang drives it on NPU,
against HuggingFace transformers with the same weights.

What is real SGLang 0.5.23 here: the model class (``Lfm2ForCausalLM`` ...) and its
``load_weights``, the config classes, ``HybridReqToTokenPool`` allocated with the NPU
layout (``memory_pool._is_npu`` on, so conv states are window-major), the KV pool
(``MHATokenToKVPool``), the full-attention backend (``TorchNativeAttnBackend``),
``attn_backend_wrapper`` (with the plugin's hook installed by SGLang's own
``load_plugins``), the Ascend backend classes (``AscendGDNAttnBackend`` ...; their NPU
packages are the test stubs of ``tests/npu_stubs``), ``ForwardBatch`` and the
``LogitsProcessor``.  What stands in for a server: a small scheduler
(:class:`Scheduler`) that owns request rows, mamba slots and KV locations, builds the
batches of a step plan and feeds greedy tokens back.

The reference is transformers' model class of the family with the same weights,
recomputed over each request's full token history (no cache at all).
"""

from __future__ import annotations

import contextlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace as NS
from typing import Optional

import torch

EXAMPLE_CONFIGS = Path(__file__).resolve().parents[2] / "examples" / "configs"
NPU_STUBS = Path(__file__).resolve().parents[1] / "npu_stubs"

PAGE = 1  # KV page size of the harness pools (token granularity)
MAX_CONTEXT = 64


def example_config(name: str) -> dict:
    return json.loads((EXAMPLE_CONFIGS / name / "config.json").read_text())


# --------------------------------------------------------------------------- SGLang process context


def _single_rank_group():
    return NS(world_size=1, rank_in_group=0, rank=0, is_first_rank=True, is_last_rank=True,
              first_rank=0, last_rank=0, ranks=[0], local_rank=0)


def _parallel_names():
    """The parallel names this SGLang release lets a process state (older releases know fewer)."""
    from sglang.srt import runtime_context

    if hasattr(runtime_context, "_parallel_fields"):  # 0.5.21+
        return runtime_context._parallel_fields()
    return getattr(runtime_context, "_PARALLEL_FIELDS", None)  # 0.5.20


_LEGACY_GROUPS = ("_WORLD", "_TP", "_ATTN_TP", "_ATTN_CP", "_DCP", "_MOE_DP", "_MOE_EP", "_MOE_TP", "_PP")


@contextlib.contextmanager
def _legacy_groups(grp):
    """SGLang 0.5.20 still reads some groups from ``distributed.parallel_state`` globals
    (``get_pp_group()``); state the single-rank group there too while they are unset."""
    from sglang.srt.distributed import parallel_state as ps

    saved = {name: getattr(ps, name) for name in _LEGACY_GROUPS if getattr(ps, name, grp) is None}
    for name in saved:
        setattr(ps, name, grp)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(ps, name, value)


# A tensor-parallel worker's ranks and real process groups (tests/e2e/tp.py sets it in its
# forked rank processes); stated over the single-rank topology by sglang_process.
TOPOLOGY: dict = {}


@contextlib.contextmanager
def sglang_process(**server_args):
    """What SGLang publishes in a scheduler process before it builds a model: a single
    rank topology (or :data:`TOPOLOGY` over it, in a tensor-parallel rank process) and the
    server arguments (SGLang's own test hook ``override_server_args``)."""
    from sglang.srt.model_executor.cuda_graph_config import Backend, CudaGraphConfig, PhaseConfig
    from sglang.srt.runtime_context import get_context, get_parallel

    grp = _single_rank_group()
    fields = dict(
        attention_backend="ascend", chunked_prefill_size=-1, disable_radix_cache=True,
        cuda_graph_config=CudaGraphConfig(decode=PhaseConfig(backend=Backend.DISABLED),
                                          prefill=PhaseConfig(backend=Backend.DISABLED)),
        enable_deterministic_inference=False, enable_mis=False, enable_symm_mem=False,
        kv_cache_dtype="auto", linear_attn_backend="triton", linear_attn_decode_backend=None,
        linear_attn_prefill_backend=None, max_running_requests=None, speculative_algorithm=None,
        speculative_eagle_topk=0, speculative_num_draft_tokens=0, speculative_num_steps=0,
        _mamba_cache_chunk_size=64)
    fields.update(server_args)
    override = get_context().override_server_args(**fields)
    override.install()
    ranks = dict(tp_size=1, tp_rank=0, attn_tp_size=1, attn_tp_rank=0, pp_size=1, pp_rank=0, moe_ep_rank=0,
                 moe_tp_rank=0, moe_dp_rank=0, attn_cp_rank=0, attn_dp_rank=0, dp_rank=0, tp_group=grp,
                 pp_group=grp, attn_tp_group=grp, moe_ep_group=grp, moe_tp_group=grp, moe_dp_group=grp,
                 attn_cp_group=grp, world_group=grp)
    ranks.update(TOPOLOGY)
    known = _parallel_names()
    try:
        with get_parallel().override(**{k: v for k, v in ranks.items() if known is None or k in known}), \
                _legacy_groups(grp):
            yield
    finally:
        override.restore()


@contextlib.contextmanager
def npu_detected():
    """NPU detection on where upstream reads it for the pools and the backend choice
    (``sglang.srt.utils.is_npu`` and the module flags read at call time).  The model
    layers keep their CPU forwards: they were built off-NPU."""
    import sglang.srt.layers.attention.attention_registry as registry
    import sglang.srt.mem_cache.memory_pool as mp
    import sglang.srt.utils as sglang_utils

    saved = (sglang_utils.is_npu, registry._is_npu, mp._is_npu)
    sglang_utils.is_npu, registry._is_npu, mp._is_npu = (lambda: True), True, True
    try:
        yield
    finally:
        sglang_utils.is_npu, registry._is_npu, mp._is_npu = saved


def import_upstream_backends() -> None:
    """Import SGLang's Ascend backend modules with CPU platform detection (their NPU
    packages are the test stubs, which must be on ``sys.path``): on a CPU, modules that
    pick kernels by ``is_npu()`` at import time must take their CPU branch."""
    import importlib

    for name in ("sglang.srt.layers.attention.hybrid_linear_attn_backend",
                 "sglang.srt.hardware_backend.npu.attention.ascend_hybrid_linear_attn_backend",
                 "sglang.srt.hardware_backend.npu.attention.ascend_gdn_backend"):
        importlib.import_module(name)


@contextlib.contextmanager
def cpu_model_construction():
    """Rotary embedding picks a vLLM fallback kernel on an unknown platform at
    construction; SGLang's CPU path (``_is_cpu``) keeps the native forward."""
    import sglang.srt.layers.rotary_embedding.base as rope_base
    from sglang.srt.layers.rotary_embedding import factory as rope_factory

    # get_rope shares one module per parameter set process-wide (_ROPE_DICT); a model built
    # here must own its rotary modules, or casting one model to bf16 casts the other's too
    saved_ropes = dict(rope_factory._ROPE_DICT)
    rope_factory._ROPE_DICT.clear()
    saved = rope_base._is_cpu, torch.get_device_module
    rope_base._is_cpu = True
    # GDN layers allocate their gated norm on torch.get_device_module().current_device()
    torch.get_device_module = lambda device=None: torch.cpu
    try:
        yield
    finally:
        rope_base._is_cpu, torch.get_device_module = saved
        rope_factory._ROPE_DICT.clear()
        rope_factory._ROPE_DICT.update(saved_ropes)


# --------------------------------------------------------------------------- engine: pools, backend, forward


def _attn_tp_size() -> int:
    """The attention-TP width the process states (1 in the single-rank harness)."""
    from sglang.srt.runtime_context import get_parallel

    try:
        return int(get_parallel().attn_tp_size)
    except Exception:  # not stated on this release
        return 1


class Engine:
    """The pools and the attention backend of one model, as a model runner builds them
    on NPU, and the forward of one batch (``ModelRunner._forward_raw``'s essentials:
    ``init_forward_metadata``, a published ``ForwardContext``, ``model.forward``)."""

    def __init__(self, model, cfg, *, dtype: torch.dtype, mamba_slots: int = 12, rows: int = 8,
                 conv_dtype: Optional[torch.dtype] = None, ssm_dtype: Optional[torch.dtype] = None,
                 max_context: int = MAX_CONTEXT, extra_buffer: bool = False, overlap_schedule: bool = False,
                 speculative_num_draft_tokens: Optional[int] = None, speculative_eagle_topk: Optional[int] = None):
        import dataclasses

        import sglang.srt.mem_cache.memory_pool as mp
        from sglang.srt.configs.hybrid_arch import mambaish_config
        from sglang.srt.configs.mamba_utils import Mamba2StateDType
        from sglang.srt.layers.attention import attention_registry
        from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend

        self.model, self.cfg, self.dtype, self.max_context = model, cfg, dtype, max_context
        text_cfg = getattr(cfg, "text_config", cfg)
        params = mambaish_config(NS(hf_config=cfg, hf_text_config=text_cfg)).mamba2_cache_params
        # conv states in the model dtype (SGLang: SGLANG_MAMBA_CONV_DTYPE, bf16 by default, which
        # would round an fp32 run's conv history); SSM states as the config says unless given
        params = dataclasses.replace(params, dtype=Mamba2StateDType(
            conv=conv_dtype or dtype, temporal=ssm_dtype or params.dtype.temporal))
        head_dim = getattr(text_cfg, "head_dim", None) or text_cfg.hidden_size // text_cfg.num_attention_heads
        kv_size = rows * max_context + PAGE
        # the KV pool is a plain CPU one (full attention runs on TorchNativeAttnBackend); this
        # rank's KV heads, as SGLang's ModelConfig.get_num_kv_heads(attn_tp_size) counts them
        kv_heads = max(1, text_cfg.num_key_value_heads // _attn_tp_size())
        self.token_to_kv_pool = mp.MHATokenToKVPool(
            size=kv_size, page_size=PAGE, dtype=dtype, head_num=kv_heads,
            head_dim=head_dim, layer_num=text_cfg.num_hidden_layers, device="cpu",
            enable_memory_saver=False, enable_alt_stream=False)
        with npu_detected():  # _init_npu_conv_state: window-major conv states
            self.req_to_token_pool = mp.HybridReqToTokenPool(
                size=rows, mamba_size=mamba_slots, mamba_spec_state_size=rows, max_context_len=max_context,
                device="cpu", enable_memory_saver=False, cache_params=params, mamba_layer_ids=params.layers,
                enable_mamba_extra_buffer=extra_buffer, enable_overlap_schedule=overlap_schedule,
                # speculative decoding on (tests/e2e/spec.py): the pool SGLang builds then, with the
                # per-draft-token intermediate SSM cache and conv windows longer by draft - 1
                speculative_num_draft_tokens=speculative_num_draft_tokens,
                speculative_eagle_topk=speculative_eagle_topk)
        self.cache_params = params
        runner = NS(
            device="cpu", dtype=dtype, is_draft_worker=False, use_mla_backend=False, page_size=PAGE,
            req_to_token_pool=self.req_to_token_pool, token_to_kv_pool=self.token_to_kv_pool,
            # the speculative settings the pool was built with (SGLang's ServerArgs carries both)
            server_args=NS(enable_mis=False,
                           speculative_algorithm="EAGLE" if speculative_num_draft_tokens else None,
                           speculative_eagle_topk=speculative_eagle_topk,
                           speculative_num_draft_tokens=speculative_num_draft_tokens),
            prefill_attention_backend_str="ascend", decode_attention_backend_str="ascend",
            model_config=NS(hf_config=cfg, hf_text_config=text_cfg, is_draft_model=False, quantization=None,
                            linear_attn_registry_result=None, context_len=max_context))
        self.runner = runner
        import_upstream_backends()
        full = TorchNativeAttnBackend(runner)
        with npu_detected():
            self.backend = attention_registry.attn_backend_wrapper(runner, full)

    def forward(self, fb):
        from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
        from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

        fb.capture_hidden_mode = CaptureHiddenMode.NULL
        fb.req_to_token_pool = self.req_to_token_pool
        fb.token_to_kv_pool = self.token_to_kv_pool
        fb.attn_backend = self.backend
        self.backend.init_forward_metadata(fb)
        with forward_context(ForwardContext(attn_backend=self.backend)):
            out = self.model.forward(fb.input_ids, fb.positions, fb)
        return out.next_token_logits


# --------------------------------------------------------------------------- scheduler and step plan


@dataclass
class Request:
    name: str
    prompt: list
    row: int  # req_to_token_pool row
    slot: int  # mamba pool slot
    done: int = 0  # tokens already in the caches
    generated: list = field(default_factory=list)
    logits: list = field(default_factory=list)  # one [vocab] row per generated token
    # SGLang's ``MultimodalInputs`` of the request (its placeholder tokens in ``prompt`` already
    # padded by the model's ``pad_input_ids``); the scheduler puts it into every EXTEND batch
    mm_inputs: object = None

    @property
    def tokens(self) -> list:
        return self.prompt + self.generated


class Scheduler:
    """Owns rows, mamba slots and KV locations; builds SGLang ``ForwardBatch`` objects."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self.pool = engine.req_to_token_pool

    def admit(self, req: Request) -> Request:
        self.pool.req_index_to_mamba_index_mapping[req.row] = req.slot
        return req

    def _loc(self, req: Request, pos: int) -> int:
        return PAGE + req.row * self.engine.max_context + pos

    def extend(self, parts, track=None):
        """One EXTEND batch: ``parts`` = [(request, number of new tokens)]; a request
        with ``done > 0`` is a chunked-prefill continuation (prefix in the caches).
        ``track`` = {request name: (mamba_track_seqlen, track slot)}: the radix-cache
        tracking fields the scheduler sets (``mamba_track_mask`` / ``_indices`` /
        ``_seqlens`` and their host mirrors) for those requests."""
        from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

        ids, pos, locs, prefix, new, seq = [], [], [], [], [], []
        for req, n in parts:
            toks = req.tokens[req.done:req.done + n]
            assert len(toks) == n, (req.name, req.done, n)
            for p in range(req.done, req.done + n):
                self.pool.req_to_token[req.row, p] = self._loc(req, p)
                locs.append(self._loc(req, p))
                pos.append(p)
            ids += toks
            prefix.append(req.done)
            new.append(n)
            seq.append(req.done + n)
        starts = [sum(new[:i]) for i in range(len(new))]
        fb = ForwardBatch(
            forward_mode=ForwardMode.EXTEND, batch_size=len(parts),
            input_ids=torch.tensor(ids, dtype=torch.int64),
            req_pool_indices=torch.tensor([r.row for r, _ in parts], dtype=torch.int64),
            seq_lens=torch.tensor(seq, dtype=torch.int64), seq_lens_cpu=torch.tensor(seq, dtype=torch.int64),
            out_cache_loc=torch.tensor(locs, dtype=torch.int64), seq_lens_sum=sum(seq),
            positions=torch.tensor(pos, dtype=torch.int64),
            extend_num_tokens=sum(new), extend_seq_lens=torch.tensor(new, dtype=torch.int32),
            extend_prefix_lens=torch.tensor(prefix, dtype=torch.int32),
            extend_start_loc=torch.tensor(starts, dtype=torch.int32),
            extend_prefix_lens_cpu=list(prefix), extend_seq_lens_cpu=list(new))
        if any(r.mm_inputs is not None for r, _ in parts):
            fb.mm_inputs = [r.mm_inputs for r, _ in parts]
        if track is not None:
            rows = [track.get(r.name) for r, _ in parts]
            mask = [t is not None for t in rows]
            seqlens = [t[0] if t is not None else -1 for t in rows]
            fb.mamba_track_mask = torch.tensor(mask, dtype=torch.bool)
            fb.mamba_track_indices = torch.tensor([t[1] if t is not None else 0 for t in rows], dtype=torch.int64)
            fb.mamba_track_seqlens = torch.tensor(seqlens, dtype=torch.int64)
            fb.mamba_prefill_track_mask_cpu, fb.mamba_track_seqlens_cpu = mask, seqlens
        return self._run(fb, [r for r, _ in parts], new)

    def decode(self, reqs, track=None):
        """One DECODE step; ``track`` = (interval, {request name: track slot}): the
        scheduler's decode tracking (``mamba_track_mask`` where the new length is a
        multiple of the interval, ``mamba_track_indices``)."""
        from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

        ids, pos, locs, seq = [], [], [], []
        for req in reqs:
            assert req.done == len(req.tokens) - 1, (req.name, req.done, len(req.tokens))
            p = req.done
            self.pool.req_to_token[req.row, p] = self._loc(req, p)
            ids.append(req.tokens[p])
            pos.append(p)
            locs.append(self._loc(req, p))
            seq.append(p + 1)
        fb = ForwardBatch(
            forward_mode=ForwardMode.DECODE, batch_size=len(reqs), input_ids=torch.tensor(ids, dtype=torch.int64),
            req_pool_indices=torch.tensor([r.row for r in reqs], dtype=torch.int64),
            seq_lens=torch.tensor(seq, dtype=torch.int64), seq_lens_cpu=torch.tensor(seq, dtype=torch.int64),
            out_cache_loc=torch.tensor(locs, dtype=torch.int64), seq_lens_sum=sum(seq),
            positions=torch.tensor(pos, dtype=torch.int64))
        if track is not None:
            interval, slots = track
            fb.mamba_track_mask = torch.tensor([n % interval == 0 and r.name in slots for r, n in zip(reqs, seq)],
                                               dtype=torch.bool)
            fb.mamba_track_indices = torch.tensor([slots.get(r.name, 0) for r in reqs], dtype=torch.int64)
        return self._run(fb, reqs, [1] * len(reqs))

    def _run(self, fb, reqs, new):
        logits = self.engine.forward(fb).float()
        assert logits.shape[0] == len(reqs), logits.shape
        for req, n, row in zip(reqs, new, logits):
            req.done += n
            if req.done == len(req.tokens):  # last chunk of what we know: sample (greedy)
                req.logits.append(row.clone())
                req.generated.append(int(row.argmax()))


@dataclass(frozen=True)
class StepPlan:
    """A chunked prefill of request A, then one EXTEND batch mixing A's continuation with
    new requests B and C, then ``decodes`` DECODE steps of all three."""

    prompts: tuple = ((5, 17, 3, 99, 42, 8, 61, 23, 77, 14, 2, 90, 33), (11, 7, 64, 120, 9, 31), (100, 4, 56))
    first_chunk: int = 8
    decodes: int = 8
    rows: tuple = (5, 2, 6)
    slots: tuple = (7, 3, 10)  # scattered mamba slots (slot 0 is the pool's reserved pad slot)


def run_plan(engine: Engine, plan: StepPlan = StepPlan()) -> list:
    sched = Scheduler(engine)
    a, b, c = (sched.admit(Request(n, list(p), r, s))
               for n, p, r, s in zip("ABC", plan.prompts, plan.rows, plan.slots))
    sched.extend([(a, plan.first_chunk)])
    assert not a.generated  # a chunk that is not the last samples nothing
    sched.extend([(a, len(a.prompt) - plan.first_chunk), (b, len(b.prompt)), (c, len(c.prompt))])
    for _ in range(plan.decodes):
        sched.decode([a, b, c])
    return [a, b, c]


# --------------------------------------------------------------------------- reference and comparison


_HUB_KERNEL_NAMES = ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule", "causal_conv1d_fn",
                     "causal_conv1d_update")


@contextlib.contextmanager
def transformers_torch_paths(hf_model):
    """transformers swaps its GDN / conv functions for FLA's Triton kernels when
    ``fla`` is importable (``use_kernel_func_from_hub_with_fallback``); those need a GPU
    driver.  The reference uses transformers' own torch implementations (the
    decorated functions' ``__wrapped__``)."""
    module = sys.modules[type(hf_model).__module__]
    saved = {}
    for name in _HUB_KERNEL_NAMES:
        fn = getattr(module, name, None)
        if fn is not None and getattr(fn, "__wrapped__", None) is not None:
            saved[name] = fn
            setattr(module, name, fn.__wrapped__)
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(module, name, fn)


@torch.no_grad()
def reference_logits(hf_model, req: Request) -> torch.Tensor:
    """transformers' logits, full recompute over the request's history: the row that
    predicted each generated token ([generated, vocab], fp32)."""
    ids = torch.tensor([req.tokens[:-1]])
    with transformers_torch_paths(hf_model):
        out = hf_model(input_ids=ids, use_cache=False).logits[0].float()
    first = len(req.prompt) - 1
    return out[first:first + len(req.generated)]


FP32_LOGIT_TOL = 1e-3
BF16_LOGIT_TOL = 0.5
BF16_MARGIN = 0.5


@dataclass
class Comparison:
    """SGLang's greedy run against transformers recomputing each request's full history
    (teacher forcing on SGLang's own tokens)."""

    tokens_equal: bool  # every SGLang token is transformers' argmax on the same history
    max_gap: float  # largest |logit difference|
    decisive_equal: bool  # argmax equal wherever transformers' top-1 / top-2 margin > BF16_MARGIN
    seconds: float
    detail: str

    def fp32_ok(self) -> bool:
        return self.tokens_equal and self.max_gap <= FP32_LOGIT_TOL

    def bf16_ok(self) -> bool:
        return self.decisive_equal and self.max_gap <= BF16_LOGIT_TOL

    def __str__(self):
        return (f"tokens_equal={self.tokens_equal} decisive_equal={self.decisive_equal} "
                f"max_logit_gap={self.max_gap:.3g} ({self.seconds:.1f}s) {self.detail}")


def compare(reqs, hf_model, seconds: float = 0.0, reference=reference_logits) -> Comparison:
    """``reference(hf_model, req)``: transformers' logits rows of the request's generated
    tokens (default :func:`reference_logits`; a multimodal request passes its own)."""
    equal, decisive, gap, lines = True, True, 0.0, []
    for req in reqs:
        ref = reference(hf_model, req)
        got = torch.stack(req.logits)
        top2 = ref.topk(2, dim=-1).values
        margin = top2[:, 0] - top2[:, 1]
        ref_tokens = ref.argmax(-1)
        same = ref_tokens == torch.tensor(req.generated)
        g = float((got - ref).abs().max())
        equal &= bool(same.all())
        decisive &= bool(same[margin > BF16_MARGIN].all())
        gap = max(gap, g)
        lines.append(f"{req.name}: sglang {req.generated} hf {ref_tokens.tolist()} gap {g:.3g}")
    return Comparison(equal, gap, decisive, seconds, "; ".join(lines))


# --------------------------------------------------------------------------- weights


def randomize_(model: torch.nn.Module, seed: int) -> None:
    """Seeded random weights with unit-scale activations: norms near 1, matrices
    ~ N(0, 1/fan_in), so the logits have clear top-1 margins (greedy is well defined)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if p.dim() == 1:
                if "norm" in name or "scale" in name.rsplit(".", 1)[-1] or name.endswith(".temp"):
                    base = 0.0 if _zero_centered_norm(model, name) else 1.0
                    p.copy_(base + 0.1 * torch.randn(p.shape, generator=gen))
                else:
                    p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            elif "embed" in name:  # small next to the layers' outputs: a tied head must not just echo
                p.copy_(0.25 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / p[0].numel() ** 0.5)


def _zero_centered_norm(model, name) -> bool:
    """Qwen3-Next / Qwen3.5 RMSNorms scale by (1 + weight) (transformers' zero-centred
    ``Qwen3NextRMSNorm``); their gated norm inside GDN does not."""
    mod = model.get_submodule(name.rsplit(".", 1)[0])
    return type(mod).__name__ in ("Qwen3NextRMSNorm", "Qwen3_5RMSNorm", "Qwen3_5MoeRMSNorm")


def load_into_sglang(sg_model, hf_model, rename=None, convert=None) -> None:
    """The checkpoint transformers would save (``save_pretrained``'s reverse weight
    conversion: per-expert tensors, original names) through SGLang's ``load_weights``;
    every SGLang parameter must have been written."""
    from transformers.core_model_loading import revert_weight_conversion

    state = revert_weight_conversion(hf_model, {k: v.detach().clone() for k, v in hf_model.state_dict().items()})
    if rename is not None:
        state = {rename(k): v for k, v in state.items()}
    if convert is not None:
        state = convert(state)
    with torch.no_grad():
        for p in sg_model.parameters():
            p.fill_(float("nan"))  # a parameter load_weights misses shows up as NaN logits
    sg_model.load_weights(iter(state.items()))
    missing = [n for n, p in sg_model.named_parameters() if torch.isnan(p).any()]
    assert not missing, f"load_weights left parameters unwritten: {missing}"
