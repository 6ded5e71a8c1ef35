from sgl_kernel_npu._stub import stub as _stub

fused_gdn_gating_kernel_without_sigmoid = _stub("fused_gdn_gating_kernel_without_sigmoid")
fused_gdn_gating_npu = _stub("fused_gdn_gating_npu")
