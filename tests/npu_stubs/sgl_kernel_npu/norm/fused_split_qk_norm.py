from sgl_kernel_npu._stub import stub as _stub

fused_split_qk_norm = _stub("fused_split_qk_norm")
