"""``torch_npu.multiprocessing.reductions`` of the emulated Ascend device: "npu" tensors are CPU
tensors, shared between processes by torch's own CPU reductions; SGLang only wraps this name."""

from torch.multiprocessing.reductions import rebuild_tensor as rebuild_npu_tensor  # noqa: F401
