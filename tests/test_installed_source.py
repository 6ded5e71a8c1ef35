"""The one reader of installed source (``installed_source``): packages found without importing them,
module files located on disk, and values derived from a file kept until the file changes."""

from __future__ import annotations

import os
import sys

import pytest

from sglang_ascend_hybrid import installed_source


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """``pkgx/__init__.py``, ``pkgx/sub/__init__.py``, ``pkgx/sub/mod.py`` and a plain module ``plainx.py``
    on sys.path."""
    (tmp_path / "pkgx" / "sub").mkdir(parents=True)
    (tmp_path / "pkgx" / "__init__.py").write_text("")
    (tmp_path / "pkgx" / "sub" / "__init__.py").write_text("")
    (tmp_path / "pkgx" / "sub" / "mod.py").write_text("X = 1\n")
    (tmp_path / "plainx.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_package_dir_is_the_packages_directory_or_none(tree):
    assert installed_source.package_dir("pkgx") == str(tree / "pkgx")
    assert installed_source.package_dir("plainx") is None  # a plain module has no directory
    assert installed_source.package_dir("no_such_package_here") is None
    assert "pkgx" not in sys.modules  # found without importing it


def test_locate_module_finds_the_longest_module_prefix_on_disk(tree):
    assert installed_source.locate_module(["pkgx", "sub", "mod", "X"]) == (3, str(tree / "pkgx" / "sub" / "mod.py"))
    assert installed_source.locate_module(["pkgx", "sub", "Missing"]) == (2, str(tree / "pkgx" / "sub" / "__init__.py"))
    assert installed_source.locate_module(["pkgx", "Missing"]) == (1, str(tree / "pkgx" / "__init__.py"))
    assert installed_source.locate_module(["plainx", "f"]) == (1, str(tree / "plainx.py"))
    assert installed_source.locate_module(["no_such_package_here"]) == (0, None)
    assert "pkgx" not in sys.modules


def test_a_directory_without_init_is_not_a_package_portion_with_an_init(tree):
    (tree / "pkgx" / "loose").mkdir()
    (tree / "pkgx" / "loose" / "m.py").write_text("")
    assert installed_source.locate_module(["pkgx", "loose", "m"]) == (3, str(tree / "pkgx" / "loose" / "m.py"))
    # the located prefix stays the last package with an __init__.py
    assert installed_source.locate_module(["pkgx", "loose", "gone"]) == (1, str(tree / "pkgx" / "__init__.py"))


def test_derived_values_are_kept_until_the_file_changes(tmp_path):
    path = tmp_path / "f.txt"
    path.write_text("one")
    calls = []

    def compute(p):
        calls.append(p)
        return open(p).read().upper()

    assert installed_source.derived(str(path), "upper", compute) == "ONE"
    assert installed_source.derived(str(path), "upper", compute) == "ONE"
    assert calls == [str(path)]  # kept
    assert installed_source.derived(str(path), "other", lambda p: "x") == "x"  # kept per (path, what)
    path.write_text("three")
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert installed_source.derived(str(path), "upper", compute) == "THREE"
    assert len(calls) == 2
    with pytest.raises(OSError):
        installed_source.derived(str(tmp_path / "absent"), "upper", compute)
