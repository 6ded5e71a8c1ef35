"""Error types the op contracts define (``ops/`` owns them; the emulators raise them)."""


class EmulatorContractViolation(AssertionError):
    """The call would be undefined behaviour on the real op (an out-of-bounds read, a dtype the
    kernel silently reinterprets, ...): the real op raises nothing, so the emulator must, so that
    no test can pass on undefined behaviour.  Never treated as a kernel refusal by the ladders."""


class DeviceResultError(RuntimeError):
    """A device op returned a result outside its contract (e.g. an LSE of another shape): the op
    is not the one the contract describes, so this propagates from every rung (never a refusal)."""


def bad_input(name: str, value, expected: str, *, op: str = "") -> ValueError:
    """The error of an op's public input check: the argument, the value it got and what was expected
    (``"<op>: <name>=<value>: expected <expected>"``, without the op prefix when ``op`` is empty)."""
    return ValueError(f"{op + ': ' if op else ''}{name}={value}: expected {expected}")
