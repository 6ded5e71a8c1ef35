"""README's compatibility table is what this release's environment verifies, and
the declared range, the CI matrix and the table name the same releases."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import tomllib

from sglang_ascend_hybrid import TESTED_SGLANG_RANGE, patches
from sglang_ascend_hybrid.patches import releases
from sglang_ascend_hybrid.patches.releases import installed_version

from . import compat_table

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).parent


def test_readme_column_for_this_release_is_what_it_verifies(tmp_path):
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0", HF_HUB_OFFLINE="1")
    env.pop("SGLANG_ASCEND_HYBRID_STRICT", None)
    proc = subprocess.run([sys.executable, str(HERE / "compat_table.py"), "--column"], capture_output=True,
                          text=True, env=env, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    col = json.loads(proc.stdout.strip().splitlines()[-1])
    assert col["release"] == installed_version("sglang")
    # every patch applied, or not needed / unavailable as declared for this release; strict startup ok
    for p in patches.PATCHES:
        on_release = patches.release_state(p)
        assert col["cells"][p.name] == (on_release[0] if on_release else "applied"), p.name
    assert col["cells"][compat_table.STRICT_ROW] == "ok"
    table = compat_table.parse((ROOT / "README.md").read_text())
    assert table.get(col["release"]) == col["cells"], (
        "README's compatibility table is stale for this release: run scripts/compat_table.sh")


def test_range_matrix_and_table_name_the_same_releases():
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["sglang"]
    assert extra == ["sglang" + ",".join(TESTED_SGLANG_RANGE)]
    base = re.search(r"^sglang==(\S+)$", (ROOT / "constraints.txt").read_text(), re.M).group(1)
    matrix = {base} | {p.stem.removeprefix("sglang-") for p in (ROOT / "constraints").glob("sglang-*.txt")}
    assert matrix == set(releases.tested_releases())  # not imported bare: pytest would collect test*
    for release in matrix - {base}:
        pins = (ROOT / "constraints" / f"sglang-{release}.txt").read_text()
        assert re.search(rf"^sglang=={re.escape(release)}$", pins, re.M), release
    assert set(compat_table.parse((ROOT / "README.md").read_text())) == matrix


def test_render_and_parse_round_trip():
    cols = [{"release": "1.0.10", "cells": {"a": "applied", compat_table.STRICT_ROW: "ok"}},
            {"release": "1.0.9", "cells": {"a": "not needed", compat_table.STRICT_ROW: "ok"}}]
    text = f"x\n{compat_table.START}\n{compat_table.render(cols)}\n{compat_table.END}\ny\n"
    assert compat_table.render(cols).splitlines()[0] == "| fix (patch) | SGLang 1.0.9 | SGLang 1.0.10 |"
    assert compat_table.parse(text) == {"1.0.9": cols[1]["cells"], "1.0.10": cols[0]["cells"]}
