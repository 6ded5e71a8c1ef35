"""``torch_npu.contrib`` of the emulated Ascend device."""
