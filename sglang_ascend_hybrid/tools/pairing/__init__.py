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

One job per module; this package re-exports their public names:

* :mod:`.parsing` -- reading and parsing one source file, with the reason when it cannot be;
* :mod:`.sources` -- SGLang's side: the sgl_kernel_npu imports in its source (:func:`scan_sglang`),
  the skipped files, the release label;
* :mod:`.kernel_package` -- sgl_kernel_npu's side: where it and its modules are on disk, the
  names a module binds at runtime (``TYPE_CHECKING`` apart);
* :mod:`.facts` -- what is known of the modules SGLang imports, with citations (:data:`KNOWN`);
* :mod:`.families` -- which SGLang files each model family needs (:data:`FAMILY_FILES`);
* :mod:`.report` -- the check (:func:`check`), its states, records and report;
* :mod:`.message_lines` -- the one-line messages (:func:`message`, :func:`family_problems`, ...);
* :mod:`.enforce` -- the startup check (:func:`enforce_for_model`).

The test overrides are module attributes of their owners: ``sources.SGLANG_DIR`` (the sglang
package scanned) and ``kernel_package.KERNEL_PATH`` (where sgl_kernel_npu is looked for);
they are not re-exported here, where setting them would change nothing.
"""

from __future__ import annotations

from sglang_ascend_hybrid.tools.pairing.enforce import KernelPairingError, enforce_for_model, logger
from sglang_ascend_hybrid.tools.pairing.facts import KNOWN, KernelFact
from sglang_ascend_hybrid.tools.pairing.families import (
    ASCEND_BACKEND,
    ASCEND_GDN_BACKEND,
    ASCEND_HYBRID_LINEAR_BACKEND,
    FAMILY_FILES,
    GDN_BACKEND,
    GDN_TRITON,
    families_needing,
    model_family,
)
from sglang_ascend_hybrid.tools.pairing.kernel_package import KERNEL_PACKAGE, kernel_location
from sglang_ascend_hybrid.tools.pairing.message_lines import (
    family_problems,
    message,
    message_of_each,
    messages,
    not_installed_message,
)
from sglang_ascend_hybrid.tools.pairing.report import (
    MISSING_MODULE,
    MISSING_SYMBOL,
    NOT_INSTALLED,
    OK,
    UNVERIFIABLE,
    PairingRecord,
    PairingReport,
    check,
)
from sglang_ascend_hybrid.tools.pairing.sources import (
    SCANNED_SUBTREES,
    KernelImport,
    SkippedFile,
    release_label,
    scan_sglang,
    sglang_dir,
)

__all__ = [
    # report: the check, its states, records and report
    "check", "OK", "MISSING_MODULE", "MISSING_SYMBOL", "UNVERIFIABLE", "NOT_INSTALLED", "PairingRecord",
    "PairingReport",
    # sources: SGLang's imports of sgl_kernel_npu
    "scan_sglang", "sglang_dir", "release_label", "SCANNED_SUBTREES", "KernelImport", "SkippedFile",
    # kernel_package: sgl_kernel_npu on disk
    "KERNEL_PACKAGE", "kernel_location",
    # facts
    "KNOWN", "KernelFact",
    # families
    "FAMILY_FILES", "families_needing", "model_family", "GDN_TRITON", "GDN_BACKEND", "ASCEND_GDN_BACKEND",
    "ASCEND_HYBRID_LINEAR_BACKEND", "ASCEND_BACKEND",
    # message_lines
    "message", "message_of_each", "messages", "not_installed_message", "family_problems",
    # enforce
    "KernelPairingError", "enforce_for_model", "logger",
]
