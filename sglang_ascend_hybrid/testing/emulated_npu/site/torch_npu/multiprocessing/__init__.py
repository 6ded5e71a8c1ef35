"""``torch_npu.multiprocessing`` of the emulated Ascend device."""
