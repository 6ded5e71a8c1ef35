"""The environment-variable registry: every variable is named SGLANG_ASCEND_HYBRID_*,
documented in README.md, and parsed with clear errors."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from sglang_ascend_hybrid import envs

README = (Path(__file__).parent.parent / "README.md").read_text()


@pytest.mark.parametrize("var", envs.all_vars(), ids=lambda v: v.name)
def test_every_variable_is_prefixed_and_documented(var):
    assert var.name.startswith("SGLANG_ASCEND_HYBRID_")
    assert f"`{var.name}`" in README


def test_package_reads_no_undeclared_plugin_variable():
    declared = {v.name for v in envs.all_vars()}
    pkg = Path(envs.__file__).parent
    used = set()
    for path in pkg.rglob("*.py"):
        used |= set(re.findall(r"SGLANG_ASCEND_HYBRID_[A-Z_]+", path.read_text()))
    assert used <= declared, used - declared


def test_bad_values_name_the_variable(monkeypatch):
    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_GDN_MAX_OVERHEAD", "lots")
    with pytest.raises(ValueError, match="SGLANG_ASCEND_HYBRID_GDN_MAX_OVERHEAD.*'lots'"):
        envs.ENV.GDN_MAX_OVERHEAD.get()
    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_DISABLE", "maybe")
    with pytest.raises(ValueError, match="SGLANG_ASCEND_HYBRID_DISABLE"):
        envs.ENV.DISABLE.get()


def test_temporary_env_restores():
    os.environ.pop("SGLANG_ASCEND_HYBRID_GDN_BACKEND", None)
    with envs.temporary_env({"SGLANG_ASCEND_HYBRID_GDN_BACKEND": "torch"}):
        assert envs.ENV.GDN_BACKEND.get() == "torch"
    assert "SGLANG_ASCEND_HYBRID_GDN_BACKEND" not in os.environ
