"""The cross-process cache of what upstream source files define (``definitions_cache``), behind
``patches.find_target``: used only for the exact bytes it parsed, written atomically, and
harmless when missing, corrupt or unwritable."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

from sglang_ascend_hybrid import installed_source, patches
from sglang_ascend_hybrid.patches import definitions_cache
from tests.support.fresh_state import fresh_patch_state

SOURCE = textwrap.dedent("""
    import os as renamed
    X = 1
    if renamed:
        def in_if():
            pass
    class C:
        def m(self):
            pass
        class Inner:
            attr: int = 0
    """)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    fresh_patch_state(monkeypatch)  # nothing parsed in memory yet
    return tmp_path / "xdg" / "sglang-ascend-hybrid" / definitions_cache.FILE_NAME


def write(path, text, mtime=None):
    path.write_text(text)
    if mtime is not None:
        os.utime(path, ns=(mtime, mtime))
    return str(path)


def no_parsing(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("parsed although the cache holds this content")

    monkeypatch.setattr(definitions_cache.ast, "parse", refuse)


def test_definitions_follow_find_targets_rules(cache, tmp_path):
    names = definitions_cache.definitions(write(tmp_path / "m.py", SOURCE))
    assert names == {"renamed": None, "X": None, "in_if": None,
                     "C": {"m": None, "Inner": {"attr": None}}}


def test_a_second_process_reads_the_cache_instead_of_parsing(cache, tmp_path, monkeypatch):
    path = write(tmp_path / "m.py", SOURCE)
    first = definitions_cache.definitions(path)
    assert cache.is_file()
    fresh_patch_state(monkeypatch)  # what a fresh process has
    no_parsing(monkeypatch)
    assert definitions_cache.definitions(path) == first


def test_changed_content_is_parsed_again_even_with_the_same_size_and_mtime(cache, tmp_path, monkeypatch):
    """The key is the content: an edit that keeps size and mtime (a same-length rename,
    restored timestamps) is still seen, in this process and in the next."""
    mtime = 1_600_000_000_000_000_000
    path = write(tmp_path / "m.py", "def old():\n    pass\n", mtime)
    assert "old" in definitions_cache.definitions(path)
    write(tmp_path / "m.py", "def new():\n    pass\n", mtime)
    assert os.stat(path).st_size == len("def old():\n    pass\n") and os.stat(path).st_mtime_ns == mtime
    assert definitions_cache.definitions(path) == {"new": None}
    fresh_patch_state(monkeypatch)  # the next process
    assert definitions_cache.definitions(path) == {"new": None}
    # and find_target, through the cache, says so
    monkeypatch.syspath_prepend(str(tmp_path))
    assert patches.find_target("m.new") is None
    assert patches.find_target("m.old") == f"'old' not found in m ({path})"


@pytest.mark.parametrize("content", [
    "not json", json.dumps([1, 2]), json.dumps({"schema": definitions_cache.SCHEMA + 1, "files": {}}),
    json.dumps({"schema": definitions_cache.SCHEMA, "files": "x"}),
], ids=["garbage", "list", "other-schema", "files-not-a-dict"])
def test_a_corrupt_or_foreign_cache_file_is_ignored_and_replaced(cache, tmp_path, content):
    cache.parent.mkdir(parents=True)
    cache.write_text(content)
    path = write(tmp_path / "m.py", SOURCE)
    assert "C" in definitions_cache.definitions(path)
    data = json.loads(cache.read_text())
    assert data["schema"] == definitions_cache.SCHEMA and path in data["files"]


def test_a_tampered_entry_for_the_right_content_is_not_trusted(cache, tmp_path, monkeypatch):
    path = write(tmp_path / "m.py", SOURCE)
    definitions_cache.definitions(path)
    data = json.loads(cache.read_text())
    data["files"][path]["names"] = {"C": 5}  # not a name table
    cache.write_text(json.dumps(data))
    fresh_patch_state(monkeypatch)  # the next process
    assert definitions_cache.definitions(path)["C"] == {"m": None, "Inner": {"attr": None}}


def test_an_unwritable_cache_directory_only_means_parsing(tmp_path, monkeypatch):
    blocker = tmp_path / "xdg"
    blocker.write_text("a file where the cache directory would go")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    fresh_patch_state(monkeypatch)
    assert "X" in definitions_cache.definitions(write(tmp_path / "m.py", SOURCE))


def test_entries_of_deleted_files_are_dropped_and_no_temporary_file_is_left(cache, tmp_path):
    gone, kept = write(tmp_path / "gone.py", "A = 1\n"), write(tmp_path / "kept.py", "B = 1\n")
    definitions_cache.definitions(gone)
    os.unlink(gone)
    definitions_cache.definitions(kept)
    assert set(json.loads(cache.read_text())["files"]) == {kept}
    assert sorted(p.name for p in cache.parent.iterdir()) == [definitions_cache.FILE_NAME]


def test_concurrent_writers_never_leave_a_half_written_file(cache, tmp_path):
    """Two processes store 40 entries each while this one reads the file: every read is
    complete JSON (os.replace of a finished temporary file)."""
    sources = []
    for w in range(2):
        d = tmp_path / f"w{w}"
        d.mkdir()
        for i in range(40):
            sources.append(write(d / f"m{i}.py", f"V{i} = {i}\n" * 50))
    code = ("import sys; from sglang_ascend_hybrid.patches import definitions_cache as t\n"
            "for p in sys.argv[1:]: t.definitions(p)\n")
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "xdg"))
    procs = [subprocess.Popen([sys.executable, "-c", code, *sources[w * 40:(w + 1) * 40]], env=env)
             for w in range(2)]
    reads = 0
    while any(p.poll() is None for p in procs) or reads == 0:
        if cache.is_file():
            data = json.loads(cache.read_text())  # raises on a torn file
            assert data["schema"] == definitions_cache.SCHEMA
            reads += 1
    assert [p.wait() for p in procs] == [0, 0]
    assert reads > 0
    assert sorted(p.name for p in cache.parent.iterdir()) == [definitions_cache.FILE_NAME]


def test_cached_names_of_the_installed_upstream_targets_equal_a_fresh_parse(cache, monkeypatch):
    """Round trip through the file for the real target sources: what registration reads from
    the cache is what parsing them gives."""
    if importlib.util.find_spec("sglang") is None:
        pytest.skip("sglang is not installed")
    origins = set()
    for p in patches.PATCHES:
        for target in (p.target, *patches.release_targets(p.extra_targets)):
            split, origin = installed_source.locate_module(target.split("."))
            if origin and origin.endswith(".py") and os.path.isfile(origin):
                origins.add(origin)
    assert len(origins) >= 3, origins
    fresh = {o: definitions_cache.summarize(ast.parse(open(o, "rb").read()).body) for o in origins}
    for o in origins:
        definitions_cache.definitions(o)
    fresh_patch_state(monkeypatch)  # the next process
    no_parsing(monkeypatch)
    assert {o: definitions_cache.definitions(o) for o in origins} == fresh
