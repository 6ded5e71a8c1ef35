"""Every kernel ladder of the plugin, and the device ops their rungs call (with each op's note
from its family's contract): what kernel reports and ``doctor`` list, derived from the ladders so
that a new rung shows up in them without a second list."""

from __future__ import annotations

from dataclasses import dataclass

from sglang_ascend_hybrid.ops.errors import bad_input
from sglang_ascend_hybrid.ops.ladder import Ladder


def ladders() -> tuple[Ladder, ...]:
    """The ladders in serving order: short conv (prefill, decode, speculative verify), GDN prefill (its
    q / k l2-normalisation, then the chunk ladder) / decode (then the gates its npu_recurrent rung takes computed) /
    verify (its gates, then the verify ladder), packed attention (imports the op families)."""
    from sglang_ascend_hybrid.ops.attention import dispatch as attention
    from sglang_ascend_hybrid.ops.conv import dispatch as conv
    from sglang_ascend_hybrid.ops.gdn import decode, prefill, verify, verify_gates
    from sglang_ascend_hybrid.ops.gdn.decode import gates
    from sglang_ascend_hybrid.ops.gdn.prefill import l2norm

    return (conv.FN_LADDER, conv.UPDATE_LADDER, conv.VERIFY_LADDER, l2norm.L2NORM, prefill.PREFILL, decode.DECODE,
            gates.GATES, verify_gates.VERIFY_GATES, verify.VERIFY, attention.LADDER)


def rung(ladder: str, name: str):
    """The rung ``name`` of the ladder whose op is ``ladder``."""
    for lad in ladders():
        if lad.op == ladder:
            return lad.rung(name)
    raise bad_input("ladder", repr(ladder), f"one of {[lad.op for lad in ladders()]}")


def _notes() -> dict[str, tuple[str, str]]:
    from sglang_ascend_hybrid.ops.attention import contract as attention
    from sglang_ascend_hybrid.ops.conv import contract as conv
    from sglang_ascend_hybrid.ops.gdn import contract as gdn
    from sglang_ascend_hybrid.ops.gdn.decode import contract as decode_contract

    return {**conv.KERNEL_NOTES, **gdn.KERNEL_NOTES, **decode_contract.KERNEL_NOTES, **attention.KERNEL_NOTES}


@dataclass(frozen=True)
class DeviceOp:
    op: str            # the seam name
    kernel: str        # what an operator calls it
    note: str          # its builds, from the contract
    used_by: tuple[str, ...]   # "ladder:rung" of every rung that calls it


def device_ops() -> tuple[DeviceOp, ...]:
    """Each seam op some rung calls, once, in ladder order."""
    notes = _notes()
    users: dict[str, list[str]] = {}
    for ladder in ladders():
        for rung in ladder.rungs:
            for op in rung.ops:
                users.setdefault(op, []).append(f"{ladder.op}:{rung.name}")
    missing = [op for op in users if op not in notes]
    if missing:
        raise RuntimeError(f"device ops without a note in their contract's KERNEL_NOTES: {missing}")
    return tuple(DeviceOp(op, *notes[op], tuple(used)) for op, used in users.items())
