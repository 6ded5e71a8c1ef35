from sgl_kernel_npu._stub import stub as _stub

attention_sinks_prefill_triton = _stub("attention_sinks_prefill_triton")
attention_sinks_triton = _stub("attention_sinks_triton")
