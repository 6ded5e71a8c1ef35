"""Real upstream model layers (LFM2 ``Lfm2ShortConv``, ZAYA1 ``CCA``) driven through the
plugin's Ascend short-conv backend on a window-major NPU pool: prefill of several
sequences, a chunked-prefill continuation and several decode steps, compared with a
full-history plain-torch recomputation of the layer (no state at all), including the
pool contents afterwards."""

from __future__ import annotations

import functools

import pytest
import torch

from sglang_ascend_hybrid.integration import conv_hooks, short_conv
from sglang_ascend_hybrid.ops.conv import api as plugin_conv
from tests.integration.test_short_conv_backend import (  # noqa: F401  (fixture re-export)
    ascend_env,
    decode_batch,
    extend_batch,
    lfm2_config,
    make_runner,
    zaya_config,
)

# (request row -> mamba slot); rows 0..2 live, row 3 never scheduled
SLOTS = [3, 6, 1, 8]
# step plan: extend (new tokens per row, prefix lens), then continuation, then decodes
PREFILL = ([0, 1, 2], [5, 1, 2], [0, 0, 0])
CONTINUE = ([2, 0], [4, 2], [2, 5])  # row 2 chunked prefill, row 0 more prefill
DECODES = 3


def _forward_context(backend):
    from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
    return forward_context(ForwardContext(attn_backend=backend))


def _randomize(module, gen):
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3)


def _drive(backend, layer_call, hidden, gen):
    """Run the step plan; returns {row: [outputs per token]} and {row: [hidden per token]}."""
    outs, hist = {r: [] for r in range(3)}, {r: [] for r in range(3)}

    def run(fb, rows, lens):
        hs = torch.randn(sum(lens), hidden, generator=gen)
        backend.init_forward_metadata(fb)
        with _forward_context(backend):
            out = layer_call(hs, fb)
        start = 0
        for r, n in zip(rows, lens):
            hist[r].append(hs[start:start + n])
            outs[r].append(out[start:start + n])
            start += n

    for rows, lens, prefix in (PREFILL, CONTINUE):
        run(extend_batch(rows, lens, prefix), rows, lens)
    for step in range(DECODES):
        rows = [0, 1, 2]
        seq = [sum(t.shape[0] for t in hist[r]) + 1 for r in rows]
        run(decode_batch(rows, seq), rows, [1, 1, 1])
    return ({r: torch.cat(v) for r, v in outs.items()}, {r: torch.cat(v) for r, v in hist.items()})


def _setup(cfg, seed):
    runner, full, pool = make_runner(cfg)
    backend = short_conv.attn_backend_wrapper_around(None, runner, full)
    pool.req_index_to_mamba_index_mapping[:4] = torch.tensor(SLOTS, dtype=torch.int32)
    return backend, pool, torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("width", [2, 3, 4])
def test_lfm2_short_conv_layer(ascend_env, monkeypatch, width):  # noqa: F811  (fixture)
    import sglang.srt.models.lfm2 as lfm2
    from sglang.srt.layers.attention.mamba import causal_conv1d as upstream_conv

    # what the plugin's AROUND hooks do to LFM2's from-imported names
    monkeypatch.setattr(lfm2, "causal_conv1d_fn",
                        functools.partial(conv_hooks.causal_conv1d_fn_around, upstream_conv.causal_conv1d_fn))
    monkeypatch.setattr(lfm2, "causal_conv1d_update",
                        functools.partial(conv_hooks.causal_conv1d_update_around,
                                          upstream_conv.causal_conv1d_update))
    used = []
    real_fn, real_update = plugin_conv.causal_conv1d_fn, plugin_conv.causal_conv1d_update
    monkeypatch.setattr(plugin_conv, "causal_conv1d_fn", lambda *a, **k: used.append("fn") or real_fn(*a, **k))
    monkeypatch.setattr(plugin_conv, "causal_conv1d_update",
                        lambda *a, **k: used.append("update") or real_update(*a, **k))

    cfg = lfm2_config(width=width)
    backend, pool, gen = _setup(cfg, seed=width)
    layer_id = 2
    layer = lfm2.Lfm2ShortConv(cfg, layer_id)
    _randomize(layer, gen)
    before = pool.mamba_pool.mamba_cache.conv[0].clone()
    outs, hist = _drive(backend, layer.forward, cfg.hidden_size, gen)
    assert used.count("fn") == 2 and used.count("update") == DECODES

    # full-history recomputation: in_proj -> B*x -> causal depthwise conv from zeros -> C* -> out_proj
    conv_pool = pool.mamba_pool.mamba_cache.conv[0]  # [layers, slots, W-1, dim]
    li = pool.mamba_map[layer_id]
    with torch.no_grad():
        for r in range(3):
            proj, _ = layer.in_proj(hist[r])
            b_gate, c_gate, x = proj.chunk(3, dim=-1)
            bx = b_gate * x
            padded = torch.cat([torch.zeros(width - 1, bx.shape[1]), bx])
            conv = torch.stack([(padded[t:t + width] * layer.conv_weight.t()).sum(0)
                                for t in range(bx.shape[0])]) + layer.conv_bias
            expect, _ = layer.out_proj(c_gate * conv)
            torch.testing.assert_close(outs[r], expect, rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(conv_pool[li, SLOTS[r]], padded[-(width - 1):], rtol=1e-5, atol=1e-5)
    untouched = [s for s in range(conv_pool.shape[1]) if s not in SLOTS[:3]]
    assert torch.equal(conv_pool[:, untouched], before[:, untouched])
    for other in range(conv_pool.shape[0]):
        if other != li:
            assert torch.equal(conv_pool[other], before[other])


def test_zaya_cca_layer(ascend_env):  # noqa: F811  (fixture)
    from sglang.srt.models.zaya import CCA

    cfg = zaya_config()
    backend, pool, gen = _setup(cfg, seed=21)
    layer_id = 2
    cca = CCA(cfg, cca_num_k_heads=cfg.num_query_groups, cca_num_q_heads=cfg.num_attention_heads,
              hidden_size=cfg.hidden_size, head_dim=cfg.head_dim, cca_time0=cfg.cca_time0,
              cca_time1=cfg.cca_time1, layer_id=layer_id)
    _randomize(cca, gen)
    cache = pool.mamba_pool.mamba_cache
    before = [c.clone() for c in cache.conv]
    with torch.no_grad():
        outs, hist = _drive(backend, lambda hs, fb: torch.cat([t.reshape(hs.shape[0], -1).float()
                                                               for t in cca(hs, fb)], -1),
                            cfg.hidden_size, gen)
        li = pool.mamba_map[layer_id]
        for r in range(3):
            # the model's own stateless reference path over the whole history
            q, k, v = cca._forward_no_state(hist[r])
            expect = torch.cat([t.reshape(hist[r].shape[0], -1).float() for t in (q, k, v)], -1)
            torch.testing.assert_close(outs[r], expect, rtol=1e-4, atol=1e-4)
            qk = torch.cat([cca.linear_q(hist[r])[0], cca.linear_k(hist[r])[0]], -1)
            pad = cca.total_padding
            torch.testing.assert_close(cache.conv[0][li, SLOTS[r]], qk[-pad:], rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(cache.conv[1][li, SLOTS[r], 0], hist[r][-1], rtol=0, atol=0)
    untouched = [s for s in range(cache.conv[0].shape[1]) if s not in SLOTS[:3]]
    for now, old in zip(cache.conv, before):
        assert torch.equal(now[:, untouched], old[:, untouched])
        assert torch.equal(now[1 - li], old[1 - li])
