"""The Ascend short-conv sidecar and the attn_backend_wrapper AROUND hook, with real
SGLang 0.5.23 config classes, a real HybridReqToTokenPool laid out the NPU way
(``memory_pool._is_npu`` on, so ``_init_npu_conv_state`` allocates it), real
ForwardBatch objects and NPU detection patched on where upstream reads it."""

from __future__ import annotations

import dataclasses
import re
from types import SimpleNamespace as NS

import pytest
import torch

from sglang_ascend_hybrid.integration import short_conv

# --------------------------------------------------------------------------- helpers (shared)


def lfm2_config(cls_name="Lfm2Config", hidden=32, width=3):
    layer_types = ["conv", "full_attention", "conv", "conv"]
    common = dict(hidden_size=hidden, num_hidden_layers=4, layer_types=layer_types, vocab_size=64,
                  num_attention_heads=4, num_key_value_heads=2)
    if cls_name == "Lfm2Config":
        from sglang.srt.configs.lfm2 import Lfm2Config
        return Lfm2Config(conv_L_cache=width, conv_bias=True, intermediate_size=64, **common)
    if cls_name == "Lfm2MoeConfig":
        from sglang.srt.configs.lfm2_moe import Lfm2MoeConfig
        return Lfm2MoeConfig(conv_L_cache=width, **common)
    from sglang.srt.configs.lfm2_vl import Lfm2VlConfig
    return Lfm2VlConfig(text_config=dict(model_type="lfm2", conv_L_cache=width, **common))


def zaya_config():
    from sglang.srt.configs.zaya import ZayaConfig
    return ZayaConfig(hidden_size=32, num_hidden_layers=4, num_attention_heads=4, num_query_groups=2,
                      head_dim=8, vocab_size=64)


def make_runner(cfg, *, conv_dtype=torch.float32, mamba_size=10, speculative_algorithm=None,
                draft_tokens=None):
    """A minimal model runner with exactly the attributes the backends read, around a
    real HybridReqToTokenPool (NPU layout)."""
    import sglang.srt.mem_cache.memory_pool as mp
    from sglang.srt.configs.mamba_utils import Mamba2StateDType

    params = dataclasses.replace(cfg.mamba2_cache_params,
                                 dtype=Mamba2StateDType(conv=conv_dtype, temporal=torch.float32))
    pool = mp.HybridReqToTokenPool(
        size=8, mamba_size=mamba_size, mamba_spec_state_size=8, max_context_len=64, device="cpu",
        enable_memory_saver=False, cache_params=params, mamba_layer_ids=params.layers,
        enable_mamba_extra_buffer=False, enable_overlap_schedule=False,
        speculative_num_draft_tokens=draft_tokens, speculative_eagle_topk=1 if draft_tokens else None)
    full = NS(token_to_kv_pool=None, req_to_token_pool=pool, kv_index_translator=None,
              needs_cpu_seq_lens=False, use_captured_forward_metadata_for_breakable_cuda_graph=False,
              init_forward_metadata=lambda fb: None, init_cuda_graph_state=lambda bs, n: None,
              init_forward_metadata_out_graph=lambda fb, in_capture=False: None)
    runner = NS(server_args=NS(enable_mis=False, speculative_algorithm=speculative_algorithm),
                device="cpu", is_draft_worker=False, req_to_token_pool=pool, token_to_kv_pool=None,
                model_config=NS(hf_config=cfg, hf_text_config=getattr(cfg, "text_config", cfg),
                                is_draft_model=False))
    return runner, full, pool


def extend_batch(req_rows, new_lens, prefix_lens):
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

    starts = [sum(new_lens[:i]) for i in range(len(new_lens))]
    seq = [p + n for p, n in zip(prefix_lens, new_lens)]
    return ForwardBatch(
        forward_mode=ForwardMode.EXTEND, batch_size=len(req_rows),
        input_ids=torch.zeros(sum(new_lens), dtype=torch.long),
        req_pool_indices=torch.tensor(req_rows), seq_lens=torch.tensor(seq), out_cache_loc=None,
        seq_lens_sum=sum(seq), extend_seq_lens=torch.tensor(new_lens),
        extend_prefix_lens=torch.tensor(prefix_lens), extend_start_loc=torch.tensor(starts),
        extend_seq_lens_cpu=list(new_lens), extend_prefix_lens_cpu=list(prefix_lens),
        seq_lens_cpu=torch.tensor(seq))


def decode_batch(req_rows, seq_lens):
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

    return ForwardBatch(
        forward_mode=ForwardMode.DECODE, batch_size=len(req_rows),
        input_ids=torch.zeros(len(req_rows), dtype=torch.long), req_pool_indices=torch.tensor(req_rows),
        seq_lens=torch.tensor(seq_lens), out_cache_loc=None, seq_lens_sum=sum(seq_lens),
        seq_lens_cpu=torch.tensor(seq_lens))


@pytest.fixture
def ascend_env(monkeypatch, npu_stub_packages):
    """NPU detection on where upstream reads it, the NPU pool layout, and the few
    runtime-context reads a backend constructor makes (no server is published)."""
    import sglang.srt.layers.attention.attention_registry as registry
    import sglang.srt.layers.attention.hybrid_linear_attn_backend as hybrid
    import sglang.srt.mem_cache.memory_pool as mp
    import sglang.srt.utils as sglang_utils
    from sglang.srt.runtime_context import get_parallel

    monkeypatch.setattr(sglang_utils, "is_npu", lambda: True)
    monkeypatch.setattr(registry, "_is_npu", True)
    monkeypatch.setattr(mp, "_is_npu", True)
    monkeypatch.setattr(hybrid, "get_spec", lambda: NS(speculative_eagle_topk=None))
    monkeypatch.setattr(hybrid, "get_memory", lambda: NS(enable_unified_memory=False))
    import sglang.srt.layers.linear as linear

    if hasattr(linear, "get_tp_group"):  # SGLang 0.5.20 reads the TP group from parallel_state
        monkeypatch.setattr(linear, "get_tp_group", lambda: None)
    with get_parallel().override(tp_size=1, tp_rank=0, attn_tp_size=1, tp_group=None):
        yield


def _must_not_call(*a, **k):
    raise AssertionError("upstream attn_backend_wrapper must not run for short-conv models on NPU")


# --------------------------------------------------------------------------- wrapper hook


@pytest.mark.parametrize("which", ["Lfm2Config", "Lfm2MoeConfig", "Lfm2VlConfig", "ZayaConfig"])
def test_wrapper_returns_plugin_backend_on_npu(ascend_env, which):
    from sglang.srt.hardware_backend.npu.attention.ascend_hybrid_linear_attn_backend import (
        AscendHybridLinearAttnBackend,
        AscendMambaAttnBackendBase,
    )
    from sglang.srt.layers.attention.linear.short_conv_backend import ShortConvAttnBackend

    cfg = zaya_config() if which == "ZayaConfig" else lfm2_config(which)
    runner, full, pool = make_runner(cfg)
    backend = short_conv.attn_backend_wrapper_around(_must_not_call, runner, full)
    sidecar_cls, hybrid_cls = short_conv.backend_classes()
    assert isinstance(backend, hybrid_cls) and isinstance(backend, AscendHybridLinearAttnBackend)
    assert isinstance(backend.short_conv_backend, sidecar_cls)
    assert isinstance(backend.short_conv_backend, AscendMambaAttnBackendBase)
    assert isinstance(backend.short_conv_backend, ShortConvAttnBackend)
    assert backend.full_attn_layers == list(cfg.full_attention_layer_ids)
    assert backend.linear_attn_backend is backend.short_conv_backend


def test_upstream_refuses_short_conv_on_npu_without_the_hook(ascend_env, monkeypatch):
    """The failure the hook removes, from the real upstream wrapper.  Only the Ascend
    GDN module (which needs more NPU packages than the stubs hold) and the published
    kernel-choice read are replaced; the short-conv branch runs as shipped."""
    import sys
    import types

    import sglang.srt.layers.attention.attention_registry as registry
    import sglang.srt.layers.attention.linear.utils as linear_utils

    gdn = types.ModuleType("sglang.srt.hardware_backend.npu.attention.ascend_gdn_backend")
    gdn.AscendGDNAttnBackend = object
    monkeypatch.setitem(sys.modules, gdn.__name__, gdn)
    monkeypatch.setattr(linear_utils, "resolve_linear_attn_backends", lambda prefill_default=None: None)
    runner, full, _ = make_runner(lfm2_config())
    runner.use_mla_backend = False
    runner.model_config.quantization = None
    runner.model_config.linear_attn_registry_result = None
    with pytest.raises(NotImplementedError, match="Short-conv hybrid models"):
        registry.attn_backend_wrapper(runner, full)
    backend = short_conv.attn_backend_wrapper_around(registry.attn_backend_wrapper, runner, full)
    assert hasattr(backend, "conv_state_metadata")


@pytest.mark.parametrize("which", ["gdn", "mamba2", "plain"])
def test_wrapper_calls_original_for_other_models(ascend_env, which):
    if which == "gdn":
        from sglang.srt.configs.qwen3_next import Qwen3NextConfig
        cfg = Qwen3NextConfig()
    elif which == "mamba2":
        from sglang.srt.configs.nemotron_h import NemotronHConfig
        cfg = NemotronHConfig()
    else:
        from transformers import LlamaConfig
        cfg = LlamaConfig()
    runner = NS(model_config=NS(hf_config=cfg, hf_text_config=cfg, is_draft_model=False))
    full = object()
    seen = []

    def original(r, f, *a, **k):
        seen.append((r, f, a, k))
        return "upstream result"

    assert short_conv.attn_backend_wrapper_around(original, runner, full) == "upstream result"
    assert seen == [(runner, full, (), {})]
    if which == "plain":
        from sglang.srt.layers.attention.attention_registry import attn_backend_wrapper
        runner.use_mla_backend = False
        runner.model_config.quantization = None
        runner.model_config.linear_attn_registry_result = None
        assert short_conv.attn_backend_wrapper_around(attn_backend_wrapper, runner, full) is full


def test_wrapper_off_npu_calls_original(ascend_env, monkeypatch):
    import sglang.srt.utils as sglang_utils

    monkeypatch.setattr(sglang_utils, "is_npu", lambda: False)
    runner, full, _ = make_runner(lfm2_config())
    assert short_conv.attn_backend_wrapper_around(lambda r, f: "cuda path", runner, full) == "cuda path"


@pytest.mark.parametrize("algo,topk,text", [
    ("NGRAM", None, "--speculative-algorithm NGRAM"),
    ("EAGLE", 4, "--speculative-eagle-topk 4"),
    ("DFLASH", 1, "--speculative-algorithm DFLASH"),
])
def test_speculative_algorithms_without_a_linear_chain_are_refused_naming_the_flag(ascend_env, algo, topk, text):
    runner, full, _ = make_runner(lfm2_config(), speculative_algorithm=algo, draft_tokens=3)
    runner.server_args.speculative_eagle_topk = topk
    runner.server_args.speculative_num_draft_tokens = 3
    with pytest.raises(ValueError, match=re.escape(text)) as err:
        short_conv.attn_backend_wrapper_around(_must_not_call, runner, full)
    assert "linear draft chains only" in str(err.value)


def test_linear_chain_speculative_decoding_builds_views_of_the_state_rows(ascend_env):
    runner, full, _ = make_runner(lfm2_config(), speculative_algorithm="EAGLE", draft_tokens=3)
    runner.server_args.speculative_eagle_topk = 1
    runner.server_args.speculative_num_draft_tokens = 3
    backend = short_conv.attn_backend_wrapper_around(_must_not_call, runner, full)
    sidecar = backend.short_conv_backend
    conv = runner.req_to_token_pool.mamba_pool.mamba_cache.conv[0]
    width = lfm2_config().conv_L_cache
    assert conv.shape[-2] == (width - 1) + 2 and sidecar._draft == 3
    assert sidecar._state_lens == [width - 1]


def test_speculative_pool_refused_without_algorithm_flag(ascend_env):
    runner, full, _ = make_runner(lfm2_config(), draft_tokens=3)
    with pytest.raises(ValueError, match="built for speculative decoding but server_args.speculative_algorithm"):
        short_conv.attn_backend_wrapper_around(_must_not_call, runner, full)


def test_metadata_contract_extend_decode_and_graph(ascend_env):
    cfg = zaya_config()
    runner, full, pool = make_runner(cfg)
    backend = short_conv.attn_backend_wrapper_around(_must_not_call, runner, full)
    pool.req_index_to_mamba_index_mapping[:4] = torch.tensor([3, 5, 7, 2], dtype=torch.int32)
    conv_pool = pool.mamba_pool.mamba_cache.conv  # window-major [layers, slots, window, C]
    assert conv_pool[0].shape[-2:] == (2, 48) and conv_pool[1].shape[-2:] == (1, 32)

    fb = extend_batch([0, 1, 2], [4, 2, 3], [0, 0, 2])
    backend.init_forward_metadata(fb)
    meta = backend.conv_state_metadata(2, fb)
    assert meta.cache_indices.dtype == torch.int64 and meta.cache_indices.tolist() == [3, 5, 7]
    assert meta.query_start_loc.tolist() == [0, 4, 6, 9]
    assert meta.has_initial_state.tolist() == [False, False, True]
    assert meta.slot_ids_cpu == [3, 5, 7] and meta.has_prefix_cpu == [False, False, True]
    conv0, conv1 = meta.layer_cache.conv
    assert conv0.shape == (11, 48, 2) and conv1.shape == (11, 32, 1)
    layer = pool.mamba_map[2]
    conv0[5, :, 1] = 1.5  # model-side write lands in the pool's last window row
    assert torch.equal(conv_pool[0][layer, 5, -1], torch.full((48,), 1.5))
    assert conv_pool[0][layer].sum() == 1.5 * 48 and conv_pool[0][1 - layer].sum() == 0

    fbd = decode_batch([0, 1, 2], [5, 3, 6])
    backend.init_forward_metadata(fbd)
    meta = backend.conv_state_metadata(0, fbd)
    assert meta.cache_indices.tolist() == [3, 5, 7] and meta.query_start_loc.tolist() == [0, 1, 2, 3]
    assert meta.has_initial_state is None and meta.slot_ids_cpu is None

    # NPU graph path: Ascend capture/replay metadata with a padded row (seq_len 0 -> slot 0)
    backend.init_cuda_graph_state(4, 4)
    fbg = decode_batch([0, 1, 2, 3], [5, 3, 6, 0])
    backend.init_forward_metadata_out_graph(fbg)
    first = backend.conv_state_metadata(0, fbg).cache_indices
    assert first.tolist() == [3, 5, 7, 0]
    fbg2 = decode_batch([3, 2, 1, 0], [2, 7, 4, 6])
    backend.init_forward_metadata_out_graph(fbg2)
    second = backend.conv_state_metadata(0, fbg2).cache_indices
    assert second.tolist() == [2, 7, 5, 3] and second.data_ptr() == first.data_ptr()


# --------------------------------------------------------------------------- hook arguments, draft worker


@pytest.mark.parametrize("npu", [True, False])
def test_wrapper_hands_the_original_its_arguments_and_probes_what_it_built(ascend_env, monkeypatch, npu):
    import sglang.srt.utils as sglang_utils
    from sglang.srt.configs.qwen3_next import Qwen3NextConfig

    import sglang_ascend_hybrid.integration.gdn_hooks as gdn_hooks
    import sglang_ascend_hybrid.tools.pairing as pairing

    monkeypatch.setattr(sglang_utils, "is_npu", lambda: npu)
    enforced, probed, seen = [], [], []
    monkeypatch.setattr(pairing, "enforce_for_model", enforced.append)
    monkeypatch.setattr(gdn_hooks, "probe_gdn_backend", lambda r, b: probed.append((r, b)))
    cfg = Qwen3NextConfig()
    runner = NS(model_config=NS(hf_config=cfg, hf_text_config=cfg, is_draft_model=False))
    full, built = object(), object()

    def original(*a, **k):
        seen.append((a, k))
        return built

    assert short_conv.attn_backend_wrapper_around(original, runner, full, "pos", key=1) is built
    assert len(seen) == 1 and seen[0][0][0] is runner and seen[0][0][1] is full
    assert seen[0][0][2:] == ("pos",) and seen[0][1] == dict(key=1)
    if npu:
        assert enforced == [runner.model_config] and len(probed) == 1
        assert probed[0][0] is runner and probed[0][1] is built
    else:
        assert enforced == [] and probed == []


def test_short_conv_model_is_checked_for_its_kernels_before_the_backend_is_built(ascend_env, monkeypatch):
    import sglang_ascend_hybrid.tools.pairing as pairing

    enforced = []
    monkeypatch.setattr(pairing, "enforce_for_model", enforced.append)
    runner, full, _ = make_runner(lfm2_config())
    short_conv.attn_backend_wrapper_around(_must_not_call, runner, full)
    assert enforced == [runner.model_config]


def test_draft_worker_backend_has_one_full_attention_layer(ascend_env):
    runner, full, _ = make_runner(lfm2_config())
    runner.is_draft_worker = True
    backend = short_conv.attn_backend_wrapper_around(_must_not_call, runner, full)
    assert backend.full_attn_layers == [0] and list(lfm2_config().full_attention_layer_ids) != [0]


# --------------------------------------------------------------------------- speculative: LFM2-VL, pool layout


@pytest.mark.parametrize("which", ["Lfm2Config", "Lfm2VlConfig"])
def test_speculative_decoding_is_served_for_lfm2_and_lfm2_vl(ascend_env, which):
    runner, full, _ = make_runner(lfm2_config(which), speculative_algorithm="EAGLE", draft_tokens=3)
    runner.server_args.speculative_eagle_topk = 1
    runner.server_args.speculative_num_draft_tokens = 3
    assert short_conv.speculative_draft_tokens(runner) == 3
    runner.server_args.speculative_algorithm = "NGRAM"
    with pytest.raises(ValueError, match="--speculative-algorithm NGRAM"):
        short_conv.speculative_draft_tokens(runner)


def _layout_runner(cfg, convs):
    return NS(req_to_token_pool=NS(mamba_pool=NS(mamba_cache=NS(conv=convs))),
              model_config=NS(hf_config=cfg, hf_text_config=getattr(cfg, "text_config", cfg), is_draft_model=False))


def test_conv_pool_layout_window_major_and_cuda_layout_pools(ascend_env):
    cfg = zaya_config()
    (c0, s0), (c1, s1) = [tuple(shape) for shape in cfg.mamba2_cache_params.shape.conv]
    wm = [torch.zeros(2, 5, s0, c0), torch.zeros(2, 5, s1, c1)]
    assert short_conv.conv_pool_layout(_layout_runner(cfg, wm)) == ([True, True], [s0, s1])
    cuda = [torch.zeros(2, 5, c0, s0), torch.zeros(2, 5, c1, s1)]
    assert short_conv.conv_pool_layout(_layout_runner(cfg, cuda)) == ([False, False], [None, None])
    mixed = [wm[0], cuda[1]]
    assert short_conv.conv_pool_layout(_layout_runner(cfg, mixed)) == ([True, False], [s0, None])
    draft = [torch.zeros(2, 5, s0 + 2, c0), torch.zeros(2, 5, s1 + 2, c1)]
    assert short_conv.conv_pool_layout(_layout_runner(cfg, draft), 3) == ([True, True], [s0, s1])


def test_conv_pool_layout_refuses_other_shapes_naming_the_expected_ones(ascend_env):
    cfg = zaya_config()
    (c0, s0), (c1, s1) = [tuple(shape) for shape in cfg.mamba2_cache_params.shape.conv]
    bad = [torch.zeros(2, 5, s0 + 1, c0), torch.zeros(2, 5, s1, c1)]
    with pytest.raises(ValueError, match=re.escape(
            f"conv state 0 of the mamba pool has shape (2, 5, {s0 + 1}, {c0}): expected (layers, slots, {s0}, {c0}) "
            f"window-major or (layers, slots, {c0}, {s0})")):
        short_conv.conv_pool_layout(_layout_runner(cfg, bad))
    # with draft rows only the window-major draft pool is right: a CUDA-layout pool has no draft rows
    cuda = [torch.zeros(2, 5, c0, s0), torch.zeros(2, 5, c1, s1)]
    with pytest.raises(ValueError) as err:
        short_conv.conv_pool_layout(_layout_runner(cfg, cuda), 3)
    assert str(err.value) == (f"conv state 0 of the mamba pool has shape (2, 5, {c0}, {s0}): expected "
                              f"(layers, slots, {s0 + 2}, {c0}) window-major")
    no_draft_rows = [torch.zeros(2, 5, s0, c0), torch.zeros(2, 5, s1, c1)]
    with pytest.raises(ValueError, match=re.escape(f"expected (layers, slots, {s0 + 2}, {c0}) window-major")):
        short_conv.conv_pool_layout(_layout_runner(cfg, no_draft_rows), 3)


def test_conv_pool_layout_without_readable_config_shapes(ascend_env, monkeypatch):
    from transformers import LlamaConfig

    convs = [torch.zeros(2, 5, 2, 8), torch.zeros(2, 5, 1, 4)]
    unreadable = _layout_runner(LlamaConfig(), convs)            # not a short-conv config: no conv shapes
    assert short_conv.conv_pool_layout(unreadable) == ([True, True], [None, None])
    with pytest.raises(ValueError, match=re.escape(
            "sglang-ascend-hybrid: the model config's conv state shapes are not readable, so the state rows of "
            "the speculative draft window are unknown")):
        short_conv.conv_pool_layout(unreadable, 3)
    # shapes for another number of conv states than the pool holds: the same as unreadable
    monkeypatch.setattr(short_conv, "_expected_cuda_conv_shapes", lambda runner: [(8, 2)])
    assert short_conv.conv_pool_layout(_layout_runner(zaya_config(), convs)) == ([True, True], [None, None])
    with pytest.raises(ValueError, match="not readable"):
        short_conv.conv_pool_layout(_layout_runner(zaya_config(), convs), 2)
