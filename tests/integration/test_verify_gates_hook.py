"""The ``gdn-verify-gates`` patch put in place by SGLang's own HookRegistry on the real upstream module: the
Ascend GDN backend's target-verify step calls its from-import alias of sgl-kernel-npu's
``fused_gdn_gating_kernel_without_sigmoid``, which now reaches the plugin's verify-gates ladder."""

from __future__ import annotations

import pytest
import torch

from sglang_ascend_hybrid.emulators import gdn_gating as emu
from sglang_ascend_hybrid.ops.gdn import verify_gates
from sglang_ascend_hybrid.patches import apply, registry
from tests.e2e.plugin_install import sglang_plugin_state_restored
from tests.support.call_counter import Counting

pytestmark = pytest.mark.patch_route("gdn-verify-gates")


def _torch_g(A_log, a, dt_bias):
    sp = torch.nn.functional.softplus(a.double() + dt_bias.double())
    return (-A_log.double().exp() * sp)[None]


def test_sglangs_alias_reaches_the_ladder_after_hook_registry_applies_the_patch(npu_stub_packages, monkeypatch):
    import sgl_kernel_npu.fla.fused_gdn_gating as skn_gating
    from sglang.srt.hardware_backend.npu.attention import ascend_gdn_backend as gdn_mod

    name = "fused_gdn_gating_kernel_without_sigmoid"
    kernel = Counting(emu.fused_gdn_gating_kernel_without_sigmoid)
    monkeypatch.setattr(skn_gating, name, kernel)   # what sgl-kernel-npu's module holds, and SGLang's alias of it
    monkeypatch.setattr(gdn_mod, name, kernel)
    patch = registry.by_name("gdn-verify-gates")
    verify_gates.VERIFY_GATES.forget_refusals()
    with sglang_plugin_state_restored():
        apply.install(patch)
        apply._apply_target(apply.hook_registry(patch.runtime), patch.target)
        hooked = getattr(gdn_mod, name)
        assert hooked is not kernel and getattr(skn_gating, name) is hooked   # the alias rebound too
        gen = torch.Generator().manual_seed(0)
        A_log, dt_bias = torch.randn(6, generator=gen), torch.randn(6, generator=gen)
        for T, kernel_calls in ((96, 1), (100, 1), (192, 2)):   # 100 tokens x 6 heads: blocks of 3
            a = torch.randn(T, 6, generator=gen).to(torch.bfloat16)
            b = torch.randn(T, 6, generator=gen).to(torch.bfloat16)
            g, beta = hooked(A_log, a, b, dt_bias)    # SGLang's call: forward_extend's target-verify branch
            assert beta is b and kernel.calls == kernel_calls
            torch.testing.assert_close(g.double(), _torch_g(A_log, a, dt_bias), atol=2e-6, rtol=2e-6)
    verify_gates.VERIFY_GATES.forget_refusals()
