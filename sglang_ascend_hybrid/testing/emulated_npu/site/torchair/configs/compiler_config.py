"""``torchair.configs.compiler_config`` of the emulated Ascend device."""

from types import SimpleNamespace


class CompilerConfig:
    def __init__(self) -> None:
        self.mode = "max-autotune"
        self.debug = SimpleNamespace(run_eagerly=False)
