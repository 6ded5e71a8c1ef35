"""A one-word :class:`~sglang_ascend_hybrid.ops.signature.Signature` for the generic ladder tests:
its text is the word."""

from __future__ import annotations

from dataclasses import dataclass

from sglang_ascend_hybrid.ops.signature import Signature


@dataclass(frozen=True)
class WordSignature(Signature):
    word: str

    def __str__(self) -> str:
        return self.word


SIG = WordSignature("sig")
