from sgl_kernel_npu._stub import stub as _stub

l2norm_fwd = _stub("l2norm_fwd")
