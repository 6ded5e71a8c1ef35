def _stub(name):
    def fn(*args, **kwargs):
        raise NotImplementedError(f"{name} is a CPU test stub; route the call to an emulator")
    fn.__name__ = name
    return fn

attention_sinks_prefill_triton = _stub("attention_sinks_prefill_triton")
attention_sinks_triton = _stub("attention_sinks_triton")
