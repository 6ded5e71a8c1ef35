"""``plan --json`` against its documentation (``docs/plan-json.md``): a ``schema_version``, and every
key the output has is documented and every documented key occurs in the output of the example
configs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sglang_ascend_hybrid import cli
from sglang_ascend_hybrid.tools import plan as plan_cli

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "examples" / "configs"
DOC = ROOT / "docs" / "plan-json.md"
CHUNKED = "rows[].gdn.prefill_with_chunk_states"


def documented() -> set[str]:
    """The key paths of the doc's tables (first column, in backticks)."""
    return set(re.findall(r"^\| `([A-Za-z_\[\].0-9]+)` \|", DOC.read_text(), flags=re.M))


def paths(value, prefix: str = "") -> set[str]:
    out = set()
    if isinstance(value, dict):
        for key, inner in value.items():
            here = f"{prefix}.{key}" if prefix else key
            out.add(here)
            out |= paths(inner, here)
    elif isinstance(value, list):
        for inner in value:
            if isinstance(inner, (dict, list)):
                out |= paths(inner, prefix + "[]")
    return out


def _docs(capsys, monkeypatch):
    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_GDN_BACKEND", "auto")  # every environment key present either way
    for config in sorted(p.name for p in CONFIGS.iterdir() if p.is_dir()):
        assert cli.main(["plan", "--config", str(CONFIGS / config), "--json"]) == 0
        yield config, json.loads(capsys.readouterr().out)


def test_every_key_is_documented_and_every_documented_key_occurs(capsys, monkeypatch):
    seen = set()
    for _, doc in _docs(capsys, monkeypatch):
        seen |= paths(doc)
    doc_keys = documented()
    # prefill_with_chunk_states has prefill's keys (the doc says so once)
    folded = {p.replace(CHUNKED, "rows[].gdn.prefill") for p in seen} | ({CHUNKED} & seen)
    assert folded - doc_keys == set(), "keys plan writes that docs/plan-json.md does not describe"
    assert doc_keys - folded == set(), "keys docs/plan-json.md describes that no example's plan has"


def test_schema_version_is_the_documented_one(capsys, monkeypatch):
    text = DOC.read_text()
    assert f"`schema_version` is {plan_cli.SCHEMA_VERSION}." in text
    for config, doc in _docs(capsys, monkeypatch):
        assert list(doc)[0] == "schema_version" and doc["schema_version"] == plan_cli.SCHEMA_VERSION, config
        assert isinstance(doc["rows"], list) and doc["rows"], config


@pytest.mark.parametrize("config", ["qwen3_6-27b", "lfm2-1.2b"])
@pytest.mark.parametrize("limit", ["inf", "1.0"])
def test_the_document_is_strict_json(capsys, monkeypatch, config, limit):
    """No NaN / Infinity: no overhead limit, and a layout without a head plan, write null."""
    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_GDN_MAX_OVERHEAD", limit)
    assert cli.main(["plan", "--config", str(CONFIGS / config), "--json"]) == 0
    out = capsys.readouterr().out

    def refuse(token):
        raise ValueError(token)

    doc = json.loads(out, parse_constant=refuse)
    assert doc["assumptions"]["max_overhead"] == (None if limit == "inf" else 1.0)
