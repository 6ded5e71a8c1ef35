"""Example model families used by the launch-resolution tests: every example config
(``examples/configs/*/config.json``), its architecture, and its family kind from the family
table (:data:`sglang_ascend_hybrid.model_families.FAMILIES`)."""

from __future__ import annotations

import json
from pathlib import Path

from sglang_ascend_hybrid.model_families import BY_MODEL_TYPE
from sglang_ascend_hybrid.model_families import FAMILIES as TABLE

EXAMPLE_CONFIGS = Path(__file__).resolve().parents[2] / "examples" / "configs"


def _table_order(item: tuple[str, dict]) -> tuple[int, str]:
    """The family table's order (GDN families first), then the directory name.  The order matters:
    test_launch_resolution resolves every request in one process in this order, and the short-conv
    requests without ``load_plugins`` get the plugin's extra_buffer gate (patch
    short-conv-extra-buffer) only from an earlier ``load_plugins`` request of a GDN family
    (``testing.launch_check.register_launch_hooks`` installs the launch-defaults hook alone)."""
    mt = item[1].get("model_type")
    index = next((i for i, f in enumerate(TABLE) if f.model_type == mt), len(TABLE))
    return index, item[0]


def _example_configs() -> dict[str, dict]:
    found = {p.parent.name: json.loads(p.read_text(encoding="utf-8")) for p in EXAMPLE_CONFIGS.glob("*/config.json")}
    return dict(sorted(found.items(), key=_table_order))


_CONFIGS = _example_configs()

# example directory -> architectures[0]
FAMILIES = {name: (cfg.get("architectures") or [""])[0] for name, cfg in _CONFIGS.items()}


def _kind(name: str) -> str | None:
    mt = _CONFIGS[name].get("model_type")
    fam = BY_MODEL_TYPE.get(mt) if isinstance(mt, str) else None
    return fam.kind if fam is not None else None


SHORT_CONV_FAMILIES = tuple(f for f in FAMILIES if _kind(f) == "short_conv")
GDN_FAMILIES = tuple(f for f in FAMILIES if _kind(f) == "gdn")


def _snapshots(name: str) -> str | None:
    mt = _CONFIGS[name].get("model_type")
    fam = BY_MODEL_TYPE.get(mt) if isinstance(mt, str) else None
    return fam.radix_snapshots if fam is not None else None


# Examples whose prefix-cache snapshots nobody writes on NPU yet (family table: radix_snapshots
# ""): the plugin turns their radix cache off.
NO_SNAPSHOT_FAMILIES = tuple(f for f in FAMILIES if _snapshots(f) == "")


def config_dir(family: str) -> Path:
    return EXAMPLE_CONFIGS / family
