"""The pairing check itself: each SGLang import (:mod:`.sources`) against the sgl_kernel_npu found
on disk (:mod:`.kernel_package`), one :class:`PairingRecord` each, gathered in a
:class:`PairingReport` by :func:`check`.

Records name what they check and where they found it by module-qualified name
(``module:attr``): sgl-kernel-npu has two ``chunk_gated_delta_rule_npu`` (``fla.chunk``'s Triton
entry, which the plugin hooks, and ``fla.chunk_gated_delta_rule_npu``'s wrapper of
``torch.ops.npu.chunk_gated_delta_rule`` from sgl-kernel-npu PR #747), and a bare name would not
say which.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from sglang_ascend_hybrid import installed_source
from sglang_ascend_hybrid.tools.pairing.kernel_package import (
    _child,
    _locate,
    _Located,
    _Names,
    _names_of,
    _qualified,
    kernel_location,
)
from sglang_ascend_hybrid.tools.pairing.parsing import _os_reason
from sglang_ascend_hybrid.tools.pairing.sources import KernelImport, SkippedFile, _scan, sglang_dir

OK = "ok"
MISSING_MODULE = "missing module"
MISSING_SYMBOL = "missing symbol"
UNVERIFIABLE = "unverifiable"  # present, but its names cannot be read statically
NOT_INSTALLED = "sgl_kernel_npu not installed"


@dataclass(frozen=True)
class PairingRecord:
    imp: KernelImport
    state: str  # OK / MISSING_MODULE / MISSING_SYMBOL / UNVERIFIABLE
    detail: str = ""  # where it was found, or why it is missing / cannot be verified
    path: str | None = None  # the sgl_kernel_npu file (or directory) consulted; None when no module

    @property
    def missing(self) -> bool:
        return self.state in (MISSING_MODULE, MISSING_SYMBOL)


@dataclass(frozen=True)
class PairingReport:
    sglang_dir: str | None  # the sglang package directory scanned (None: sglang not found)
    kernel_origin: str | None  # sgl_kernel_npu's __init__.py / directory (None: not installed)
    records: tuple[PairingRecord, ...] = ()  # empty when sgl_kernel_npu is not installed
    imports: tuple[KernelImport, ...] = ()  # every import scanned
    skipped: tuple[SkippedFile, ...] = ()  # scanned files that could not be read or parsed

    @property
    def installed(self) -> bool:
        return self.kernel_origin is not None

    def missing(self, files: Iterable[str] | None = None) -> list[PairingRecord]:
        wanted = None if files is None else set(files)
        return [r for r in self.records if r.missing and (wanted is None or r.imp.file in wanted)]


def _check_one(imp: KernelImport, top: _Located) -> PairingRecord:
    """The state of one import.  Every name in the detail is module-qualified: a symbol
    ``imp.module:imp.symbol``, a binding's source ``module:attr``, a submodule ``module.sub``."""
    where = _locate(imp.module, top)
    if where is None:
        return PairingRecord(imp, MISSING_MODULE, f"no file for {imp.module} in {top.path}")

    def rec(state: str, detail: str) -> PairingRecord:
        return PairingRecord(imp, state, detail, where.path)

    what = imp.what
    if imp.symbol is None:
        return rec(OK, f"module {imp.module} present")
    # ``from M import S`` takes M's attribute S (what M's code binds) first, the submodule M.S only
    # when M binds no S; importing M.S anywhere rebinds M's S to that module.
    sub = _child(imp.symbol, where.dirs) if where.dirs else None
    submodule = f"{imp.module}.{imp.symbol}"
    if where.kind == "compiled":
        return rec(UNVERIFIABLE, f"{imp.module} is a compiled module: present, {what} unverifiable")
    if where.kind == "namespace":
        if sub is not None:
            return rec(OK, f"{what} is the submodule {submodule}")
        return rec(MISSING_SYMBOL, f"{imp.module} is a namespace package without {what}")
    try:
        found = installed_source.derived(where.path, "names", _names_of)
    except OSError as exc:
        found = _Names(frozenset(), f"its source cannot be read ({_os_reason(where.path, exc)})")
    if imp.symbol in found.names:
        origin = found.origins.get(imp.symbol)
        if origin is None or origin[0] == "def":
            detail = f"{what} defined in {imp.module}"
        else:
            detail = f"{what} bound from {_qualified(origin, imp.module, where.kind == 'package')}"
        if sub is not None:
            detail += (f"; the submodule {submodule} has the same name (importing it rebinds {what} "
                       f"to that module)")
        return rec(OK, detail)
    if sub is not None:
        return rec(OK, f"{what} is the submodule {submodule}")
    if found.dynamic is not None:
        return rec(UNVERIFIABLE, f"{found.dynamic}: {what} may be provided at import")
    if imp.symbol in found.type_only:
        return rec(MISSING_SYMBOL, f"{imp.module} binds {imp.symbol} only under `if TYPE_CHECKING:`, "
                                   f"so {what} is absent at runtime")
    return rec(MISSING_SYMBOL, f"{imp.module} does not define {what}")


def check(sglang_root: str | None = None, kernel_path: list[str] | None = None,
          files: Iterable[str] | None = None) -> PairingReport:
    """Check the sgl_kernel_npu imports of the sglang package at ``sglang_root``
    (default: the installed one; only those in ``files`` when given) against the
    sgl_kernel_npu found on ``kernel_path`` (default: :data:`KERNEL_PATH`, else
    sys.path).  Without sgl_kernel_npu the report has no records.  SGLang files that
    cannot be read or parsed are left out and listed in the report's ``skipped``."""
    root = sglang_root or sglang_dir()
    imports, skipped = _scan(root, files)
    top = kernel_location(kernel_path)
    records = tuple(_check_one(imp, top) for imp in imports) if top is not None else ()
    return PairingReport(root, top.path if top is not None else None, records, imports, skipped)
