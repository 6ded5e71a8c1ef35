"""Test stub of sgl_kernel_npu.norm (see tests/npu_stubs/README.md); SGLang 0.5.20 - 0.5.22 import it at module top."""
