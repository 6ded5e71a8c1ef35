"""Short-conv ops (``causal_conv1d_fn`` / ``causal_conv1d_update``), one module per job:

- :mod:`.contract`: the NPU conv ops' names, host check texts in order, limits and sources;
- :mod:`.naive`: the fp64 oracle, `naive_*` functions with the public op's arguments (tests only);
- :mod:`.inputs`: input validation (shape checks without a sync, value checks on the host);
- :mod:`.torch_impl`: the tuned pure-torch rung (the CPU path);
- :mod:`.signature`: what the ladders key on (:class:`~.signature.ConvSignature`) and the state-layout facts it names;
- :mod:`.dispatch`: the kernel ladders and their rungs;
- :mod:`.api`: the public ops (SGLang's hooks: :mod:`sglang_ascend_hybrid.integration.conv_hooks`).
"""
