"""Puts the emulated Ascend device in place at ``import torch``: torch's device-backend autoload
entry point (group ``torch.backends``, declared by the ``.dist-info`` in this package's ``site``
folder, so it is seen only where that folder is on the Python path) calls :func:`install`.

:func:`install` does nothing unless ``SGLANG_ASCEND_HYBRID_EMULATED_NPU`` is true.  Then:

- PrivateUse1 becomes ``"npu"`` through torch's own Python-backend registration
  (``torch.utils.backend_registration._setup_privateuseone_for_python_backend``), with
  :mod:`.npu_module` as ``torch.npu``: ``torch.device("npu:0")``, ``.to("npu")``, ``.npu()`` work;
- the two PrivateUse1 factory kernels (``aten::empty.memory_format``, ``aten::empty_strided``)
  return CPU tensors, so every "npu" tensor is an ordinary CPU tensor and every later op runs
  the CPU kernel (``t.device.type == "cpu"``: code that branches on ``.is_npu`` takes its
  non-NPU branch);
- pinned host memory is ordinary host memory: ``Tensor.pin_memory`` is the identity and the
  factories drop ``pin_memory=`` (a Python backend cannot register the accelerator's pinned
  allocator, which ``pin_memory=True`` asks for);
- the process-group backend ``"hccl"`` is gloo (SGLang's NPU distributed backend).

Test and rehearsal tooling: the serving plugin never imports this package.
"""

from __future__ import annotations

import os

_installed = False
_library = None  # the torch.library registration, kept alive for the process


def enabled() -> bool:
    from sglang_ascend_hybrid.envs import ENV

    return ENV.EMULATED_NPU.get()


def install() -> None:
    """The autoload entry point: install the emulated device when it is asked for."""
    global _installed
    if _installed or not enabled():
        return
    import torch

    from sglang_ascend_hybrid.testing.emulated_npu import npu_module

    torch.utils.backend_registration._setup_privateuseone_for_python_backend(
        rename="npu", backend_module=npu_module)
    _register_factories(torch)
    _without_pinned_memory(torch)
    _record_stream_on_host(torch, npu_module.Stream)
    _register_hccl(torch)
    os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "1")  # the processes SGLang spawns install it too
    _installed = True
    from sglang_ascend_hybrid.envs import ENV

    breakage = ENV.EMULATED_NPU_BREAK.get()
    if breakage != "none":  # a negative control of the runtime tier
        from sglang_ascend_hybrid.testing.emulated_npu import breakages

        breakages.apply(breakage)


def installed() -> bool:
    return _installed


def _register_factories(torch) -> None:
    global _library
    lib = torch.library.Library("aten", "IMPL")

    def empty_memory_format(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
        return torch.empty(size, dtype=dtype, layout=layout, device="cpu",
                           memory_format=memory_format or torch.contiguous_format)

    def empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
        return torch.empty_strided(size, stride, dtype=dtype, layout=layout, device="cpu")

    lib.impl("empty.memory_format", empty_memory_format, "PrivateUse1")
    lib.impl("empty_strided", empty_strided, "PrivateUse1")
    _library = lib


# torch factories SGLang calls with ``pin_memory=``
PINNING_FACTORIES = ("tensor", "empty", "zeros", "ones", "full", "arange", "empty_strided", "empty_like",
                     "zeros_like", "ones_like", "full_like", "randn", "rand", "randint")


def _without_pinned_memory(torch) -> None:
    torch.Tensor.pin_memory = lambda self, *args, **kwargs: self
    torch.Tensor.is_pinned = lambda self, *args, **kwargs: False
    for name in PINNING_FACTORIES:
        setattr(torch, name, _dropping_pin_memory(getattr(torch, name)))


def _dropping_pin_memory(factory):
    def factory_on_host(*args, pin_memory=False, **kwargs):
        return factory(*args, **kwargs)

    factory_on_host.__name__ = factory.__name__
    factory_on_host.__doc__ = factory.__doc__
    factory_on_host.__wrapped__ = factory
    return factory_on_host


def _record_stream_on_host(torch, stream_class) -> None:
    """``Tensor.record_stream(torch.npu.current_stream())`` (SGLang's overlap scheduler, older
    releases' ``overlap_utils._resolve_spec_extras``): the emulated streams run in order on the host,
    so there is nothing to keep alive for them; any other stream goes to torch."""
    original = torch.Tensor.record_stream

    def record_stream(self, stream):
        if isinstance(stream, stream_class):
            return None
        return original(self, stream)

    torch.Tensor.record_stream = record_stream


def _register_hccl(torch) -> None:
    import torch.distributed as dist

    if not dist.is_available() or "hccl" in dist.Backend.backend_list:
        return

    def gloo(store, group_rank, group_size, timeout):
        return dist.ProcessGroupGloo(store, group_rank, group_size, timeout)

    dist.Backend.register_backend("hccl", gloo, devices=["cpu", "npu"])
