"""Test stub of sgl_kernel_npu (see tests/npu_stubs/README.md)."""
__version__ = "0.0.0+cpu-stub"
