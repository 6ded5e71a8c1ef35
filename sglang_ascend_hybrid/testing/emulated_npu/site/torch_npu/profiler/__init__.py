"""``torch_npu.profiler`` of the emulated Ascend device: torch's CPU profiler under the NPU names
SGLang reads (only used when a profile is asked for)."""

from types import SimpleNamespace

import torch.profiler as _profiler

profile = _profiler.profile
ProfilerActivity = SimpleNamespace(CPU=_profiler.ProfilerActivity.CPU, NPU=_profiler.ProfilerActivity.CPU)
ExportType = SimpleNamespace(Text="text", Db="db")
ProfilerLevel = SimpleNamespace(Level0="Level0", Level1="Level1", Level2="Level2")
AiCMetrics = SimpleNamespace(PipeUtilization="PipeUtilization")
tensorboard_trace_handler = _profiler.tensorboard_trace_handler


class _ExperimentalConfig:
    def __init__(self, **kwargs) -> None:
        self.options = kwargs
