"""The sgl-kernel-npu pairing check: does the installed ``sgl_kernel_npu`` provide
every module and name the installed SGLang imports from it?

SGLang's Ascend code imports ``sgl_kernel_npu`` modules by name, and releases move
to new kernels before sgl-kernel-npu tags them (e.g. SGLang 0.5.21+'s
``gdn_triton.py`` imports ``sgl_kernel_npu.fla.fused_sigmoid_gating_recurrent_decode_optimized``,
see :data:`KNOWN`).  With a build that lacks one, SGLang's Ascend GDN backend does
not even import, and the error is an ``ImportError`` deep in backend construction.

Everything here is static, like :mod:`sglang_ascend_hybrid.patches`: SGLang's
sources are parsed (never imported beyond locating the top ``sglang`` package),
``sgl_kernel_npu`` is located on disk (never imported), and each
``from sgl_kernel_npu.X import Y`` / ``import sgl_kernel_npu.X`` is checked against
the file that would define it.  Parses are cached by (path, size, mtime).

A scanned SGLang file that cannot be read (a dangling or looping symlink, no permission)
or parsed (a syntax error, an expression nested too deeply for Python's parser) is
skipped and listed in :attr:`PairingReport.skipped` with the reason; the rest of the
report stands.  Names bound only under ``if TYPE_CHECKING:`` in an sgl_kernel_npu file
count as absent (they are not there at runtime).  Records name what they check and
where they found it by module-qualified name (``module:attr``): sgl-kernel-npu has two
``chunk_gated_delta_rule_npu`` (``fla.chunk``'s Triton entry, which the plugin hooks,
and ``fla.chunk_gated_delta_rule_npu``'s wrapper of ``torch.ops.npu.chunk_gated_delta_rule``
from sgl-kernel-npu PR #747), and a bare name would not say which.

:data:`FAMILY_FILES` says which SGLang files' imports each model family needs
when SGLang builds its attention backend on NPU; :func:`enforce_for_model` (called
from the ``attn_backend_wrapper`` hook) stops strict (``ascend_hybrid``) startup on
a missing one and logs one WARNING per missing import otherwise.  ``doctor`` prints
:func:`check`'s records.  No torch, torch_npu or sgl_kernel_npu import.
"""

from __future__ import annotations

import ast
import functools
import logging
import os
import stat
from dataclasses import dataclass, field
from importlib.machinery import BYTECODE_SUFFIXES, EXTENSION_SUFFIXES, PathFinder
from typing import Iterable

from sglang_ascend_hybrid import installed_source
from sglang_ascend_hybrid.logutil import log_once
from sglang_ascend_hybrid.model_families import ConfigError, family

logger = logging.getLogger(__name__)

KERNEL_PACKAGE = "sgl_kernel_npu"

OK = "ok"
MISSING_MODULE = "missing module"
MISSING_SYMBOL = "missing symbol"
UNVERIFIABLE = "unverifiable"  # present, but its names cannot be read statically
NOT_INSTALLED = "sgl_kernel_npu not installed"

# Subtrees of the sglang package that are scanned (SGLang's runtime, its kernel
# library and the diffusion runtime; not its tests or benchmarks).
SCANNED_SUBTREES = ("srt", "kernels", "multimodal_gen")

# Overrides for tests (None: the installed sglang package / sys.path).
SGLANG_DIR: str | None = None
KERNEL_PATH: list[str] | None = None

# ------------------------------------------------------------ facts (with sources)

_SKN = "sgl-project/sgl-kernel-npu"
_SKN_PY = "python/sgl_kernel_npu/sgl_kernel_npu"


@dataclass(frozen=True)
class KernelFact:
    """Where an ``sgl_kernel_npu`` module first appeared, as read from sgl-kernel-npu's history."""

    module: str
    provided_by: str  # the phrase used in messages
    source: str  # repository, path, commit(s) read


# Read in a snapshot of sgl-project/sgl-kernel-npu whose newest tag is 2026.08.21
# (65 tags; main and tag 2026.08.21 at f425bdf1e191a7682296d3b2ed0b927d4e37d671).
_TAGS = "absent from all 65 tags through 2026.08.21 and from main at f425bdf1"
KNOWN: dict[str, KernelFact] = {f.module: f for f in (
    KernelFact(
        module="sgl_kernel_npu.fla.fused_sigmoid_gating_recurrent_decode_optimized",
        provided_by="first in sgl-kernel-npu PR #740, not in any tag up to 2026.08.21",
        source=f"{_SKN} {_SKN_PY}/fla/fused_sigmoid_gating_recurrent_decode_optimized.py: added by 5300df95a0eb"
               "63e3402309fb634216176b7c0557 (refs/pull/740/head a18c0c2f4b1c28c12e71b6dc9e9ea5fce766fc44), defines "
               f"fused_sigmoid_gating_delta_rule_update_decode_npu; {_TAGS}",
    ),
    KernelFact(
        module="sgl_kernel_npu.activation.fused_sigmoid_mul",
        provided_by="first in sgl-kernel-npu PR #740, not in any tag up to 2026.08.21",
        source=f"{_SKN} {_SKN_PY}/activation/fused_sigmoid_mul.py: added by 5300df95a0eb63e3402309fb634216176b7c0557 "
               f"(refs/pull/740/head), defines fused_sigmoid_mul and fused_sigmoid_mul_broadcast; {_TAGS}",
    ),
    KernelFact(
        module="sgl_kernel_npu.sparsity_driven_kv_offload",
        provided_by="first in sgl-kernel-npu PR #636, not in any tag up to 2026.08.21",
        source=f"{_SKN} {_SKN_PY}/sparsity_driven_kv_offload/__init__.py: added by edb5fd23b226f5dcd10885ecc0135e2b6"
               f"e1ba1ab (refs/pull/636/head df5fdc498624bf4fe4dcfebc2b15788689c54fd8); {_TAGS}",
    ),
    KernelFact(
        module="sgl_kernel_npu.fla.fused_sigmoid_gating_recurrent",
        provided_by="in every sgl-kernel-npu tag from 20250913 to 2026.08.21",
        source=f"{_SKN} {_SKN_PY}/fla/fused_sigmoid_gating_recurrent.py defines "
               "fused_sigmoid_gating_delta_rule_update_npu (the decode kernel SGLang 0.5.20's gdn_triton.py imports) "
               "in every tag from 20250913 to 2026.08.21 "
               "(f425bdf1e191a7682296d3b2ed0b927d4e37d671)",
    ),
)}

# ------------------------------------------------------------ families

_NPU_ATTN = "sglang/srt/hardware_backend/npu/attention/"
GDN_TRITON = "sglang/srt/layers/attention/linear/kernels/gdn_triton.py"
GDN_BACKEND = "sglang/srt/layers/attention/linear/gdn_backend.py"
ASCEND_GDN_BACKEND = _NPU_ATTN + "ascend_gdn_backend.py"
ASCEND_HYBRID_LINEAR_BACKEND = _NPU_ATTN + "ascend_hybrid_linear_attn_backend.py"
ASCEND_BACKEND = _NPU_ATTN + "ascend_backend.py"

# Family kind (model_families.family) -> the SGLang files whose sgl_kernel_npu
# imports run when SGLang builds that family's attention backend on NPU: the
# Ascend attention backend for the full-attention layers, the Ascend hybrid
# linear-attention wrapper, and for GDN the Ascend GDN backend with the GDN kernel
# dispatcher it imports (gdn_backend.py) and that one's Triton kernels (gdn_triton.py).
FAMILY_FILES: dict[str, tuple[str, ...]] = {
    "gdn": (GDN_TRITON, GDN_BACKEND, ASCEND_GDN_BACKEND, ASCEND_HYBRID_LINEAR_BACKEND, ASCEND_BACKEND),
    "short_conv": (ASCEND_HYBRID_LINEAR_BACKEND, ASCEND_BACKEND),
}


def families_needing(file: str) -> tuple[str, ...]:
    """The family kinds whose attention backend needs ``file``'s imports."""
    return tuple(kind for kind, files in FAMILY_FILES.items() if file in files)


def model_family(model_config) -> str | None:
    """The family kind (:func:`sglang_ascend_hybrid.model_families.family`) of SGLang's
    ``model_config``, from its hf config's (or text config's) model_type; None for others."""
    for cfg in (getattr(model_config, "hf_config", None), getattr(model_config, "hf_text_config", None)):
        try:
            return family({"model_type": getattr(cfg, "model_type", None)})
        except ConfigError:
            continue
    return None


# ------------------------------------------------------------ records


@dataclass(frozen=True)
class KernelImport:
    """One import of sgl_kernel_npu in SGLang's source."""

    file: str  # relative to the directory holding the sglang package: "sglang/srt/..."
    line: int
    module: str  # "sgl_kernel_npu.fla.chunk"
    symbol: str | None  # None for ``import sgl_kernel_npu.X``
    lazy: bool = False  # inside a function: runs at the first call, not at import
    guarded: bool = False  # inside try/except ImportError: SGLang copes with its absence
    release: str = "SGLang"  # "SGLang 0.5.23": the scanned package's release, where its metadata says

    @property
    def what(self) -> str:
        return f"{self.module}:{self.symbol}" if self.symbol else self.module


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
class SkippedFile:
    """A scanned SGLang file (or directory) whose imports could not be read."""

    file: str  # relative to the directory holding the sglang package, like KernelImport.file
    reason: str  # why: "a symlink to ... that cannot be followed (...)", "SyntaxError: ... (line 3)", ...


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


# ------------------------------------------------------------ parsing (kept per file by installed_source.derived)


class _Unreadable(Exception):
    """A file whose source cannot be read or parsed; ``reason`` says why."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def _os_reason(path: str, exc: OSError) -> str:
    why = f"{type(exc).__name__}: {exc.strerror or exc}"
    if os.path.islink(path):
        try:
            target = os.readlink(path)
        except OSError:
            target = "an unreadable target"
        return f"a symlink to {target} that cannot be followed ({why})"
    return f"cannot be read ({why})"


def _parse(path: str, source: bytes | None = None) -> ast.Module:
    """The AST of ``path`` (of ``source`` when given); :class:`_Unreadable` when it cannot be had."""
    try:
        return ast.parse(installed_source.read_bytes(path) if source is None else source, filename=path)
    except OSError as exc:
        raise _Unreadable(_os_reason(path, exc)) from None
    except SyntaxError as exc:
        raise _Unreadable(f"{type(exc).__name__}: {exc.msg} (line {exc.lineno})") from None
    except ValueError as exc:  # null bytes in the source
        raise _Unreadable(f"ValueError: {exc}") from None
    except (RecursionError, MemoryError) as exc:  # the parser's stack: an expression nested too deeply
        raise _Unreadable(f"nested too deeply for Python's parser ({type(exc).__name__})") from None


def _catches_import_error(node: ast.Try) -> bool:
    names = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}
    for handler in node.handlers:
        if handler.type is None:
            return True
        types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        if any(isinstance(t, ast.Name) and t.id in names for t in types):
            return True
    return False


def _imports_in(path: str, rel: str, release: str) -> tuple[tuple[KernelImport, ...], str | None]:
    """The sgl_kernel_npu imports of ``path`` in source order, and None; or (), and why the
    file cannot be read or parsed (:class:`OSError` of the ``open`` itself propagates)."""
    source = installed_source.read_bytes(path)
    if KERNEL_PACKAGE.encode() not in source:
        return (), None
    try:
        tree = _parse(path, source)
    except _Unreadable as exc:
        logger.debug("sglang-ascend-hybrid: cannot parse %s: %s", path, exc.reason)
        return (), exc.reason
    found: list[KernelImport] = []
    # Depth first in source order, on an explicit stack: a deeply nested expression that
    # parses must not exhaust Python's recursion limit here.
    stack: list[tuple[ast.AST, bool, bool]] = [(tree, False, False)]
    while stack:
        node, lazy, guarded = stack.pop()
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and (
                node.module == KERNEL_PACKAGE or node.module.startswith(KERNEL_PACKAGE + ".")):
            found.extend(KernelImport(rel, node.lineno, node.module, a.name, lazy, guarded, release)
                         for a in node.names)
        elif isinstance(node, ast.Import):
            found.extend(KernelImport(rel, node.lineno, a.name, None, lazy, guarded, release) for a in node.names
                         if a.name == KERNEL_PACKAGE or a.name.startswith(KERNEL_PACKAGE + "."))
        if isinstance(node, ast.Try):
            body = guarded or _catches_import_error(node)
            children = [(c, lazy, body) for c in node.body]
            children += [(c, lazy, guarded) for c in
                         (*node.orelse, *node.finalbody, *(s for h in node.handlers for s in h.body))]
        else:
            inner = lazy or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            children = [(c, inner, guarded) for c in ast.iter_child_nodes(node)]
        stack.extend(reversed(children))
    return tuple(found), None


def sglang_dir() -> str | None:
    """The installed sglang package directory, found without importing it."""
    if SGLANG_DIR is not None:
        return SGLANG_DIR
    return installed_source.package_dir("sglang")


def _sglang_sources(root: str, files: Iterable[str] | None,
                    skipped: list[SkippedFile]) -> Iterable[tuple[str, str]]:
    """(path, path relative to the directory holding the package) of the sources to scan:
    ``files`` (relative paths such as :data:`FAMILY_FILES` holds; absent ones are
    skipped, a dangling symlink is not absent), or every ``.py`` in the
    :data:`SCANNED_SUBTREES`.  A directory that cannot be listed goes to ``skipped``."""
    base = os.path.dirname(os.path.abspath(root))

    def rel_of(path: str) -> str:
        return os.path.relpath(path, base).replace(os.sep, "/")

    if files is not None:
        for rel in files:
            path = os.path.join(base, *rel.split("/"))
            if os.path.lexists(path):
                yield path, rel
        return
    for sub in SCANNED_SUBTREES:
        top = os.path.join(root, sub)

        def unlisted(exc: OSError, top: str = top) -> None:
            if exc.filename == top and isinstance(exc, FileNotFoundError):
                return  # a subtree this release does not have
            where = exc.filename or top
            skipped.append(SkippedFile(rel_of(where), f"directory {_os_reason(where, exc)}"))

        for dirpath, dirnames, filenames in os.walk(top, onerror=unlisted):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(filenames):
                if name.endswith(".py"):
                    path = os.path.join(dirpath, name)
                    yield path, rel_of(path)


def _scan(root: str | None, files: Iterable[str] | None) -> tuple[tuple[KernelImport, ...], tuple[SkippedFile, ...]]:
    root = root or sglang_dir()
    if root is None:
        return (), ()
    release = release_label(root)
    out: list[KernelImport] = []
    skipped: list[SkippedFile] = []
    for path, rel in _sglang_sources(root, files, skipped):
        try:
            if not stat.S_ISREG(os.stat(path).st_mode):  # a directory, a FIFO (reading would block)
                skipped.append(SkippedFile(rel, "not a regular file"))
                continue
            found, why = installed_source.derived(path, f"imports as {rel} of {release}",
                                 lambda p, rel=rel: _imports_in(p, rel, release))
        except OSError as exc:  # a dangling or looping symlink, no permission: this file only
            found, why = (), _os_reason(path, exc)
        if why is not None:
            skipped.append(SkippedFile(rel, why))
        out.extend(found)
    return tuple(out), tuple(skipped)


def scan_sglang(root: str | None = None, files: Iterable[str] | None = None) -> tuple[KernelImport, ...]:
    """Every sgl_kernel_npu import in the sglang package at ``root`` (default: the
    installed one): in ``files`` only, or in all of its :data:`SCANNED_SUBTREES`.
    Files that cannot be read or parsed are left out (:func:`check` lists them)."""
    return _scan(root, files)[0]


@functools.lru_cache(maxsize=None)
def release_label(root: str) -> str:
    """"SGLang <version>" from the dist-info beside the sglang package at ``root``, else "SGLang"."""
    from importlib import metadata

    base = os.path.dirname(os.path.abspath(root))
    try:
        for dist in metadata.distributions(name="sglang", path=[base]):
            if dist.version:
                return f"SGLang {dist.version}"
    except OSError as exc:  # a dangling or looping symlink in the dist-info: the label only
        logger.debug("sglang-ascend-hybrid: cannot read SGLang's version beside %s: %s", root, exc)
    return "SGLang"


# ------------------------------------------------------------ sgl_kernel_npu on disk


@dataclass(frozen=True)
class _Located:
    kind: str  # "source" | "package" | "namespace" | "compiled"
    path: str  # the file (the first directory for a namespace package)
    dirs: tuple[str, ...] = ()  # where its submodules are (packages only)


def kernel_location(path: list[str] | None = None) -> _Located | None:
    """Where sgl_kernel_npu is on ``path`` (default: :data:`KERNEL_PATH`, else sys.path),
    found without importing it; None when it is not installed."""
    spec = PathFinder.find_spec(KERNEL_PACKAGE, path if path is not None else KERNEL_PATH)
    if spec is None:
        return None
    dirs = tuple(str(d) for d in spec.submodule_search_locations or ())
    if not dirs:  # a single-file module
        return _Located("source" if str(spec.origin).endswith(".py") else "compiled", str(spec.origin))
    init = os.path.join(dirs[0], "__init__.py")
    return _Located("package", init, dirs) if os.path.isfile(init) else _Located("namespace", dirs[0], dirs)


def _locate(module: str, top: _Located) -> _Located | None:
    """Where ``module`` (``sgl_kernel_npu[.X...]``) is, or None if no file provides it."""
    here = top
    for name in module.split(".")[1:]:
        here = _child(name, here.dirs)
        if here is None:
            return None
    return here


def _child(name: str, dirs: tuple[str, ...]) -> _Located | None:
    """Submodule ``name`` of a package whose portions are ``dirs``, in the import system's
    order (package, extension module, source, bytecode); None when absent."""
    portions = []
    for d in dirs:
        pkg = os.path.join(d, name)
        init = os.path.join(pkg, "__init__.py")
        if os.path.isfile(init):
            return _Located("package", init, (pkg,))
        for suffix in EXTENSION_SUFFIXES:
            if os.path.isfile(pkg + suffix):
                return _Located("compiled", pkg + suffix)
        if os.path.isfile(pkg + ".py"):
            return _Located("source", pkg + ".py")
        for suffix in BYTECODE_SUFFIXES:
            if os.path.isfile(pkg + suffix):
                return _Located("compiled", pkg + suffix)
        if os.path.isdir(pkg):
            portions.append(pkg)
    return _Located("namespace", portions[0], tuple(portions)) if portions else None


def _type_checking(test: ast.expr) -> bool | None:
    """True for ``TYPE_CHECKING`` / ``typing.TYPE_CHECKING`` (and ``typing_extensions.``), False
    for ``not`` of one, None for any other test."""
    negated = False
    while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):  # a loop: any depth of ``not``
        negated, test = not negated, test.operand
    if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING" or \
            isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING" and isinstance(test.value, ast.Name):
        return not negated
    return None


def _module_level(body: list[ast.stmt], runtime: bool = True) -> Iterable[tuple[ast.stmt, bool]]:
    """(statement, whether it runs at import) for the statements at module level: ``body`` and
    the blocks of its if / try / with / for; the block an ``if TYPE_CHECKING:`` runs only for
    type checkers (False), its ``else`` at runtime."""
    for node in body:
        yield node, runtime
        if isinstance(node, ast.If) and (checking := _type_checking(node.test)) is not None:
            yield from _module_level(node.body, runtime and not checking)
            yield from _module_level(node.orelse, runtime and checking)
        elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
            inner = [*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", [])]
            inner += [s for h in getattr(node, "handlers", []) for s in h.body]
            yield from _module_level(inner, runtime)


def _bound(target: ast.AST) -> Iterable[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for elt in target.elts:
            yield from _bound(elt)
    elif isinstance(target, ast.Starred):
        yield from _bound(target.value)


# Where a module-level name comes from: ("def", None, None) for a def / class / assignment
# in the module itself; ("from", level, (module, attr)) for ``from <level dots><module> import
# attr``; ("import", 0, (module, None)) for ``import module [as name]``.
_Origin = tuple


@dataclass(frozen=True)
class _Names:
    names: frozenset[str]  # bound at module level when it runs, or listed in __all__
    dynamic: str | None  # why the names are open-ended (star import, __getattr__), or None
    type_only: frozenset[str] = frozenset()  # bound only under ``if TYPE_CHECKING:``
    origins: dict[str, _Origin] = field(default_factory=dict)  # the runtime binding of each name (the first)


def _names_of(path: str) -> _Names:
    try:
        tree = _parse(path)
    except _Unreadable as exc:
        return _Names(frozenset(), f"its source cannot be read ({exc.reason})")
    names: set[str] = set()
    typing_names: set[str] = set()
    listed: set[str] = set()
    origins: dict[str, _Origin] = {}
    dynamic = None
    for node, runtime in _module_level(tree.body):
        bound: list[tuple[str, _Origin]] = []
        local = ("def", None, None)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.append((node.name, local))
        elif isinstance(node, ast.ImportFrom):
            for a in node.names:
                if a.name == "*":
                    if runtime:
                        dynamic = dynamic or f"it star-imports from {'.' * node.level}{node.module or ''}"
                else:
                    bound.append((a.asname or a.name, ("from", node.level, (node.module, a.name))))
        elif isinstance(node, ast.Import):
            for a in node.names:
                bound.append((a.asname or a.name.split(".")[0],
                              ("import", 0, (a.name if a.asname else a.name.split(".")[0], None))))
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                bound.extend((n, local) for n in _bound(t))
            if runtime and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets) \
                    and isinstance(node.value, (ast.List, ast.Tuple)):
                listed.update(e.value for e in node.value.elts
                              if isinstance(e, ast.Constant) and isinstance(e.value, str))
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            if not (isinstance(node, ast.AnnAssign) and node.value is None):  # ``x: int`` binds nothing
                bound.extend((n, local) for n in _bound(node.target))
        elif isinstance(node, ast.For):
            bound.extend((n, local) for n in _bound(node.target))
        elif isinstance(node, ast.With):
            for item in node.items:
                if item.optional_vars is not None:
                    bound.extend((n, local) for n in _bound(item.optional_vars))
        for name, origin in bound:
            if runtime:
                names.add(name)
                origins.setdefault(name, origin)
            else:
                typing_names.add(name)
    type_only = typing_names - names
    names |= listed - type_only  # __all__ vouches for a name, but not for one only a type checker sees
    if dynamic is None and "__getattr__" in names:
        dynamic = "it defines a module __getattr__"
    return _Names(frozenset(names), dynamic, frozenset(type_only), origins)


def _qualified(origin: _Origin, module: str, package: bool) -> str:
    """``module:attr`` (or ``module`` for a plain import) of a binding's ``origin`` found in
    ``module`` (a package's ``__init__`` when ``package``), relative imports resolved."""
    how, level, (source, attr) = origin
    if how == "from" and level:
        parts = module.split(".") if package else module.split(".")[:-1]
        parts = parts[:len(parts) - (level - 1)] if level > 1 else parts
        source = ".".join([*parts, *([source] if source else [])])
    return f"{source}:{attr}" if attr is not None else source


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


# ------------------------------------------------------------ messages


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
        report = check(files=files)
    if not report.installed:
        needed = [i for i in report.imports if i.file in files and not i.guarded]
        return [not_installed_message(needed)] if needed else []
    return messages(r for r in report.missing(files) if not r.imp.guarded)


class KernelPairingError(RuntimeError):
    pass


def enforce_for_model(model_config) -> None:
    """At attention-backend construction on NPU: under ``ascend_hybrid`` raise
    :class:`KernelPairingError` listing what the model's family needs and the
    installed sgl_kernel_npu lacks; under plain ``ascend`` log each one once as a
    WARNING.  Models of no family served here are not checked."""
    from sglang_ascend_hybrid.patches.mode import hybrid_requested

    kind = model_family(model_config)
    if kind is None:
        return
    try:
        problems = family_problems(kind)
    except Exception as exc:  # a diagnostic: never the reason a launch fails
        log_once(logger, ("sgl-kernel-npu-pairing-error", type(exc).__name__), "sglang-ascend-hybrid: the "
                 "sgl-kernel-npu pairing check could not run (%s: %s); continuing without it",
                 type(exc).__name__, exc, level=logging.WARNING)
        return
    if not problems:
        return
    if hybrid_requested():
        raise KernelPairingError(
            f"sglang-ascend-hybrid: --attention-backend ascend_hybrid stops startup: the installed sgl_kernel_npu "
            f"lacks what SGLang's Ascend attention backend imports for {kind} models:\n" + "\n".join(problems))
    for text in problems:
        log_once(logger, ("sgl-kernel-npu-pairing", text), "%s", text, level=logging.WARNING)
