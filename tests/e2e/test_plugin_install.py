"""The harness installs the plugin through SGLang's own ``load_plugins`` (the package's
real entry points) and takes every patch out again, so the whole-model tests neither
depend on nor leak into other tests of the same worker."""

from __future__ import annotations

from sglang_ascend_hybrid import patches
from sglang_ascend_hybrid.patches.status import APPLIED, DEFERRED, REGISTERED
from tests.e2e import harness
from tests.e2e.plugin_install import plugin_loaded


def _targets():
    import sglang.srt.layers.attention.attention_registry as registry
    import sglang.srt.layers.attention.mamba.causal_conv1d as conv
    import sglang.srt.models.lfm2 as lfm2
    from sglang.srt.hardware_backend.npu.attention.ascend_gdn_backend import AscendGDNAttnBackend

    return {"attn_backend_wrapper": registry.attn_backend_wrapper, "conv_fn": conv.causal_conv1d_fn,
            "lfm2_conv_fn": lfm2.causal_conv1d_fn, "lfm2_conv_update": lfm2.causal_conv1d_update,
            "chunk_gdn": AscendGDNAttnBackend.__dict__.get("chunk_gdn")}


def test_load_plugins_installs_every_patch_and_the_exit_removes_them(npu_stub_packages):
    import sglang.srt.plugins as plugins

    harness.import_upstream_backends()
    before = _targets()
    loaded_before = plugins._plugins_loaded
    with harness.sglang_process(), plugin_loaded(harness.NPU_STUBS) as status:
        during = _targets()
        states = {p.name: p.state for p in status.patches.values()}
        if patches.release_state(patches.by_name("gdn-prefill-ladder")) is None:  # the route exists here
            assert states["gdn-prefill-ladder"] == DEFERRED  # waits for the NPU backend build
        assert states["short-conv-backend"] == REGISTERED and states["backend-choices"] == APPLIED
        for name in ("attn_backend_wrapper", "conv_fn", "lfm2_conv_fn", "lfm2_conv_update"):
            assert during[name] is not before[name], name
            assert during[name].__wrapped__ is before[name], name  # SGLang's HookRegistry wrapper
        assert during["lfm2_conv_fn"] is during["conv_fn"]  # the from-import copy was rebound too
    after = _targets()
    assert after == before
    assert plugins._plugins_loaded == loaded_before


def test_a_run_applies_the_deferred_gdn_patch_and_leaves_nothing_behind():
    from tests.e2e import device
    from tests.e2e.runner import run_family

    harness.import_upstream_backends()
    before = _targets()
    run = run_family("qwen3_5", device=device.gdn_fp32,
                     plan=harness.StepPlan(prompts=((5, 17, 3, 99, 42), (11, 7), (100,)), first_chunk=3, decodes=1))
    assert "applied the NPU-backend patches" in run.log_text()
    assert run.calls["chunk_with_states"] > 0  # the chunk_gdn hook ran inside the forward
    assert run.compare().fp32_ok()
    assert _targets() == before
