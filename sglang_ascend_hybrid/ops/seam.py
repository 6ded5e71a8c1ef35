"""The one seam between the plugin and device kernels.

Every NPU kernel the plugin may call is looked up here by name, never imported
directly: ``torch.ops.npu.<name>`` (needs ``torch_npu``) or a Python entry of
``sgl_kernel_npu`` (``"sgl_kernel_npu.fla.mega_chunk_gdn:run_mega_chunk_gdn"``).
``torch_npu`` / ``sgl_kernel_npu`` are probed lazily, once, on the first lookup.

Tests and the CPU self-test put emulators behind the seam with
:func:`install_emulators` (CPU implementations with the real ops' contracts:
shape checks, dtypes and the same error messages).  An installed emulator wins
over the real op and serves tensors on any device.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import logging
import threading
from typing import Callable, Iterator, Mapping

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_emulators: dict[str, Callable] = {}
_probe: dict[str, bool] = {}
_resolved: dict[str, Callable | None] = {}


def package_available(name: str) -> bool:
    """Whether ``name`` (``torch_npu`` / ``sgl_kernel_npu``) imports; probed once per process."""
    with _lock:
        if name in _probe:
            return _probe[name]
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
            return getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError):
            return None
    if not package_available("torch_npu"):
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
    with _lock:
        if name in _emulators:
            return _emulators[name]
        if name in _resolved:
            return _resolved[name]
    fn = _resolve_real(name)
    with _lock:
        _resolved[name] = fn
    return fn


def available(name: str) -> bool:
    return lookup(name) is not None


def is_emulated(name: str) -> bool:
    with _lock:
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
    with _lock:
        saved = dict(_emulators)
        _emulators.update(ops)
    try:
        yield
    finally:
        with _lock:
            _emulators.clear()
            _emulators.update(saved)


def reset_probes() -> None:
    """Forget probe results (tests only)."""
    with _lock:
        _probe.clear()
        _resolved.clear()
