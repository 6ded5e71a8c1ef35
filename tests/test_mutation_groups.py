"""scripts/mutation.py's groups stay honest: every path they name exists, and every module of the
package that decides something is in a group (docs/testing.md, "Mutation testing")."""

from __future__ import annotations

import ast
import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Modules that decide nothing: docstrings and re-exports, a one-line entry point; testing/ is
# rehearsal tooling the runtime tier drives (docs/testing.md says why it is in no group).
NOT_DECIDING = {"sglang_ascend_hybrid/__init__.py", "sglang_ascend_hybrid/patches/__main__.py",
                "sglang_ascend_hybrid/tools/__init__.py", "sglang_ascend_hybrid/ops/attention/__init__.py",
                "sglang_ascend_hybrid/ops/conv/__init__.py"}


def _groups() -> dict:
    tree = ast.parse((ROOT / "scripts" / "mutation.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "GROUPS":
            return ast.literal_eval(node.value)
    raise AssertionError("scripts/mutation.py has no GROUPS")


def _package_modules() -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "sglang_ascend_hybrid").rglob("*.py")
                  if "testing" not in p.relative_to(ROOT).parts and "site" not in p.relative_to(ROOT).parts)


def test_every_path_a_group_names_exists():
    missing = []
    for name, (modules, tests) in _groups().items():
        missing += [f"{name}: module {m}" for m in modules if not list(ROOT.glob(m))]
        missing += [f"{name}: test {t}" for t in tests if not (ROOT / t).exists()]
    assert missing == []


def test_every_deciding_module_is_in_a_group():
    patterns = [m for modules, _ in _groups().values() for m in modules]
    outside = [m for m in _package_modules() if not any(fnmatch.fnmatch(m, p) for p in patterns)]
    assert sorted(set(outside) - NOT_DECIDING) == []
    assert NOT_DECIDING <= set(_package_modules())  # the exemptions name real modules
