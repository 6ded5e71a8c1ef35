"""The family table (``model_families.FAMILIES``) and the places a family must also be added to:
an example config (``examples/configs/<dir>/config.json``), the integration list
(``tests/integration/_families.py``, derived from the example configs) and a tiny e2e model
(``tests/e2e/families.py``, built by hand) -- so a new family cannot be half-added."""

from __future__ import annotations

import json
from pathlib import Path

from sglang_ascend_hybrid import model_families as mf

EXAMPLE_CONFIGS = Path(__file__).resolve().parents[1] / "examples" / "configs"

# Architectures with an example config but no tiny e2e model yet, and why (architecture ->
# reason).  Empty: every architecture with an example config has one.  A family added to the
# table with an example config fails the test below until its e2e model exists or it is named
# here; adding the e2e family means removing the entry (the test fails on a stale one).
E2E_NOT_YET: dict[str, str] = {}


def _examples() -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text(encoding="utf-8"))
            for p in sorted(EXAMPLE_CONFIGS.glob("*/config.json"))}


def _table_archs_with_examples() -> set[str]:
    archs = {a for f in mf.FAMILIES for a in f.architectures}
    return archs & {(cfg.get("architectures") or [""])[0] for cfg in _examples().values()}


def _e2e_archs() -> dict[str, str]:
    """e2e family name -> the SGLang model class (the architecture) it builds."""
    from tests.e2e import families as e2e  # torch: imported only here

    return {name: fam.sglang_model.rsplit(".", 1)[1] for name, fam in e2e.FAMILIES.items()}


def test_every_example_config_is_a_served_family():
    examples = _examples()
    assert examples
    for name, cfg in examples.items():
        fam = mf.BY_MODEL_TYPE.get(cfg.get("model_type"))
        assert fam is not None, f"{name}: model_type {cfg.get('model_type')!r} is not in model_families.FAMILIES"
        assert (cfg.get("architectures") or [""])[0] in fam.architectures, name
        mf.facts(cfg)  # parses


def test_every_family_with_an_example_is_in_the_integration_list():
    from tests.integration import _families as integration

    archs = _table_archs_with_examples()
    assert archs <= set(integration.FAMILIES.values())
    assert set(integration.FAMILIES) == set(_examples())
    kinds = {d: mf.BY_MODEL_TYPE[cfg["model_type"]].kind for d, cfg in _examples().items()}
    assert set(integration.SHORT_CONV_FAMILIES) == {d for d, k in kinds.items() if k == "short_conv"}
    assert set(integration.GDN_FAMILIES) == {d for d, k in kinds.items() if k == "gdn"}


def test_every_family_with_an_example_has_an_e2e_model():
    archs = _table_archs_with_examples()
    e2e = _e2e_archs()
    missing = archs - set(e2e.values())
    assert missing == set(E2E_NOT_YET), (
        f"architectures with an example config but no tests/e2e/families.py family: {sorted(missing)}; "
        f"stale E2E_NOT_YET entries: {sorted(set(E2E_NOT_YET) - missing)}")
    served = {a for f in mf.FAMILIES for a in f.architectures}
    assert set(e2e.values()) <= served, "an e2e family builds a model the family table does not serve"


def test_every_e2e_family_builds_the_config_class_the_table_serves():
    """Each tiny e2e model is built on the config class SGLang builds for its architecture
    (``model_families``' ``config_class``: Qwen3.5-MoE on ``Qwen3_5MoeConfig``, LFM2-VL on
    ``Lfm2VlConfig``), so the e2e run exercises what serving that architecture resolves to."""
    from tests.e2e import families as e2e

    by_arch = {a: f for f in mf.FAMILIES for a in f.architectures}
    for name, fam in e2e.FAMILIES.items():
        served = by_arch[fam.sglang_model.rsplit(".", 1)[1]]
        d = fam.config()
        d.pop("architectures", None)
        cfg = fam.wrap_config(d) if fam.wrap_config is not None else e2e._cls(fam.sglang_config)(**d)
        assert f"{type(cfg).__module__}.{type(cfg).__name__}" == served.config_class, name
        assert cfg.model_type == served.model_type, name
