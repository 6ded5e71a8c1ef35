"""The seam resolves the torch.ops.npu ops sgl-kernel-npu registers only after importing it
(sgl-project/sgl-kernel-npu f425bdf1 ``csrc/pytorch_extensions.cpp``, ``TORCH_LIBRARY_FRAGMENT(npu, m)``), and takes
no negative cache before that import."""

from __future__ import annotations

import torch

from sglang_ascend_hybrid.ops import seam
from tests.support.fresh_state import fresh_seam_lookups


def test_owner_is_imported_before_the_op_is_looked_up(monkeypatch):
    fresh_seam_lookups(monkeypatch)
    imported = []

    def fake_available(name):
        imported.append(name)
        if name == "sgl_kernel_npu":  # importing it registers the op
            monkeypatch.setattr(torch.ops.npu, "recurrent_gated_delta_rule", kernel, raising=False)
        return True

    def kernel(*a, **k):
        return "ran"

    monkeypatch.setattr(seam, "package_available", fake_available)
    assert seam.lookup("recurrent_gated_delta_rule") is kernel
    assert imported == ["torch_npu", "sgl_kernel_npu"]


def test_absent_owner_means_absent_op_and_a_later_probe_can_find_it(monkeypatch):
    fresh_seam_lookups(monkeypatch)
    state = {"owner": False}
    monkeypatch.setattr(seam, "package_available",
                        lambda name: name == "torch_npu" or (name == "sgl_kernel_npu" and state["owner"]))
    monkeypatch.setattr(torch.ops.npu, "causal_conv1d", lambda *a, **k: None, raising=False)
    assert seam.lookup("causal_conv1d") is None  # registered by sgl-kernel-npu, which is absent
    fresh_seam_lookups(monkeypatch)  # sgl-kernel-npu installed: probed again
    state["owner"] = True
    assert seam.lookup("causal_conv1d") is not None


def test_chip_names_map_to_generations():
    assert seam.classify_chip("Ascend910B3") == "A2"
    assert seam.classify_chip("Ascend910_9382") == "A3"
    assert seam.classify_chip("Ascend950PR") == "950"
    assert seam.classify_chip("Ascend310P") is None
