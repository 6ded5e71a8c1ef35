def _stub(name):
    def fn(*args, **kwargs):
        raise NotImplementedError(f"{name} is a CPU test stub; route the call to an emulator")
    fn.__name__ = name
    return fn

conv_state_rollback = _stub("conv_state_rollback")
move_intermediate_cache = _stub("move_intermediate_cache")
