"""Test stub of torch_npu (see tests/npu_stubs/README.md)."""
__version__ = "0.0.0+cpu-stub"
