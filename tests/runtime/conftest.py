"""The runtime tier's selection: ZAYA1's reference (transformers' ZayaForCausalLM) arrived in
transformers 5.19, which the environments of SGLang 0.5.20 / 0.5.21 do not have, so there the ZAYA1
runs are deselected, said in one line (the rule of tests/e2e/conftest.py)."""

from __future__ import annotations

from tests.e2e.conftest import deselect_zaya, say_zaya_deselected

_DESELECTED: list = []


def pytest_collection_modifyitems(config, items):
    deselect_zaya(config, items, "tests/runtime/", _DESELECTED)


def pytest_terminal_summary(terminalreporter):
    say_zaya_deselected(terminalreporter, _DESELECTED, "runtime tests")
