"""Kernel dispatch: each op module has a fast-path ladder and a readable pure-torch reference.

Device kernels are reached only through :mod:`sglang_ascend_hybrid.ops.seam`.
"""
