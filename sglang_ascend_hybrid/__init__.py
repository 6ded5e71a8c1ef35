"""sglang-ascend-hybrid: serve hybrid linear-attention models with SGLang on Ascend NPUs.

Importing this package is cheap: it never imports ``torch_npu`` or
``sgl_kernel_npu``; those are probed lazily by :mod:`sglang_ascend_hybrid.ops.seam`.
"""

__version__ = "0.1.0"

# SGLang releases the patches were written and tested against (inclusive lower,
# exclusive upper bound).  Checked at plugin registration.
TESTED_SGLANG_RANGE = (">=0.5.23", "<0.5.24")
