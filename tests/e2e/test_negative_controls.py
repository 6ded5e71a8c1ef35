"""Negative controls: deliberately broken variants of the plugin must make the
whole-model comparison fail, so the harness is shown to catch what the plugin exists
to prevent.  Each break is a monkeypatch of one plugin function for one run."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from sglang_ascend_hybrid.integration import gdn_hooks, short_conv
from sglang_ascend_hybrid.integration.conv_state_layout import cuda_layout_view
from tests.e2e import device
from tests.e2e.runner import run_family


def pool_copies(mp):
    """The sidecar hands the model copies of the conv states instead of pool views:
    writes never reach the pool, so a continuation or a decode step starts from stale state."""
    def copies(layer_cache, window_major=None, state_lens=None):
        lens = state_lens or [None] * len(layer_cache.conv)
        return dataclasses.replace(layer_cache, conv=[cuda_layout_view(c, n).clone()
                                                      for c, n in zip(layer_cache.conv, lens)])

    mp.setattr(short_conv, "layer_cache_cuda_view", copies)


def ignore_saved_conv_state(mp):
    """The sidecar tells the model no request has a prefix: a chunked-prefill
    continuation restarts its conv from zeros."""
    sidecar = short_conv.backend_classes()[0]
    real = sidecar.conv_state_metadata

    def metadata(self, layer_id, forward_batch):
        meta = real(self, layer_id, forward_batch)
        if meta.has_initial_state is None:  # decode: nothing to break
            return meta
        return meta._replace(has_initial_state=torch.zeros_like(meta.has_initial_state),
                             has_prefix_cpu=[False] * len(meta.has_prefix_cpu))

    mp.setattr(sidecar, "conv_state_metadata", metadata)


def ignore_saved_ssm_state(mp):
    """The GDN prefill ladder drops the gathered SSM states: a continuation starts from zeros."""
    real = gdn_hooks.chunk_with_states

    def no_state(*args, initial_state=None, **kwargs):
        return real(*args, initial_state=None, **kwargs)

    mp.setattr(gdn_hooks, "chunk_with_states", no_state)


@pytest.mark.parametrize("name,breakage", [
    ("lfm2", pool_copies),
    ("zaya", pool_copies),
    ("lfm2", ignore_saved_conv_state),
    ("zaya", ignore_saved_conv_state),
    pytest.param("qwen3_5", ignore_saved_ssm_state),
], ids=["lfm2-pool-copies", "zaya-pool-copies", "lfm2-ignore-state", "zaya-ignore-state",
        "qwen3_5-ignore-ssm-state"])
def test_broken_plugin_fails_the_fp32_comparison(name, breakage):
    dev = device.gdn_fp32 if name.startswith("qwen") else None
    cmp = run_family(name, device=dev, breakage=breakage).compare()
    assert not cmp.fp32_ok(), f"the broken plugin still matched transformers: {cmp}"
    assert cmp.max_gap > 100 * 1e-3, str(cmp)  # not a near miss: the broken state shows


def test_healthy_run_of_the_same_plan_passes():
    """The controls above fail because of the break, not because of the plan."""
    assert run_family("lfm2").compare().fp32_ok()


class _NeverPublished:
    """A step variable that forward_extend's hook cannot publish to: the extend hook then lets
    SGLang's own TritonGDNKernel.extend run (the older route without gdn-extend-ladder)."""

    def set(self, value):
        return None

    def reset(self, token):
        pass

    def get(self):
        return None


def sglang_entry_route_alone(mp):
    """SGLang 0.5.20's own GDN prefill: the value-first pool's rows handed to sgl-kernel-npu's
    key-first Triton entry (its refusals served by the entry hook's ladder, in the entry's layout)."""
    mp.setattr(gdn_hooks, "_EXTEND_STEP", _NeverPublished())


@pytest.mark.patch_route("gdn-extend-ladder")
def test_entry_route_without_the_extend_ladder_fails_the_fp32_comparison():
    """What gdn-extend-ladder fixes on the releases it targets: without it the pool holds the
    entry's key-first states while decode reads it value first (K == V: nothing raises)."""
    cmp = run_family("qwen3_5", device=device.gdn_fp32, breakage=sglang_entry_route_alone).compare()
    assert not cmp.fp32_ok(), f"the entry route alone still matched transformers: {cmp}"
    assert cmp.max_gap > 100 * 1e-3, str(cmp)
