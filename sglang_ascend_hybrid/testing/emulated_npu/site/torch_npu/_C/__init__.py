"""``torch_npu._C`` of the emulated Ascend device: the names SGLang imports from it."""

from types import SimpleNamespace


def _weak_ref_tensor(tensor):
    """torch_npu's weak reference to a tensor's storage (graph runners keep outputs alive
    without owning them): the tensor itself on the emulated device."""
    return tensor


class _HcclOptions:
    """``ProcessGroupHCCL.Options``: SGLang sets ``hccl_config`` on it; gloo ignores it."""

    def __init__(self) -> None:
        self.hccl_config = {}


_distributed_c10d = SimpleNamespace(ProcessGroupHCCL=SimpleNamespace(Options=_HcclOptions))
