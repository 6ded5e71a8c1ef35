"""Whole-model tests need transformers' model class of each family as the reference.
ZAYA1's arrived in transformers 5.19; the environments of older SGLang releases pin an
older transformers (5.12 for SGLang 0.5.20 / 0.5.21), so there the ZAYA1 tests are
deselected and the run says so in one line (like the per-release selection of
tests/conftest.py)."""

from __future__ import annotations

_DESELECTED: list = []


def _has_zaya() -> bool:
    import transformers

    return hasattr(transformers, "ZayaForCausalLM")


def deselect_zaya(config, items, folder: str, deselected: list) -> None:
    """Drop the ZAYA1 tests under ``folder`` where transformers has no ZAYA class (noted in ``deselected``)."""
    if _has_zaya():
        return
    drop = [item for item in items if folder in item.nodeid and "zaya" in item.nodeid]
    if drop:
        deselected.extend(item.nodeid for item in drop)
        config.hook.pytest_deselected(items=drop)
        items[:] = [item for item in items if item not in drop]


def say_zaya_deselected(terminalreporter, deselected: list, what: str) -> None:
    if deselected:
        import transformers

        terminalreporter.write_line(
            f"deselected {len(deselected)} ZAYA1 {what}: transformers {transformers.__version__} "
            "has no ZAYA model class (the reference; added in transformers 5.19)")


def pytest_collection_modifyitems(config, items):
    deselect_zaya(config, items, "tests/e2e/", _DESELECTED)


def pytest_terminal_summary(terminalreporter):
    say_zaya_deselected(terminalreporter, _DESELECTED, "whole-model tests")
