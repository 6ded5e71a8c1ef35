"""What the operator tools print for a failure: one line on stderr, the same shape for every command."""

from __future__ import annotations

import sys

PROG = "sglang-ascend-hybrid"


def error(command: str, message: str) -> None:
    """One line on stderr: ``sglang-ascend-hybrid <command>: error: <message>``."""
    print(f"{PROG} {command}: error: {message}", file=sys.stderr)
