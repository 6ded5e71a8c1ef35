"""Error types the op contracts define (``ops/`` owns them; the emulators raise them), and the one
helper for input errors."""

from sglang_ascend_hybrid.ops.signature import dtype_name


class EmulatorContractViolation(AssertionError):
    """The call would be undefined behaviour on the real op (an out-of-bounds read, a dtype the
    kernel silently reinterprets, ...): the real op raises nothing, so the emulator must, so that
    no test can pass on undefined behaviour.  Never treated as a kernel refusal by the ladders."""


class DeviceResultError(RuntimeError):
    """A device op returned a result outside its contract (e.g. an LSE of another shape): the op
    is not the one the contract describes, so this propagates from every rung (never a refusal)."""


def shown(value) -> str:
    """``value`` as an input error shows it: a str as given (the caller renders it, e.g. ``repr(x)``),
    a tensor as ``shape (..) dtype`` (never its values), a list / tuple of more than 16 entries as its
    first 8 and ``...``, anything else with ``str``; at most 200 characters."""
    if isinstance(value, str):
        text = value
    elif hasattr(value, "shape") and hasattr(value, "dtype"):  # a tensor (errors.py imports no torch)
        text = f"shape {tuple(value.shape)} {dtype_name(value.dtype)}"
    elif isinstance(value, (list, tuple)) and len(value) > 16:
        text = f"{value[:8]}... ({len(value)} entries)"
    else:
        text = str(value)
    return text if len(text) <= 200 else text[:197] + "..."


def bad_input(name: str, value, expected: str, *, op: str = "") -> ValueError:
    """The error of a public input check: the argument, the value it got (:func:`shown`) and what was
    expected, ``"<op>: <name>=<value>: expected <expected>"`` (without the prefix when ``op`` is
    empty).  Always a ``ValueError``, a wrong type included (a list where a tensor goes): callers
    catch one type for every bad input, as SGLang's own checks of these ops do."""
    return ValueError(f"{op + ': ' if op else ''}{name}={shown(value)}: expected {expected}")
