"""CPU emulators of NPU ops, with the real ops' contracts (used by tests and ``selftest --device cpu``)."""
