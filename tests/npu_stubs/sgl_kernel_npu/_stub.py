"""Shared maker of stub functions (see tests/npu_stubs/README.md)."""


def stub(name):
    def fn(*args, **kwargs):
        raise NotImplementedError(f"{name} is a CPU test stub; route the call to an emulator")

    fn.__name__ = name
    return fn
