from sgl_kernel_npu._stub import stub as _stub

prepare_chunk_indices = _stub("prepare_chunk_indices")
