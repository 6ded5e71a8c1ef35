"""``torchair`` of the emulated Ascend device: SGLang imports it to build its torch.compile backend
on NPU (``utils/common.py`` ``get_compiler_backend``).  The emulated device compiles nothing:
:func:`get_npu_backend` returns torch's eager backend name."""


def get_npu_backend(compiler_config=None):
    return "eager"
