from sgl_kernel_npu._stub import stub as _stub

chunk_gated_delta_rule_npu = _stub("chunk_gated_delta_rule_npu")
