"""sglang-ascend-hybrid: serve hybrid linear-attention models with SGLang on Ascend NPUs.

Importing this package is cheap: it never imports ``torch_npu`` or
``sgl_kernel_npu``; those are probed lazily by :mod:`sglang_ascend_hybrid.ops.seam`.
"""

__version__ = "0.1.0"

# SGLang releases the patches were written and tested against (inclusive lower,
# exclusive upper bound; CI tests every release in it, see scripts/test.sh).
# Checked at plugin registration; pyproject.toml's "sglang" extra says the same.
TESTED_SGLANG_RANGE = (">=0.5.20", "<0.5.24")
