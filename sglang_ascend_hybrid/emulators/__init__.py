"""CPU emulators of NPU ops: each implements the contract of its op family in
:mod:`sglang_ascend_hybrid.ops` (``ops/<family>/contract.py``) and raises
:class:`~sglang_ascend_hybrid.ops.errors.EmulatorContractViolation` where the real op's behaviour
is undefined.  Used by tests and ``selftest --device cpu``; nothing in production imports them.

One module per emulated op (each citing the upstream source it copies):

- :mod:`.causal_conv1d`: the conv ops (aclnn ``causal_conv1d``, the v2 Triton entries) and their sets;
- :mod:`.fused_infer_attention`: ``npu_fused_infer_attention_score`` (packed attention);
- :mod:`.gdn_mega`: sgl-kernel-npu's mega GDN prefill kernel ``run_mega_chunk_gdn``;
- :mod:`.gdn_npu_chunk`: ``torch.ops.npu.chunk_gated_delta_rule``;
- :mod:`.gdn_npu_recurrent`: ``torch.ops.npu.recurrent_gated_delta_rule`` (decode, verify);
- :mod:`.gdn_triton_chunk`: the Triton prefill entry ``chunk_gated_delta_rule_npu``;
- :mod:`.gdn_decode`: the Triton GDN decode kernels;
- :mod:`.mamba_state_update`: the speculative commit ``move_intermediate_cache``;
- :mod:`.gdn_sets`: the GDN emulator set of one machine (``emulators()``);
- :mod:`.gdn_common`: what the GDN emulators share (the contract-violation text).
"""
