def _stub(name):
    def fn(*args, **kwargs):
        raise NotImplementedError(f"{name} is a CPU test stub; route the call to an emulator")
    fn.__name__ = name
    return fn

fused_gdn_gating_kernel_without_sigmoid = _stub("fused_gdn_gating_kernel_without_sigmoid")
fused_gdn_gating_npu = _stub("fused_gdn_gating_npu")
