"""The ``sglang.attention_backends`` entry-point group: a general way to ship
attention backends for SGLang from any installed package.

Each entry is ``name = "package.module:factory"`` where ``factory(runner)``
returns an attention backend, like the functions SGLang registers with
``register_attention_backend``.  ``register()`` adds every discovered name to
SGLang's argparse choices (attention, prefill, decode and draft backends) and
puts a lazily-loading factory into ``ATTENTION_BACKENDS``.
"""

from __future__ import annotations

import logging
from importlib.metadata import EntryPoint, entry_points
from typing import Callable

logger = logging.getLogger(__name__)

GROUP = "sglang.attention_backends"


def discover() -> list[EntryPoint]:
    """Entries of the group, honouring SGLang's SGLANG_PLUGINS whitelist when set."""
    import os

    allowed = os.environ.get("SGLANG_PLUGINS")
    allowed_set = {x.strip() for x in allowed.split(",") if x.strip()} if allowed else None
    found = []
    seen = set()
    for ep in entry_points(group=GROUP):
        if allowed_set is not None and ep.name not in allowed_set:
            continue
        if ep.name in seen:
            logger.warning("attention backend %r is declared by more than one package; using the first", ep.name)
            continue
        seen.add(ep.name)
        found.append(ep)
    return found


def _lazy_factory(ep: EntryPoint) -> Callable:
    """Defer ``ep.load()`` until SGLang builds the backend (keeps registration cheap)."""

    def factory(runner):
        return ep.load()(runner)

    factory.__name__ = f"create_{ep.name}_backend"
    factory.__qualname__ = factory.__name__
    factory.entry_point = ep.value  # for doctor / tests
    return factory


def add_backend_choices() -> list[str]:
    from sglang.srt.arg_groups import choices

    added = []
    for ep in discover():
        for name_list in (choices.ATTENTION_BACKEND_CHOICES, choices.DRAFT_ATTENTION_BACKEND_CHOICES):
            if ep.name not in name_list:
                name_list.append(ep.name)
                added.append(ep.name)
    return added


def add_backend_factories() -> list[str]:
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS

    added = []
    for ep in discover():
        if ep.name in ATTENTION_BACKENDS:
            continue
        ATTENTION_BACKENDS[ep.name] = _lazy_factory(ep)
        added.append(ep.name)
    return added
