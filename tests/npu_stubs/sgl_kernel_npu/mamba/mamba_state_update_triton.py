from sgl_kernel_npu._stub import stub as _stub

conv_state_rollback = _stub("conv_state_rollback")
move_intermediate_cache = _stub("move_intermediate_cache")
