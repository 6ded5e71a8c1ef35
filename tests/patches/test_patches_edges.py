"""Edges of the patch machinery that the other patch tests leave unchecked (found by mutation testing):

* release arithmetic: ``tested_releases`` of a range (and its refusal of one spanning minor series),
  ``range_bounds``' message, ``release_of`` on a version PEP 440 rejects;
* registration verifies a patch against the SGLang version it recorded, not whatever is installed;
* a hook patch put in place on import is recorded under its target; resolution hooks are registered
  themselves, once;
* the import watch: a loader proxy that delegates everything, a finder that passes the reload
  target on, and a module whose callbacks fired can be executed again through its loader;
* the status summary line, word for word;
* the definitions cache: its default directory, its atomic write through ``.targets-*.tmp``, UTF-8
  reading whatever the locale, and the nesting depth up to which a cached entry is trusted;
* the data model's validation and the chunk_gdn route's ``Elsewhere``.
"""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import json
import locale
import os
import sys
import types
from pathlib import Path

import pytest
from packaging.version import Version

from sglang_ascend_hybrid import patches
from sglang_ascend_hybrid.patches import apply, definitions_cache, import_watch, registry, releases
from sglang_ascend_hybrid.patches.status import APPLIED, FAILED, REGISTERED, STATUS, PluginStatus
from tests.patches.test_definitions_cache import cache, write  # noqa: F401  (fixture)
from tests.support.fresh_state import fresh_patch_state
from tests.test_plugin_unit import fake_sglang  # noqa: F401  (fixture)

INSTALLED = patches.installed_version("sglang")
needs_sglang = pytest.mark.skipif(INSTALLED is None, reason="sglang is not installed")


def other_release() -> str:
    """A release that is certainly not the installed one (the next major series)."""
    return f"{Version(INSTALLED).major + 1}.0"


# ----------------------------------------------------------------- releases


def test_tested_releases_lists_every_patch_release_of_the_range():
    assert releases.tested_releases(">=7.2.4,<7.2.7") == ("7.2.4", "7.2.5", "7.2.6")
    assert releases.tested_releases((">=7.2.0", "<7.2.2")) == ("7.2.0", "7.2.1")
    assert releases.tested_releases(">=3.1,<3.4") == ("3.1", "3.2", "3.3")


@needs_sglang
def test_the_default_tested_releases_are_the_project_range_and_include_the_installed_release():
    low, high = patches.range_bounds()
    tested = patches.tested_releases()
    assert tested[0] == low and Version(tested[-1]) < Version(high)
    assert len({Version(v).release[:-1] for v in tested}) == 1
    if patches.sglang_version_problem(INSTALLED) is None:
        assert str(releases.release_of(INSTALLED)) in tested


def test_tested_releases_refuses_a_range_spanning_minor_series():
    with pytest.raises(ValueError) as err:
        releases.tested_releases(">=7.2.4,<7.3.1")
    assert str(err.value) == "tested range >=7.2.4,<7.3.1 spans more than one minor series"


def test_range_bounds_names_the_clauses_a_range_needs():
    assert releases.range_bounds(">=7.2.4,<7.3") == ("7.2.4", "7.3")
    with pytest.raises(ValueError) as err:
        releases.range_bounds(">=7.2.4")
    assert str(err.value) == "range '>=7.2.4' needs a '>=X' and a '<Y' clause"


def test_a_version_pep440_rejects_is_read_by_its_leading_release():
    assert releases.release_of("7.2.4_custom build") == Version("7.2.4")
    assert patches.matches(">=7.2,<7.3", "7.2.4_custom build") is True
    with pytest.raises(ValueError, match="unparseable version 'custom'"):
        releases.release_of("custom")


# ------------------------------------------------------- registration (_apply)


@pytest.fixture
def recorded(monkeypatch, tmp_path):
    """STATUS with no patch records and another SGLang release than the installed one recorded; a
    module of the test's own to hold targets; the definitions cache in ``tmp_path``."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    fresh_patch_state(monkeypatch)
    (tmp_path / "mutdemo_release_t51.py").write_text("PRESENT = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(STATUS, "sglang_version", other_release())
    return STATUS


def _patch(**kw) -> patches.Patch:
    fields = dict(name="test-recorded-release", target="mutdemo_release_t51.PRESENT", kind="choices",
                  hook="os:getpid", why="w", how="h", removal="r")
    return patches.Patch(**{**fields, **kw})


@needs_sglang
def test_what_a_patch_is_on_the_release_is_decided_for_the_recorded_version(recorded):
    patch = _patch(releases=f"=={INSTALLED}")  # the installed release only: not the recorded one
    apply._apply(patch)
    rec = recorded.patches[patch.name]
    assert (rec.target, rec.state, rec.reason) == (
        patch.target, FAILED, f"declared for SGLang =={INSTALLED} only and says nothing about {other_release()}")


@needs_sglang
def test_a_patch_is_verified_against_the_recorded_version(recorded, tmp_path):
    # a helper checked only from the recorded release on: missing there, so the patch fails
    patch = _patch(extra_targets=(patches.Target("mutdemo_release_t51.ONLY_LATER", f">={other_release()}"),))
    apply._apply(patch)
    rec = recorded.patches[patch.name]
    assert (rec.target, rec.state, rec.reason) == (
        patch.target, FAILED,
        f"'ONLY_LATER' not found in mutdemo_release_t51 ({tmp_path / 'mutdemo_release_t51.py'})")


def test_a_hook_applied_on_import_is_recorded_with_its_target(fake_sglang):  # noqa: F811
    patch = patches.Patch(name="test-hook-on-import", target="fake.module.f", kind="hook", hook_type="around",
                          hook="os:getpid", why="w", how="h", removal="r")
    apply._apply_on_import(patch)
    rec = STATUS.patches[patch.name]
    assert (rec.name, rec.target, rec.state, rec.reason) == (patch.name, patch.target, APPLIED, "")
    assert [h for _, h, _ in fake_sglang.hooks._hooks[patch.target]] == [os.getpid]
    assert patch.target in fake_sglang.hooks._patched


def test_a_resolution_hook_is_registered_itself_and_once(fake_sglang):  # noqa: F811
    def hook(*a, **k):
        return None

    apply.register_resolution_hook_once("handle_npu_backends", hook)
    apply.register_resolution_hook_once("handle_npu_backends", hook)
    assert fake_sglang.res._HOOKS == {"handle_npu_backends": [hook]}


# ------------------------------------------------------------- import watch


class OneModuleLoader:
    """A loader that is not a file loader (so the watch wraps it in its proxy); no create_module."""

    tag = "one-module"

    def __init__(self):
        self.executed = []

    def exec_module(self, module):
        self.executed.append(module)
        module.VALUE = 42


class CreatingLoader(OneModuleLoader):
    class Made(types.ModuleType):
        pass

    def create_module(self, spec):
        return self.Made(spec.name)


class OneModuleFinder:
    def __init__(self, name, loader):
        self.name, self.loader, self.calls = name, loader, []

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        self.calls.append((fullname, path, target))
        return importlib.machinery.ModuleSpec(fullname, self.loader)


@pytest.fixture
def watch(monkeypatch):
    """No import watched (the import watch and sys.meta_path as they were after the test), and no demo
    module left behind."""
    fresh_patch_state(monkeypatch)
    yield monkeypatch
    for name in [m for m in sys.modules if m.startswith("mutdemo_watch_")]:
        del sys.modules[name]


def _import_watched(watch, name, loader):
    """Import ``name`` through ``loader`` with a watch on it: ``(module, the modules the watch saw)``."""
    watch.setattr(sys, "meta_path", [*sys.meta_path, OneModuleFinder(name, loader)])
    seen = []
    import_watch.when_imported(name, seen.append)
    return importlib.import_module(name), seen


def test_a_watched_module_with_another_loader_goes_through_the_delegating_proxy(watch):
    loader = OneModuleLoader()
    module, seen = _import_watched(watch, "mutdemo_watch_proxy_t52", loader)
    assert seen == [module] and loader.executed == [module] and module.VALUE == 42
    proxy = module.__loader__
    assert isinstance(proxy, import_watch._LoaderProxy) and proxy._loader is loader
    assert proxy.tag == "one-module"  # any other attribute is the loader's
    assert proxy.create_module(module.__spec__) is None  # the import system makes the module
    assert import_watch.watched() == [] and import_watch._FINDER not in sys.meta_path


def test_the_proxy_hands_over_the_module_its_loader_creates(watch):
    module, seen = _import_watched(watch, "mutdemo_watch_create_t53", CreatingLoader())
    assert type(module) is CreatingLoader.Made and seen == [module] and module.VALUE == 42


def test_the_finder_passes_the_reload_target_on(watch):
    name = "mutdemo_watch_target_t54"
    finder = OneModuleFinder(name, None)  # no loader: nothing to wrap, the spec comes back as found
    watch.setattr(sys, "meta_path", [finder, *sys.meta_path])
    import_watch.when_imported(name, lambda module: None)
    target = types.ModuleType(name)
    spec = import_watch._FINDER.find_spec(name, ["some/path"], target)
    assert spec is not None and spec.name == name
    assert finder.calls == [(name, ["some/path"], target)]


def test_a_module_whose_callbacks_fired_executes_again_through_its_loader(watch, tmp_path):
    name = "mutdemo_watch_again_t55"
    (tmp_path / f"{name}.py").write_text("RUNS = globals().get('RUNS', 0) + 1\n")
    watch.syspath_prepend(str(tmp_path))
    seen = []
    import_watch.when_imported(name, seen.append)
    module = importlib.import_module(name)
    assert module.RUNS == 1 and seen == [module]
    module.__loader__.exec_module(module)  # the real loader, kept by the module
    assert module.RUNS == 2 and seen == [module]  # run again, callbacks not again


# --------------------------------------------------------------- status


def test_a_status_record_has_no_reason_unless_given():
    st = PluginStatus()
    st.set("p", "a.b", APPLIED)
    assert st.patches["p"].reason == ""


@needs_sglang
def test_the_summary_line_word_for_word():
    st = PluginStatus(sglang_version=INSTALLED)
    st.set("p1", "a.b", APPLIED)
    st.set("p2", "c.d", REGISTERED)
    st.set("p3", "e.f", APPLIED)
    assert st.summary() == f"SGLang {INSTALLED}: 2 applied, 1 registered"
    st.set("p4", "g.h", FAILED, "gone")
    st.set("p5", "i.j", FAILED, "renamed")
    assert st.summary() == (f"SGLang {INSTALLED}: 2 applied, 2 failed, 1 registered; "
                            "failed: g.h (gone), i.j (renamed)")


def test_the_summary_line_without_sglang():
    assert PluginStatus().summary() == "SGLang not installed: no patches"


# --------------------------------------------------------- definitions cache


def count_parses(monkeypatch) -> list:
    """Record every parse of the definitions cache (its own ``ast`` only: pytest parses too)."""
    parses = []

    def parse(*a, **k):
        parses.append(k.get("filename"))  # definitions() names the file
        return ast.parse(*a, **k)

    monkeypatch.setattr(definitions_cache, "ast", types.SimpleNamespace(**{**vars(ast), "parse": parse}))
    return parses


def test_the_cache_defaults_to_dot_cache_in_the_home_directory(monkeypatch, tmp_path):
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert definitions_cache.cache_dir() == str(tmp_path / ".cache" / "sglang-ascend-hybrid")
    monkeypatch.setenv("XDG_CACHE_HOME", "")  # empty: the default too
    assert definitions_cache.cache_path() == str(tmp_path / ".cache" / "sglang-ascend-hybrid"
                                                 / definitions_cache.FILE_NAME)


def test_the_cache_file_is_replaced_by_a_complete_dot_tmp_file_beside_it(cache, tmp_path, monkeypatch):  # noqa: F811
    real_replace = os.replace
    moves = []

    def replace(src, dst):
        content = json.loads(Path(src).read_text(encoding="utf-8"))  # complete before the rename
        moves.append((os.path.basename(src), os.path.dirname(src), content, dst))
        real_replace(src, dst)

    monkeypatch.setattr(definitions_cache, "os", types.SimpleNamespace(**{**vars(os), "replace": replace}))
    path = write(tmp_path / "m.py", "A = 1\n")
    definitions_cache.definitions(path)
    [(base, directory, content, dst)] = moves
    assert base.startswith(".targets-") and base.endswith(".tmp") and directory == str(cache.parent)
    assert dst == str(cache) and content == {"schema": definitions_cache.SCHEMA,
                                             "files": {path: content["files"][path]}}
    assert sorted(p.name for p in cache.parent.iterdir()) == [definitions_cache.FILE_NAME]


def test_the_cache_file_is_read_as_utf8_whatever_the_locale(cache, tmp_path, monkeypatch):  # noqa: F811
    """JSON is UTF-8: a cache file holding non-ASCII text unescaped is read under an ASCII locale."""
    path = write(tmp_path / "m.py", "café = 1\n")
    names = definitions_cache.definitions(path)
    assert names == {"café": None}
    data = json.loads(cache.read_text(encoding="utf-8"))
    cache.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    assert "café".encode() in cache.read_bytes()
    fresh_patch_state(monkeypatch)  # the next process
    parses = count_parses(monkeypatch)
    saved = locale.setlocale(locale.LC_CTYPE)
    try:
        locale.setlocale(locale.LC_CTYPE, "C")  # ASCII
        assert definitions_cache.definitions(path) == names
    finally:
        locale.setlocale(locale.LC_CTYPE, saved)
    assert parses == []  # read from the cache file, not parsed again


def _nested_classes(depth: int) -> str:
    return "".join(f"{'    ' * i}class C{i}:\n" for i in range(depth)) + f"{'    ' * depth}x = 1\n"


@pytest.mark.parametrize("depth, trusted", [(64, True), (65, False)])
def test_a_cached_entry_is_trusted_up_to_64_levels_of_classes(cache, tmp_path, monkeypatch,  # noqa: F811
                                                              depth, trusted):
    path = write(tmp_path / "deep.py", _nested_classes(depth))
    first = definitions_cache.definitions(path)
    fresh_patch_state(monkeypatch)  # the next process
    parses = count_parses(monkeypatch)
    assert definitions_cache.definitions(path) == first
    assert parses == ([] if trusted else [path])


# ---------------------------------------------------------------- data model


@pytest.mark.parametrize("path", ["", "   ", " a.b", "a.b ", "a.b\n", "a.b ; sglang>=1"])
def test_a_target_path_must_be_a_bare_dotted_name(path):
    with pytest.raises(ValueError, match="must be a dotted name"):
        patches.Target(path)


def test_a_malformed_patch_release_names_the_patch():
    with pytest.raises(ValueError) as err:
        _patch(name="bad-entry", releases="sglang>=1")
    assert str(err.value).startswith("releases of patch 'bad-entry' must be a version specifier")


def test_the_chunk_gdn_route_is_not_needed_with_its_target_present():
    route = registry._on_the_chunk_gdn_route("prefill goes through chunk_gdn")
    assert route == patches.Elsewhere(state=patches.NOT_NEEDED, why="prefill goes through chunk_gdn",
                                      route=(patches.CHUNK_GDN,), target_present=True)
    assert route.state == "not needed" and route.target_present is True
