"""What a kernel ladder keys its decisions on: one :class:`Signature` type, one subclass per op family.

A signature is the hashable shape / dtype description of one call.  A
:class:`~sglang_ascend_hybrid.ops.ladder.Ladder` hands it to its rungs' predicates, remembers a
call-time refusal by ``(rung, signature)`` and keys its log-once lines by it, so it must carry
every fact a kernel's acceptance depends on (head pair, dtypes, dims, layout) and never the
per-call values (sequence lengths, slot indices).  Its text (``str``) is what those lines and
:class:`~sglang_ascend_hybrid.ops.ladder.ForcedRungUnavailable` show.

The families' signatures: :class:`~sglang_ascend_hybrid.ops.gdn.signature.GdnSignature`,
:class:`~sglang_ascend_hybrid.ops.conv.signature.ConvSignature`,
:class:`~sglang_ascend_hybrid.ops.attention.signature.AttentionSignature`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


def dtype_name(dtype) -> str:
    """How every message names a dtype: ``torch.bfloat16`` -> ``bfloat16``."""
    return str(dtype).replace("torch.", "")


@dataclass(frozen=True)
class Signature:
    """Base of every family's signature: a frozen dataclass, so hashable and equal field by field
    (and never equal to another family's).  Its text is the field values in order, each as
    ``repr`` shows it, in parentheses: ``('update', 3, 64, 'float16', ...)``.  A family whose lines
    read better otherwise overrides ``__str__`` (GDN names the head pair)."""

    def __str__(self) -> str:
        return "(" + ", ".join(repr(getattr(self, f.name)) for f in fields(self)) + ")"
