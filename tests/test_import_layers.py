"""Imports run one way (README, "Layout"; CONTRIBUTING, "Where things go"): every import of the package's
own modules, module-level or lazy inside a function, goes down the layers or sideways within one, never up.
A new upward import fails here, naming the module and the import."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "sglang_ascend_hybrid"
LEAVES = {"envs", "logutil", "installed_source", "model_families"}  # shared knowledge every layer may read

# layer -> the layers (and leaf modules) it may import
ALLOWED = {
    "ops": set(),
    "emulators": {"ops"},
    "integration": {"ops"},
    "patches": set(),
    "tools": {"ops", "integration", "patches", "emulators"},  # emulators: `selftest --device cpu` only
    "plugin": {"patches"},
    "cli": {"tools", "testing"},  # testing: the `rehearse` subcommand, imported when it runs
    "testing": {"ops", "emulators", "integration", "patches", "tools"},
}
# Named exceptions, each with its reason: the SGLang-integration layer calls up at two points of SGLang's
# startup, both lazily inside the hook that runs there.
EXCEPTIONS = {
    # the backend factory records that `ascend_hybrid` was asked for and enforces strict mode
    ("sglang_ascend_hybrid.integration.ascend_hybrid", "sglang_ascend_hybrid.patches.mode"),
    ("sglang_ascend_hybrid.integration.ascend_hybrid", "sglang_ascend_hybrid.patches.apply"),
    # the attention-backend wrapper applies the deferred patches and checks the kernel pairing first
    ("sglang_ascend_hybrid.integration.short_conv", "sglang_ascend_hybrid.patches.apply"),
    ("sglang_ascend_hybrid.integration.short_conv", "sglang_ascend_hybrid.tools.pairing"),
    # the launch hooks' registration check reads the patch registry
    ("sglang_ascend_hybrid.integration.launch.registration", "sglang_ascend_hybrid"),
}


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "package"


def _imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module, [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, []


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_import_runs_back_up():
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "site" in path.relative_to(PACKAGE).parts:  # the emulated device's stand-in packages
            continue
        mod = _module(path)
        src = _layer(mod)
        if src in LEAVES or src == "package":
            continue
        for target, names in _imports(path):
            if target == "sglang_ascend_hybrid":  # `from sglang_ascend_hybrid import x`: submodules only
                targets = [f"sglang_ascend_hybrid.{n}" for n in names  # (not __version__ and the like)
                           if (PACKAGE / n).is_dir() or (PACKAGE / f"{n}.py").exists()]
            elif target.startswith("sglang_ascend_hybrid."):
                targets = [target]
            else:
                continue
            for t in targets:
                dst = _layer(t)
                if dst == src or dst in LEAVES or dst in ALLOWED.get(src, set()):
                    continue
                if (mod, t) in EXCEPTIONS or (mod, target) in EXCEPTIONS:
                    continue
                upward.append(f"{mod} imports {t}")
    assert upward == []


def test_the_exceptions_are_still_there():
    """An exception nobody needs any more is removed from the list, not left to hide a new one."""
    found = {(_module(p), t) for p in PACKAGE.rglob("*.py") if "site" not in p.relative_to(PACKAGE).parts
             for t, _ in _imports(p)}
    assert {e for e in EXCEPTIONS if e not in found} == set()
