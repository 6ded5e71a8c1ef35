from sgl_kernel_npu._stub import stub as _stub

l1_norm = _stub("l1_norm")
