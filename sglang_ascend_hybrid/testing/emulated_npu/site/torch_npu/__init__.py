"""``torch_npu`` of the emulated Ascend device (test and rehearsal tooling; see
``sglang_ascend_hybrid.testing.emulated_npu``): the module surface SGLang imports, every device
op it calls bound to a CPU emulator, and nothing else -- a name SGLang reaches that is not
emulated raises AttributeError naming it."""

import torch  # noqa: F401  (installs the emulated device through torch's backend autoload)

from sglang_ascend_hybrid.testing.emulated_npu import surface as _surface
from torch_npu import _C, contrib, multiprocessing, profiler  # noqa: F401  (attributes SGLang reads)

__version__ = "2.8.0.post2+emulated"
npu = _surface.torch_npu_npu_module()
_surface.bind_torch_npu(globals())
