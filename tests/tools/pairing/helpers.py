"""Helpers of the pairing tests: SGLang's sgl_kernel_npu imports read back with a regex, fake
sgl_kernel_npu and sglang trees built in tmp_path, the expected messages, doctor's section.

Expectations come from the installed SGLang's source (never a literal release): the
imports of the files each family needs are read back here with a regex and the fakes
provide exactly them, less what a test takes away."""

from __future__ import annotations

import io
import re
from pathlib import Path

from sglang_ascend_hybrid.patches.releases import installed_version
from sglang_ascend_hybrid.tools import doctor, pairing

DECODE_OPTIMIZED = "sgl_kernel_npu.fla.fused_sigmoid_gating_recurrent_decode_optimized"
INSTALL_TAIL = ", or use an SGLang release that does not import it"
IMPORT_RE = re.compile(r"^[ \t]*(?:from[ \t]+(sgl_kernel_npu[\w.]*)[ \t]+import\b|import[ \t]+(sgl_kernel_npu[\w.]*))",
                       re.M)


def sglang_root() -> Path:
    return Path(pairing.sglang_dir())


def regex_imports(rel: str) -> set[tuple[int, str]]:
    """(line, module) of each sgl_kernel_npu import statement in SGLang's ``rel``, by regex."""
    text = (sglang_root().parent / rel).read_text(encoding="utf-8")
    return {(text.count("\n", 0, m.start()) + 1, m.group(1) or m.group(2)) for m in IMPORT_RE.finditer(text)}


def family_imports(kind: str) -> list[pairing.KernelImport]:
    return list(pairing.scan_sglang(files=pairing.FAMILY_FILES[kind]))


def decode_kernel_import() -> pairing.KernelImport:
    """The installed gdn_triton.py's NPU decode-kernel import (whichever module this release uses)."""
    found = [i for i in pairing.scan_sglang(files=[pairing.GDN_TRITON])
             if i.symbol and "fused_sigmoid_gating_delta_rule_update" in i.symbol]
    assert len(found) == 1, found
    return found[0]


def write_kernel_tree(root: Path, imports, drop_modules=(), drop_symbols=(), extra=None) -> Path:
    """A fake sgl_kernel_npu under ``root`` defining every (module, symbol) of ``imports``
    except ``drop_modules`` (no file) and ``drop_symbols`` ((module, symbol) left out);
    ``extra`` maps a relative path to file text, written last."""
    wanted: dict[str, set[str]] = {}
    for imp in imports:
        if imp.module not in drop_modules:
            wanted.setdefault(imp.module, set())
            if imp.symbol and (imp.module, imp.symbol) not in drop_symbols:
                wanted[imp.module].add(imp.symbol)
    parents = {".".join(m.split(".")[:i]) for m in wanted for i in range(1, m.count(".") + 1)}
    (root / "sgl_kernel_npu").mkdir(parents=True, exist_ok=True)
    for module in sorted(set(wanted) | parents | {"sgl_kernel_npu"}):
        parts = module.split(".")
        path = root.joinpath(*parts, "__init__.py") if module in parents or len(parts) == 1 \
            else root.joinpath(*parts[:-1], parts[-1] + ".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"{name} = None\n" for name in sorted(wanted.get(module, ()))))
    for rel, text in (extra or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def states(report) -> dict[tuple[str, str | None], str]:
    return {(r.imp.module, r.imp.symbol): r.state for r in report.records}


def expected_missing_module(imp: pairing.KernelImport, names: str) -> str:
    fact = pairing.KNOWN.get(imp.module)
    known = f" ({fact.provided_by})" if fact else ""
    return (f"sgl-kernel-npu pairing: SGLang {installed_version('sglang')}'s {imp.file}:{imp.line} imports "
            f"{names} from {imp.module}, but the installed sgl_kernel_npu has no module {imp.module}: install an "
            f"sgl-kernel-npu build that provides {imp.module}{known}{INSTALL_TAIL}")


def fake_sglang(tmp_path: Path, files: dict[str, str]) -> Path:
    """A fake sglang package under ``tmp_path / 'sg'`` holding ``files`` (path below the package -> text)."""
    sg = tmp_path / "sg" / "sglang"
    for rel, text in files.items():
        (sg / rel).parent.mkdir(parents=True, exist_ok=True)
        (sg / rel).write_text(text)
    return sg


def one_kernel(tmp_path: Path) -> Path:
    return write_kernel_tree(tmp_path / "k", [], extra={"sgl_kernel_npu/fla/chunk.py": "a = 1\nb = 2\n"})


def render_pairing() -> str:
    out = io.StringIO()
    doctor.render_pairing(doctor.collect_pairing(), out.write)
    return out.getvalue()
