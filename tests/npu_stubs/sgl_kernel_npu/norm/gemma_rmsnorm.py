from sgl_kernel_npu._stub import stub as _stub

npu_gemma_rms_norm = _stub("npu_gemma_rms_norm")
