"""The one seam between the plugin and device kernels.

Every NPU kernel the plugin may call is looked up here by name, never imported
directly: ``torch.ops.npu.<name>`` or a Python entry of ``sgl_kernel_npu``
(``"sgl_kernel_npu.fla.mega_chunk_gdn:run_mega_chunk_gdn"``).
``torch_npu`` / ``sgl_kernel_npu`` are probed lazily, once, on the first lookup
(never at plugin discovery).

Not every ``torch.ops.npu`` op comes from torch_npu: ``chunk_gated_delta_rule``,
``recurrent_gated_delta_rule`` and ``causal_conv1d`` are registered by
sgl-kernel-npu (``csrc/pytorch_extensions.cpp``, ``TORCH_LIBRARY_FRAGMENT(npu, m)``
inside ``#ifdef SGL_KERNEL_ENABLE_A3_ONLY_OPS``, sgl-project/sgl-kernel-npu
f425bdf1) and exist only once ``sgl_kernel_npu`` has been imported
(:data:`TORCH_OPS_OWNER`); the lookup imports the owner first, so no "absent" is
cached before that import.  A Python entry that only wraps such an op
(:data:`PYTHON_ENTRY_TORCH_OPS`, e.g. ``run_mega_chunk_gdn``) is reported absent
when, after its module imported, the op it calls is not registered (Ascend 950
builds of sgl-kernel-npu).

Device facts the capability tables depend on (the chip generation, the
installed sgl-kernel-npu version) also come from here (:func:`chip_generation`,
:func:`kernel_package_version`), with :func:`install_device_facts` as the CPU
stand-in for tests and the CPU self-test.

Tests and the CPU self-test put emulators behind the seam with
:func:`install_emulators` (CPU implementations with the real ops' contracts:
shape checks, dtypes and the same error messages).  An installed emulator wins
over the real op and serves tensors on any device.  :func:`installed_emulators`
reads back what is installed; :func:`install_real_kernels` and
:func:`install_package_probes` are the tests' stand-ins for a resolved real
kernel and for a package probe's result.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import importlib.util
import logging
import threading
import types
from typing import Callable, Iterator, Mapping, Optional

from sglang_ascend_hybrid.ops.decisions import changed as _changed
from sglang_ascend_hybrid.ops.errors import bad_input

logger = logging.getLogger(__name__)

_lock = threading.Lock()
# Replaced, never mutated, by install_emulators (under the lock): a serving call reads it without the
# lock (one dict lookup per seam call on the serving path) and always sees one whole table.
_emulators: Mapping[str, Callable] = types.MappingProxyType({})
_probe: dict[str, bool] = {}
_resolved: dict[str, Callable | None] = {}

# torch.ops.npu ops registered by a package other than torch_npu: sgl-kernel-npu's
# ``TORCH_LIBRARY_FRAGMENT(npu, m)`` (csrc/pytorch_extensions.cpp at f425bdf1).
TORCH_OPS_OWNER = {
    "chunk_gated_delta_rule": "sgl_kernel_npu",
    "recurrent_gated_delta_rule": "sgl_kernel_npu",
    "causal_conv1d": "sgl_kernel_npu",
    "mega_chunk_gdn": "sgl_kernel_npu",
}

# Python entries of a kernel package that are thin wrappers of a registered torch.ops.npu op:
# the module imports on every build, but the entry works only where the op is registered.
# sgl-project/sgl-kernel-npu f425bdf1: ``fla/mega_chunk_gdn.py`` calls ``torch.ops.npu.mega_chunk_gdn``
# (line ~155), whose host, kernel and registration are compiled only with
# SGL_KERNEL_ENABLE_A3_ONLY_OPS (csrc/CMakeLists.txt ~61 and ~171-175, csrc/pytorch_extensions.cpp
# ~129 and ~274), which CMakeLists.txt turns OFF for ``ascend950*``: there the wrapper imports and
# raises AttributeError when called.  The seam reports such an entry absent.
PYTHON_ENTRY_TORCH_OPS = {
    "sgl_kernel_npu.fla.mega_chunk_gdn:run_mega_chunk_gdn": "mega_chunk_gdn",
}

# Chip generations the contracts distinguish (fp32 GDN states only on Ascend 950; the
# sgl-kernel-npu ops of TORCH_OPS_OWNER are not built for Ascend 950).
CHIPS = ("A2", "A3", "950")
_UNSET = object()
_facts: dict[str, object] = {}


def package_available(name: str) -> bool:
    """Whether ``name`` (``torch_npu`` / ``sgl_kernel_npu``) imports; probed once per process."""
    found = _probe.get(name)  # a dict read whole (writers hold the lock)
    if found is not None:
        return found
    ok = False
    if importlib.util.find_spec(name) is not None:
        try:
            importlib.import_module(name)
            ok = True
        except Exception as exc:  # a broken install must not take the server down
            logger.info("sglang-ascend-hybrid: %s is installed but does not import (%s); "
                        "its kernels are treated as absent", name, exc)
    with _lock:
        _probe[name] = ok
    return ok


def _resolve_real(name: str) -> Callable | None:
    if ":" in name:  # python entry of a kernel package: "pkg.module:attr"
        module_name, attr = name.split(":", 1)
        if not package_available(module_name.split(".")[0]):
            return None
        try:
            fn = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError):
            return None
        needed = PYTHON_ENTRY_TORCH_OPS.get(name)
        if needed is not None and _resolve_real(needed) is None:  # checked after importing the owner
            logger.info("sglang-ascend-hybrid: %s imports, but torch.ops.npu.%s is not registered in this "
                        "build (sgl-kernel-npu builds for Ascend 950 leave it out); treating %s as absent",
                        name, needed, name)
            return None
        return fn
    if not package_available("torch_npu"):
        return None
    owner = TORCH_OPS_OWNER.get(name)
    if owner is not None and not package_available(owner):  # importing it registers the op
        return None
    import torch

    namespace = getattr(torch.ops, "npu", None)
    if namespace is None:
        return None
    try:
        return getattr(namespace, name)
    except (AttributeError, RuntimeError):
        return None


def lookup(name: str) -> Callable | None:
    """The callable behind op ``name``: an installed emulator, else the real kernel, else None."""
    emulator = _emulators.get(name)
    if emulator is not None:
        return emulator
    resolved = _resolved.get(name, _UNSET)
    if resolved is not _UNSET:
        return resolved
    fn = _resolve_real(name)
    with _lock:
        _resolved[name] = fn
    return fn


def available(name: str) -> bool:
    return lookup(name) is not None


def is_emulated(name: str) -> bool:
    return name in _emulators


def serves(name: str, *tensors) -> bool:
    """Whether op ``name`` can run on these tensors: an emulator serves any device,
    a real NPU kernel only NPU tensors."""
    if is_emulated(name):
        return True
    if not all(getattr(t, "device", None) is not None and t.device.type == "npu" for t in tensors):
        return False
    return available(name)


def call(name: str, *args, **kwargs):
    fn = lookup(name)
    if fn is None:
        raise RuntimeError(f"device op {name!r} is not available on this machine")
    return fn(*args, **kwargs)


@contextlib.contextmanager
def install_emulators(ops: Mapping[str, Callable]) -> Iterator[None]:
    """Put ``ops`` (name -> CPU emulator) behind the seam for the duration of the block."""
    global _emulators
    with _lock:
        saved = _emulators
        _emulators = types.MappingProxyType({**saved, **ops})
    _changed()
    try:
        yield
    finally:
        with _lock:
            _emulators = saved
        _changed()


def installed_emulators() -> Mapping[str, Callable]:
    """What :func:`install_emulators` has put behind the seam now (name -> emulator): a read-only
    snapshot, so a caller can wrap each one and install the wrappers over them (graph-capture tests)."""
    return _emulators


@contextlib.contextmanager
def _overlay(table: dict, entries: Mapping) -> Iterator[None]:
    """For the block, ``entries`` over ``table`` (under the lock); afterwards the entries it had
    before are back and the ones it lacked are gone."""
    with _lock:
        saved = {name: table[name] for name in entries if name in table}
        table.update(entries)
    _changed()
    try:
        yield
    finally:
        with _lock:
            for name in entries:
                table.pop(name, None)
            table.update(saved)
        _changed()


def install_real_kernels(ops: Mapping[str, Callable]):
    """Context manager: for the block, take ``ops`` (name -> callable) as the resolved *real* kernels
    (tests): unlike an emulator, such a kernel serves NPU tensors only (:func:`serves`) and
    :func:`is_emulated` is False."""
    return _overlay(_resolved, ops)


def install_package_probes(results: Mapping[str, bool]):
    """Context manager: for the block, take ``results`` (package -> whether it imports) as the probe
    results of :func:`package_available` (tests: a package that is installed but broken, or absent)."""
    return _overlay(_probe, results)


# --------------------------------------------------------------------------- device facts


def classify_chip(device_name: str) -> Optional[str]:
    """Chip generation from the device name torch_npu reports (``Ascend910B3`` -> A2,
    ``Ascend910_9382`` -> A3, ``Ascend950PR`` -> 950); None when unrecognised."""
    name = device_name.replace(" ", "").lower()
    if "950" in name:
        return "950"
    if "910_93" in name or "910c" in name:
        return "A3"
    if "910b" in name:
        return "A2"
    return None


_METADATA_VERSION = " sgl-kernel-npu metadata version"  # a key of _resolved no op name can take


_CHIP_READ = " chip generation read from torch_npu"  # a key of _resolved no op name can take


def chip_generation() -> Optional[str]:
    """``"A2"``, ``"A3"``, ``"950"``, or None (no NPU, or a chip the contracts do not cover).  Read from
    torch_npu once per process (serving predicates ask on every call); the device facts override it."""
    chip = _facts.get("chip", _UNSET)   # a dict read whole (writers hold the lock)
    if chip is not _UNSET:
        return chip  # type: ignore[return-value]
    chip = _resolved.get(_CHIP_READ, _UNSET)
    if chip is not _UNSET:
        return chip  # type: ignore[return-value]
    if not package_available("torch_npu"):
        return None
    try:
        import torch_npu  # noqa: F401  (probed above; never imported at module top)

        chip = classify_chip(torch_npu.npu.get_device_name())
    except Exception as exc:  # no visible device, or an API change: said once, the answer kept
        logger.info("sglang-ascend-hybrid: could not read the NPU device name (%s)", exc)
        chip = None
    with _lock:
        _resolved[_CHIP_READ] = chip  # type: ignore[assignment]
    return chip


def kernel_package_version() -> Optional[str]:
    """The installed sgl-kernel-npu version string (from metadata, read once; no import), or None."""
    with _lock:
        if "sgl_kernel_npu_version" in _facts:
            return _facts["sgl_kernel_npu_version"]  # type: ignore[return-value]
        if _METADATA_VERSION in _resolved:
            return _resolved[_METADATA_VERSION]  # type: ignore[return-value]
    found = None
    for dist in ("sgl-kernel-npu", "sgl_kernel_npu"):
        try:
            found = importlib.metadata.version(dist)
            break
        except importlib.metadata.PackageNotFoundError:
            continue
    with _lock:
        _resolved[_METADATA_VERSION] = found  # type: ignore[assignment]
    return found


@contextlib.contextmanager
def install_device_facts(*, chip=_UNSET, sgl_kernel_npu_version=_UNSET) -> Iterator[None]:
    """CPU stand-in for the device facts (tests, ``selftest --device cpu``)."""
    if chip is not _UNSET and chip is not None and chip not in CHIPS:
        raise bad_input("chip", repr(chip), f"one of {CHIPS} or None", op="install_device_facts")
    with _lock:
        saved = dict(_facts)
        if chip is not _UNSET:
            _facts["chip"] = chip
        if sgl_kernel_npu_version is not _UNSET:
            _facts["sgl_kernel_npu_version"] = sgl_kernel_npu_version
    _changed()
    try:
        yield
    finally:
        with _lock:
            _facts.clear()
            _facts.update(saved)
        _changed()


# --------------------------------------------------------------------------- probe verdicts and capture

# Verdicts of the probes (``ops/probes.py``): what an installed kernel was found to do, a device fact
# like the chip generation.  Keyed by (probe name, signature text).
_verdicts: dict[tuple[str, str], object] = {}
_capture = threading.local()


def record_verdict(probe: str, signature: str, verdict: object) -> None:
    with _lock:
        _verdicts[(probe, signature)] = verdict
    _changed()


def verdict_of(probe: str, signature: str):
    """The recorded verdict of ``probe`` for ``signature``, or None when it never ran."""
    with _lock:
        return _verdicts.get((probe, signature))


def recorded_verdicts() -> list:
    with _lock:
        return list(_verdicts.values())


def forget_verdicts() -> None:
    """Forget every probe verdict (tests; a reloaded kernel)."""
    with _lock:
        _verdicts.clear()
    _changed()


# Capture regions open in any thread: while none is, no thread's depth is read (a thread-local read costs
# as much as the rest of capturing() on a serving call)
_regions_open = 0


@contextlib.contextmanager
def capture_region() -> Iterator[None]:
    """Marks a graph-capture region on this thread (the plugin's CPU tests drive SGLang's graph-runner
    sequence inside it; on an NPU :func:`capturing` also asks torch_npu)."""
    global _regions_open
    depth = getattr(_capture, "depth", 0)
    with _lock:
        _regions_open += 1
    _capture.depth = depth + 1
    try:
        yield
    finally:
        _capture.depth = depth
        with _lock:
            _regions_open -= 1


def capturing() -> bool:
    """Whether this thread is inside a graph capture: a :func:`capture_region`, or (with torch_npu
    importable) the current NPU stream is capturing.  Probes never run then."""
    if _regions_open and getattr(_capture, "depth", 0):
        return True
    if not package_available("torch_npu"):
        return False
    try:
        import torch

        return bool(torch.npu.is_current_stream_capturing())
    except Exception:  # an API change: assume capturing (a probe may wait; a broken capture may not)
        return True
