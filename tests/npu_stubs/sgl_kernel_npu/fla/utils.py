def _stub(name):
    def fn(*args, **kwargs):
        raise NotImplementedError(f"{name} is a CPU test stub; route the call to an emulator")
    fn.__name__ = name
    return fn

prepare_chunk_indices = _stub("prepare_chunk_indices")
