"""The one-line messages of the pairing check: for missing imports (what to install, with
:mod:`.facts`' provenance), for sgl_kernel_npu not installed at all, and for what a model family
needs and the installed build lacks (:func:`family_problems`).
"""

from __future__ import annotations

from typing import Iterable

from sglang_ascend_hybrid.tools.pairing import report as _report
from sglang_ascend_hybrid.tools.pairing.facts import KNOWN
from sglang_ascend_hybrid.tools.pairing.families import FAMILY_FILES
from sglang_ascend_hybrid.tools.pairing.report import MISSING_MODULE, NOT_INSTALLED, PairingRecord, PairingReport
from sglang_ascend_hybrid.tools.pairing.sources import KernelImport


def _statement(record: PairingRecord) -> tuple:
    return record.imp.file, record.imp.line, record.imp.module, record.state


def message(*records: PairingRecord) -> str:
    """One line for missing import(s) of one statement (same SGLang file and line, same
    module, same state): the module, the SGLang file needing it, what to install."""
    if not records or any(not r.missing for r in records) or len({_statement(r) for r in records}) != 1:
        raise ValueError("message() takes missing imports of one statement (one file, line, module and state), got "
                         + "; ".join(f"{r.imp.file}:{r.imp.line} {r.imp.what} ({r.state})" for r in records))
    first, imp = records[0], records[0].imp
    names = ", ".join(r.imp.symbol for r in records if r.imp.symbol)
    fact = KNOWN.get(imp.module)
    known = f" ({fact.provided_by})" if fact else ""
    if first.state == MISSING_MODULE:
        what = f"{names} from {imp.module}" if names else imp.module
        problem = f"the installed sgl_kernel_npu has no module {imp.module}"
        fix = f"install an sgl-kernel-npu build that provides {imp.module}{known}"
    else:
        what = f"{names} from {imp.module}"
        problem = f"the installed {imp.module} ({first.path}) does not define {names}"
        fix = f"install an sgl-kernel-npu build whose {imp.module} defines {names}{known}"
    return (f"sgl-kernel-npu pairing: {imp.release}'s {imp.file}:{imp.line} imports {what}, but {problem}: "
            f"{fix}, or use an SGLang release that does not import it")


def message_of_each(records: Iterable[PairingRecord]) -> dict[PairingRecord, str]:
    """Each missing record of ``records`` -> the :func:`message` of its statement."""
    groups: dict[tuple, list[PairingRecord]] = {}
    for r in records:
        if r.missing:
            groups.setdefault(_statement(r), []).append(r)
    return {r: message(*group) for group in groups.values() for r in group}


def messages(records: Iterable[PairingRecord]) -> list[str]:
    """:func:`message` for each statement among the missing ``records``, in order."""
    return list(dict.fromkeys(message_of_each(records).values()))


def not_installed_message(imports: Iterable[KernelImport]) -> str:
    """One line for all of ``imports`` when sgl_kernel_npu is not installed at all."""
    imports = list(imports)
    files = sorted({i.file for i in imports})
    shown = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
    release = imports[0].release if imports else "SGLang"
    return (f"sgl-kernel-npu pairing: {NOT_INSTALLED} ({release}'s {shown} import it): "
            f"install the sgl-kernel-npu build paired with {release}")


def family_problems(kind: str, report: PairingReport | None = None) -> list[str]:
    """One-line messages for what family ``kind`` needs and the installed sgl_kernel_npu lacks
    (imports SGLang guards with try/except ImportError are not needed)."""
    if kind not in FAMILY_FILES:
        raise ValueError(f"family kind {kind!r} is not one of {sorted(FAMILY_FILES)}")
    files = FAMILY_FILES[kind]
    if report is None:
        report = _report.check(files=files)  # looked up at the call: a patch of report.check is seen
    if not report.installed:
        needed = [i for i in report.imports if i.file in files and not i.guarded]
        return [not_installed_message(needed)] if needed else []
    return messages(r for r in report.missing(files) if not r.imp.guarded)
