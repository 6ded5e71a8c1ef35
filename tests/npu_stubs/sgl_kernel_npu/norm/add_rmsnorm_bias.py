from sgl_kernel_npu._stub import stub as _stub

add_gemma_rms_norm = _stub("add_gemma_rms_norm")
add_rmsnorm_bias = _stub("add_rmsnorm_bias")
