"""The patch registry's static target check (``patches.find_target``) on a package written for the
test (mutation testing): package ``__init__`` definitions, conditional definitions in
every branch of ``if`` / ``try``, classes, top-level single-file modules, namespace portions, and
the reasons it gives when something is missing."""

from __future__ import annotations

import textwrap

import pytest

from sglang_ascend_hybrid import patches

PKG = "mutdemo_pkg_t16"


@pytest.fixture
def demo(tmp_path, monkeypatch):
    root = tmp_path
    (root / PKG / "sub").mkdir(parents=True)
    (root / PKG / "__init__.py").write_text("TOP = 1\n")
    (root / PKG / "sub" / "__init__.py").write_text(textwrap.dedent("""
        try:
            import json as in_try
        except ImportError:
            in_handler = None
        else:
            in_else = 1
        finally:
            in_finally = 2
        if False:
            in_if = 1
        else:
            def in_if_else():
                pass
        annotated: int = 3
        """))
    (root / PKG / "sub" / "mod.py").write_text(textwrap.dedent("""
        class C:
            def m(self):
                pass
        """))
    (root / "mutdemo_single_t16.py").write_text("def f():\n    pass\n")
    (root / "mutdemo_ns_t16" / "part").mkdir(parents=True)  # namespace packages: no __init__.py
    (root / "mutdemo_ns_t16" / "part" / "leaf.py").write_text("X = 1\n")
    (root / "mutdemo_ext_t16.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\x7fELF not python")
    monkeypatch.syspath_prepend(str(root))
    return root


@pytest.mark.parametrize("name", ["in_try", "in_handler", "in_else", "in_finally", "in_if", "in_if_else",
                                  "annotated"])
def test_conditional_definitions_in_every_branch_are_found(demo, name):
    assert patches.find_target(f"{PKG}.sub.{name}") is None


def test_package_init_single_file_module_class_member_and_namespace_portion(demo):
    assert patches.find_target(f"{PKG}.TOP") is None
    assert patches.find_target(f"{PKG}.sub.mod.C.m") is None
    assert patches.find_target("mutdemo_single_t16.f") is None
    assert patches.find_target("mutdemo_ns_t16.part.leaf.X") is None


def test_missing_pieces_are_named(demo):
    origin = str(demo / PKG / "sub" / "mod.py")
    assert patches.find_target(f"{PKG}.sub.mod.C.nope") == f"'nope' not found in {PKG}.sub.mod ({origin})"
    assert patches.find_target(f"{PKG}.sub.nope") == \
        f"'nope' not found in {PKG}.sub ({demo / PKG / 'sub' / '__init__.py'})"
    assert patches.find_target("mutdemo_single_t16.g") == \
        f"'g' not found in mutdemo_single_t16 ({demo / 'mutdemo_single_t16.py'})"
    for target in (f"{PKG}.sub", "mutdemo_absent_t16.x", "mutdemo_ext_t16.x"):
        assert patches.find_target(target) == f"module of {target!r} not found"
