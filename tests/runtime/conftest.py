"""The runtime tier's selection: ZAYA1's reference (transformers' ZayaForCausalLM) arrived in
transformers 5.19, which the environments of SGLang 0.5.20 / 0.5.21 do not have, so there the ZAYA1
runs are deselected, said in one line (as in tests/e2e)."""

from __future__ import annotations

_DESELECTED: list = []


def _has_zaya() -> bool:
    import transformers

    return hasattr(transformers, "ZayaForCausalLM")


def pytest_collection_modifyitems(config, items):
    if _has_zaya():
        return
    drop = [item for item in items if "tests/runtime/" in item.nodeid and "zaya" in item.nodeid]
    if drop:
        _DESELECTED.extend(item.nodeid for item in drop)
        config.hook.pytest_deselected(items=drop)
        items[:] = [item for item in items if item not in drop]


def pytest_terminal_summary(terminalreporter):
    if _DESELECTED:
        import transformers

        terminalreporter.write_line(
            f"deselected {len(_DESELECTED)} ZAYA1 runtime tests: transformers {transformers.__version__} "
            "has no ZAYA model class (the reference; added in transformers 5.19)")
