"""What the GDN emulators share: the contract-violation error text (:func:`violation`)."""

from __future__ import annotations

from sglang_ascend_hybrid.ops.errors import EmulatorContractViolation


def violation(op: str, what: str) -> None:
    """Raise :class:`EmulatorContractViolation`: ``op`` was called in a way the real op takes without a
    check and computes wrongly (undefined behaviour)."""
    raise EmulatorContractViolation(f"{op}: {what} (undefined behaviour on the real op, which does not check it)")
