"""``acl`` (CANN's pyACL) of the emulated Ascend device (test and rehearsal tooling; see
``sglang_ascend_hybrid.testing.emulated_npu``): only what SGLang reads on the emulated path.

SGLang's ``hardware_backend/npu/utils.py`` ``is_npu_arch35()`` asks
``acl.rt.get_device_info(0, 601) == (3510, 0)`` (pyACL answers ``(value, ret)``, ``ret`` 0 on
success); the decode graph runner reaches it through ``deepseek_v4_backend`` imports
(``model_executor/runner/decode_cuda_graph_runner.py`` ``_forks_draft_metadata_prep``).  The
emulated chip is an Atlas A3 (``Ascend910_9391``), not arch 35: attribute 601 answers ``(0, 0)``
-- a value that is only "not 3510", since the real A3 figure is not readable here.  Every other
attribute or ``acl`` name raises, naming itself.
"""

from types import SimpleNamespace

_ARCH_ATTR = 601  # the attribute SGLang compares with (3510, 0) for arch 35


def _get_device_info(device_id: int, attr: int):
    if attr != _ARCH_ATTR:
        raise NotImplementedError(f"emulated acl.rt.get_device_info: attribute {attr} is not emulated "
                                  f"(only {_ARCH_ATTR}, which SGLang's is_npu_arch35 reads)")
    return (0, 0)


rt = SimpleNamespace(get_device_info=_get_device_info)


def __getattr__(name):
    raise AttributeError(f"emulated acl: {name!r} is not emulated (the emulated device covers only "
                         "acl.rt.get_device_info for SGLang's arch-35 check)")
