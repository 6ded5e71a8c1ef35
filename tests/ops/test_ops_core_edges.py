"""Edges of the ops core: the installed sgl-kernel-npu version read from metadata, the chip named by
the device name whatever its spacing, a forced rung of "auto" saying nothing, and the CPU workspace's
size limit taken inclusively."""

from __future__ import annotations

import importlib.metadata
import logging

import pytest
import torch

from sglang_ascend_hybrid import envs
from sglang_ascend_hybrid.ops import cpu_workspace, ladder, seam
from tests.support.fresh_state import fresh_seam_lookups


@pytest.fixture
def fresh_seam(monkeypatch):
    fresh_seam_lookups(monkeypatch)  # the kernel version is read afresh, and forgotten after the test


def test_the_kernel_version_comes_from_the_installed_distribution(monkeypatch, fresh_seam):
    asked = []

    def version(dist):
        asked.append(dist)
        return "2026.9.0"

    monkeypatch.setattr(importlib.metadata, "version", version)
    assert seam.kernel_package_version() == "2026.9.0"
    assert asked == ["sgl-kernel-npu"]
    assert seam.kernel_package_version() == "2026.9.0" and asked == ["sgl-kernel-npu"]  # read once


def test_no_kernel_distribution_is_none(monkeypatch, fresh_seam):
    def version(dist):
        raise importlib.metadata.PackageNotFoundError(dist)

    monkeypatch.setattr(importlib.metadata, "version", version)
    assert seam.kernel_package_version() is None


@pytest.mark.parametrize("name,chip", [("Ascend910B3", "A2"), ("Ascend 910 B3", "A2"), ("Ascend910_9382", "A3"),
                                       ("Ascend 910_93 82", "A3"), ("Ascend950PR", "950"), ("Ascend310P", None)])
def test_the_chip_is_named_whatever_the_spacing_of_the_device_name(name, chip):
    assert seam.classify_chip(name) == chip


def test_auto_forces_nothing_and_says_nothing(monkeypatch, caplog):
    monkeypatch.delenv(envs.ENV.GDN_BACKEND.name, raising=False)
    with caplog.at_level(logging.INFO, logger=ladder.logger.name):
        assert ladder.env_forced_rung(envs.ENV.GDN_BACKEND, ("npu_chunk", "torch"), "GDN", "prefill") == "auto"
    assert not [r for r in caplog.records if r.name == ladder.logger.name]


def test_a_temporary_of_exactly_the_limit_is_kept(monkeypatch):
    monkeypatch.setattr(cpu_workspace, "KEEP_MAX_ELEMENTS", 64)
    store = cpu_workspace.buffers("cpu")
    store.pop(("edge_probe_buffer", torch.float32), None)
    cpu_workspace.kept("edge_probe_buffer", (8, 8), torch.float32, "cpu")
    assert ("edge_probe_buffer", torch.float32) in store
    cpu_workspace.kept("edge_probe_buffer_big", (65,), torch.float32, "cpu")
    assert ("edge_probe_buffer_big", torch.float32) not in store
    store.pop(("edge_probe_buffer", torch.float32), None)


def test_an_unknown_rung_or_ladder_is_named_with_what_exists():
    """``Ladder.rung`` and ``catalog.rung``: a name that is not there is refused naming the argument, the
    value and the names that exist."""
    import re

    from sglang_ascend_hybrid.ops import catalog
    from sglang_ascend_hybrid.ops.gdn import decode

    with pytest.raises(ValueError, match=re.escape(
            f"gdn_serving_decode: backend='nope': expected 'auto' or one of the rungs {decode.DECODE.names}")):
        decode.DECODE.rung("nope")
    known = [lad.op for lad in catalog.ladders()]
    with pytest.raises(ValueError, match=re.escape(f"ladder='no_such_op': expected one of {known}")):
        catalog.rung("no_such_op", "torch")
    assert catalog.rung("gdn_serving_decode", "torch") is decode.DECODE.rung("torch")


def test_as_shape_gives_the_tensor_itself_when_it_has_the_shape_else_a_view_of_it():
    from sglang_ascend_hybrid.ops.tensors import as_shape

    t = torch.arange(6.0).reshape(1, 2, 3)
    assert as_shape(t, (1, 2, 3)) is t
    flat = as_shape(t, (2, 3))
    assert flat is not t and tuple(flat.shape) == (2, 3) and flat.data_ptr() == t.data_ptr()
    assert torch.equal(flat, t[0])
