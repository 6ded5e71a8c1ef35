"""Log-once helper: one INFO line per distinct event, never per layer per step."""

from __future__ import annotations

import logging
import threading
from typing import Hashable

_seen: set[Hashable] = set()
_lock = threading.Lock()


def log_once(logger: logging.Logger, key: Hashable, msg, *args, level: int = logging.INFO) -> bool:
    """Log ``msg`` the first time ``key`` is seen in this process; return whether it logged.
    ``msg`` may be a callable returning the text: it is called only when the line is logged."""
    if key in _seen:  # the common case, read without the lock (a set is read whole)
        return False
    with _lock:
        if key in _seen:
            return False
        _seen.add(key)
    logger.log(level, msg() if callable(msg) else msg, *args)
    return True
