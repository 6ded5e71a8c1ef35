"""CPU emulators of NPU ops: each implements the contract of its op family in
:mod:`sglang_ascend_hybrid.ops` (``ops/<family>/contract.py``) and raises
:class:`~sglang_ascend_hybrid.ops.errors.EmulatorContractViolation` where the real op's behaviour
is undefined.  Used by tests and ``selftest --device cpu``; nothing in production imports them."""
