"""``torch_npu.contrib.transfer_to_npu`` of the emulated Ascend device.  The real module rewrites
``torch.cuda`` calls to ``torch.npu``; SGLang re-mocks ``torch.cuda.is_available`` to False right
after importing it (``hardware_backend/npu/utils.py``).  Nothing here calls CUDA, so importing it
changes nothing."""
