"""Shared test set-up.  Test-area fixtures live in each directory's conftest.py."""

from __future__ import annotations

import os
import re
import sys
import types
from pathlib import Path

import pytest

# Must be set before triton / torch are imported anywhere in the run.
os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

NPU_STUBS = Path(__file__).parent / "npu_stubs"
REPO_ROOT = Path(__file__).parent.parent


def forget_learnt_state() -> None:
    """Forget what the plugin learnt about the installed kernels: probe verdicts, and the refusals its
    kernel ladders learnt (GDN prefill and its q / k l2norm / decode / verify, short-conv prefill /
    update, with the conv tiling record, packed attention; the decode gates).  Only modules already imported are
    touched, so no test imports more than it asks for."""
    from sglang_ascend_hybrid.ops import seam

    seam.forget_verdicts()
    loaded = sys.modules.get
    if loaded("sglang_ascend_hybrid.ops.gdn.prefill.ladder") is not None:
        loaded("sglang_ascend_hybrid.ops.gdn.prefill.ladder").forget_refusals()
    if loaded("sglang_ascend_hybrid.ops.gdn.prefill.l2norm") is not None:
        loaded("sglang_ascend_hybrid.ops.gdn.prefill.l2norm").L2NORM.forget_refusals()
    if loaded("sglang_ascend_hybrid.ops.gdn.verify") is not None:
        loaded("sglang_ascend_hybrid.ops.gdn.verify").VERIFY.forget_refusals()
    if loaded("sglang_ascend_hybrid.ops.gdn.decode.ladder") is not None:
        loaded("sglang_ascend_hybrid.ops.gdn.decode.ladder").DECODE.forget_refusals()
    if loaded("sglang_ascend_hybrid.ops.gdn.decode.gates") is not None:
        loaded("sglang_ascend_hybrid.ops.gdn.decode.gates").GATES.forget_refusals()
    if loaded("sglang_ascend_hybrid.ops.conv.dispatch") is not None:
        loaded("sglang_ascend_hybrid.ops.conv.dispatch").reset_state()
    if loaded("sglang_ascend_hybrid.ops.attention.dispatch") is not None:
        loaded("sglang_ascend_hybrid.ops.attention.dispatch").LADDER.forget_refusals()


@pytest.fixture(autouse=True)
def _fresh_process_state(monkeypatch):
    """Every test starts and ends with no learnt state (a verdict or a refusal is a fact about the
    kernel a test installed, not about the next test's), and logs and counts probe runs afresh: its
    own log-once keys and probe run counts, the previous ones back after it.  The one place tests
    reset them."""
    from sglang_ascend_hybrid import logutil
    from sglang_ascend_hybrid.ops import probes

    monkeypatch.setattr(logutil, "_seen", set())
    monkeypatch.setattr(probes, "_runs", {})
    forget_learnt_state()
    yield
    forget_learnt_state()


@pytest.fixture
def npu_stub_packages(monkeypatch):
    """Make the test stubs of torch_npu / sgl_kernel_npu importable, so the real
    upstream Ascend backend modules import on a CPU.  The seam probes the packages afresh, and
    what it found before is back afterwards, so nothing leaks into other tests."""
    from tests.support.fresh_state import fresh_seam_lookups

    monkeypatch.syspath_prepend(str(NPU_STUBS))
    fresh_seam_lookups(monkeypatch)
    yield NPU_STUBS
    for name in [m for m in sys.modules if m == "torch_npu" or m.startswith("torch_npu.")
                 or m == "sgl_kernel_npu" or m.startswith("sgl_kernel_npu.")]:
        sys.modules.pop(name, None)


# ----------------------------------------------------- per-release routes
# A test that exercises the upstream target of a patch (marked
# ``@pytest.mark.patch_route("<patch name>")``, or using one of these fixtures,
# which hand tests that target) cannot run on an SGLang release where the patch
# is "not needed" (the release takes another route) or "unavailable" (no
# mechanism for the fix): the target or its mechanism does not exist there.
# Such tests are deselected on that release, and the run says so in one line per
# patch; tests/integration/test_compat_table.py and test_patches_registry.py
# verify on every release what the patch is there (and the other route's symbols).
ROUTE_FIXTURES = {
    "ascend_gdn": "gdn-prefill-ladder",  # AscendGDNAttnBackend.chunk_gdn
    "ascend_fa": "packed-attention-one-sided",  # the diffusion runtime's HookRegistry
}
_OFF_ROUTE: dict[str, tuple[str, list[str]]] = {}


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "patch_route(name): exercises the upstream target of patch `name`; deselected on a "
        "release where that patch is not needed or unavailable")
    config.addinivalue_line(
        "markers", "base_release_only: checks something no SGLang release changes (a benchmark script's "
        "output format); runs in the base release's environment (constraints.txt) only, for CI time")
    config.addinivalue_line(
        "markers", "runtime: the runtime tier -- SGLang's real Engine / server with the plugin on the emulated "
        "Ascend device (tests/runtime); select with -m runtime, leave out with -m 'not runtime'")
    if config.getoption("dist", "no") == "loadgroup" and not xdist_can_group():
        raise pytest.UsageError(
            f"pytest-xdist's --dist loadgroup does not group on pytest {pytest.__version__} (it suffixes "
            "item._nodeid with '@group', which this pytest's Node.nodeid no longer reads): every test of an "
            "xdist_group would start its own Engine / model runs. Install the pytest requirements/test.txt allows")


def xdist_can_group() -> bool:
    """Whether pytest-xdist's ``--dist loadgroup`` can group tests on the installed pytest: it renames a
    worker's items by assigning ``item._nodeid = nodeid + "@group"``, which pytest 9.2's ``Node.nodeid``
    (derived from a structured id) no longer reads.  The runtime tier and the whole-model tests share one
    Engine / model run per configuration through the groups; lost, the suite takes several times as long."""
    renamed = types.SimpleNamespace(_nodeid="probe@group")  # what xdist's rename leaves on an item
    try:
        return pytest.Item.nodeid.fget(renamed) == "probe@group"
    except AttributeError:
        return False


def _is_base_release() -> bool:
    """Whether the installed SGLang is the release constraints.txt pins (the base environment)."""
    import importlib.metadata
    from pathlib import Path

    pins = (Path(__file__).resolve().parents[1] / "constraints.txt").read_text().splitlines()
    base = next(line.split("==", 1)[1].strip() for line in pins if line.startswith("sglang=="))
    try:
        return importlib.metadata.version("sglang") == base
    except importlib.metadata.PackageNotFoundError:
        return False


_BASE_ONLY: list = []
# Folders whose tests are release-independent as a whole (CPU emulators of NPU ops, benchmark scripts):
# they run in the base release's environment only, like base_release_only tests, for CI time.
BASE_ONLY_FOLDERS = ("tests/emulators/", "tests/benchmarks/")


# Op-level tests (tests/ops/) run only the plugin's ops on emulators: release-independent, except a
# module that reaches SGLang's code -- it imports an upstream ``sglang.`` module (SGLang's Triton kernels
# as references, its GDN backend) or the GDN decode ladder, whose contract reads the installed SGLang's source.
OPS_FOLDER = "tests/ops/"
_REACHES_SGLANG = re.compile(r"\bsglang\.(srt|kernels|multimodal_gen|jit_kernel)\b|\bgdn\.decode\b"
                             r"|\bgdn import decode\b|installed_decode_entry")
_release_dependent_files: dict[str, bool] = {}


def _reaches_sglang(path: Path) -> bool:
    key = str(path)
    if key not in _release_dependent_files:
        _release_dependent_files[key] = bool(_REACHES_SGLANG.search(path.read_text(encoding="utf-8")))
    return _release_dependent_files[key]


# The in-process harness's negative controls (tests/e2e, named ``test_negative_control_*`` or
# ``test_broken_*``) break the plugin on purpose and prove that a comparison fails: a property of the
# comparison, which no SGLang release changes.  They run in the base release only, for CI time; the positive
# tests beside them run on every release.  (A negative control of a release-specific route is named otherwise
# and keeps running where its route exists.)
E2E_FOLDER = "tests/e2e/"


def _is_e2e_negative_control(item) -> bool:
    name = getattr(item, "originalname", item.name)
    return item.nodeid.startswith(E2E_FOLDER) and (name.startswith("test_negative_control")
                                                    or name.startswith("test_broken_"))


def _base_release_only(item) -> bool:
    if item.get_closest_marker("base_release_only") is not None or item.nodeid.startswith(BASE_ONLY_FOLDERS):
        return True
    if _is_e2e_negative_control(item):
        return True
    return item.nodeid.startswith(OPS_FOLDER) and not _reaches_sglang(Path(str(item.fspath)))


def pytest_collection_modifyitems(config, items):
    from sglang_ascend_hybrid import patches

    keep, drop = [], []
    base = None
    for item in items:
        if _base_release_only(item):
            base = _is_base_release() if base is None else base
            if not base:
                drop.append(item)
                _BASE_ONLY.append(item.nodeid)
                continue
        names = [m.args[0] for m in item.iter_markers("patch_route")]
        names += [ROUTE_FIXTURES[f] for f in getattr(item, "fixturenames", ()) if f in ROUTE_FIXTURES]
        off = [(n, patches.release_state(patches.by_name(n))) for n in names]
        off = [(n, st) for n, st in off if st is not None]
        if not off:
            keep.append(item)
            continue
        if any(st[0] not in (patches.NOT_NEEDED, patches.UNAVAILABLE) for _, st in off):
            keep.append(item)  # a failure on this release: let the test run and fail
            continue
        drop.append(item)
        for n, st in off:
            _OFF_ROUTE.setdefault(n, (f"{st[0]}: {st[1]}", []))[1].append(item.nodeid)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_terminal_summary(terminalreporter):
    """One line per patch whose tests this release deselects (with pytest-xdist the
    workers deselect, so the controller names the patches without a count)."""
    from sglang_ascend_hybrid import patches

    if _BASE_ONLY:
        terminalreporter.write_line(f"deselected {len(_BASE_ONLY)} base_release_only tests (release-independent; "
                                    "they run in the base release's environment)")
    names = set(ROUTE_FIXTURES.values()) | set(_OFF_ROUTE)
    for name in sorted(names):
        st = patches.release_state(patches.by_name(name))
        if st is None or st[0] not in (patches.NOT_NEEDED, patches.UNAVAILABLE):
            continue
        count = f"{len(_OFF_ROUTE[name][1])} " if name in _OFF_ROUTE else ""
        terminalreporter.write_line(f"deselected {count}tests of patch {name} ({st[0]}: {st[1]})")
