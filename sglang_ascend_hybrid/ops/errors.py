"""Error types the op contracts define (``ops/`` owns them; the emulators raise them)."""


class EmulatorContractViolation(AssertionError):
    """The call would be undefined behaviour on the real op (an out-of-bounds read, a dtype the
    kernel silently reinterprets, ...): the real op raises nothing, so the emulator must, so that
    no test can pass on undefined behaviour.  Never treated as a kernel refusal by the ladders."""
