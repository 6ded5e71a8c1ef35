"""Packed (varlen, ``TND``) attention that accepts sequences empty on one side, one module per job:

- :mod:`.contract`: ``npu_fused_infer_attention_score``'s contract (head dims, limits, dtypes, sources);
- :mod:`.naive`: the fp64 oracle, `naive_*` functions with the public op's arguments (tests only);
- :mod:`.inputs`: input validation;
- :mod:`.torch_impl`: the pure-torch rung;
- :mod:`.signature`: what the ladder keys on (:class:`~.signature.AttentionSignature`);
- :mod:`.dispatch`: the kernel ladder (device op, with compaction of one-sided sequences, then torch);
- :mod:`.api`: the public op (SGLang's ``fused_infer_attention_varlen``) and the patch-registry helpers;
- :mod:`.cases`: packed problems for the startup probe, ``selftest``, tests and benchmarks.
"""
