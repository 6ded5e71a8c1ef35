"""Head planner: run a head layout the fast kernel rejects as launches it accepts.

Heads are independent and value head ``h`` reads key head ``h // r`` (``r = Hv // Hk``),
so the ``Hk`` key groups (one key head plus its ``r`` value heads) can be

* split into several launches (each a contiguous run of key groups),
* padded to a larger group size ``r' > r`` with inert value heads, and/or
* topped up with whole inert key groups,

where an inert value head has ``beta = 0`` and ``g = 0`` and zero q, k, v and
initial state: its state stays zero and its output is zero, and it cannot touch
the real heads.  Cost = value-head work launched / real value-head work; the
planner returns a cheapest plan (fewest launches among equal cost) or a
``"none"`` plan when nothing fits under the overhead limit.

The overhead limit is a number >= 1 or ``inf`` ("no limit": the cheapest plan
the kernel accepts, however padded).  The search is finite for every limit: a
launch never has more value heads than the predicate can accept -- its
``max_value_heads`` attribute, the kernel table's largest entry for a table
predicate, else :data:`UNKNOWN_PREDICATE_MAX_HEADS`.
:func:`plan_for` is shared by the runtime and the ``plan`` CLI.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Optional

import torch

from sglang_ascend_hybrid.envs import ENV
from sglang_ascend_hybrid.ops.errors import bad_input
from sglang_ascend_hybrid.ops.gdn import contract as caps

STRATEGIES = ("native", "split", "pad", "split+pad", "none")
# Most value heads one launch is searched up to, for a predicate that does not say.
UNKNOWN_PREDICATE_MAX_HEADS = 4096


@dataclass(frozen=True)
class Launch:
    """One kernel launch: key groups ``[key_start, key_start + key_count)`` of the real
    layout, each padded to ``group_size`` value heads, plus ``inert_groups`` whole
    inert key groups at the end."""

    key_start: int
    key_count: int
    group_size: int
    inert_groups: int = 0

    @property
    def key_heads(self) -> int:
        return self.key_count + self.inert_groups

    @property
    def value_heads(self) -> int:
        return self.key_heads * self.group_size

    @property
    def pair(self) -> tuple[int, int]:
        return (self.value_heads, self.key_heads)


@dataclass(frozen=True)
class Plan:
    strategy: str                       # one of STRATEGIES
    launches: tuple                     # ((Hv, Hk), ...) as the kernel sees them
    overhead: float                     # launched / real value-head work (inf for "none")
    value_heads: int
    key_heads: int
    detail: tuple = ()                  # Launch per launch (how real/inert heads are laid out)

    @property
    def inert_value_heads(self) -> int:
        return sum(part.value_heads for part in self.detail) - (self.value_heads if self.detail else 0)

    def describe(self) -> str:
        if self.strategy == "none":
            return f"({self.value_heads}, {self.key_heads}): none (fallback)"
        return (f"({self.value_heads}, {self.key_heads}): {self.strategy} "
                f"launches={list(self.launches)} overhead={self.overhead:.3f}")


def _check_positive(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise bad_input(name, repr(value), "a positive integer")
    return value


def _none(value_heads: int, key_heads: int) -> Plan:
    return Plan("none", (), math.inf, value_heads, key_heads)


def launch_ceiling(predicate: Callable[[int, int], bool]) -> int:
    """Most value heads any launch accepted by ``predicate`` can have."""
    declared = getattr(predicate, "max_value_heads", None)
    if isinstance(declared, int) and declared > 0:
        return declared
    entry = getattr(predicate, "__self__", None)
    if isinstance(entry, caps.MegaVariant):
        return entry.max_value_heads
    return UNKNOWN_PREDICATE_MAX_HEADS


def _budget(value_heads: int, max_overhead: float, ceiling: int) -> int:
    """Most value-head work one plan may launch (finite for every limit, inf included)."""
    most = ceiling * value_heads  # every launch has <= ceiling heads, and at most value_heads launches
    if max_overhead >= most:  # inf, or so large the product could overflow: no limit
        return most
    return min(most, math.floor(max_overhead * value_heads + 1e-9))


@lru_cache(maxsize=4096)
def _best_plan(value_heads: int, key_heads: int, predicate: Callable[[int, int], bool],
               max_overhead: float) -> Plan:
    r = value_heads // key_heads
    ceiling = launch_ceiling(predicate)
    budget = _budget(value_heads, max_overhead, ceiling)  # most value-head work we may launch

    # Cheapest single launch covering h real key groups: (work, group_size, inert_groups).
    def launch_for(h: int):
        best = None
        most = min(budget, ceiling)
        for rp in range(r, most // h + 1):
            for extra in range(0, most // rp - h + 1):
                work = (h + extra) * rp
                if best is not None and work >= best[0]:
                    break
                if predicate(work, h + extra):
                    best = (work, rp, extra)
                    break
        return best

    # A launch of h real key groups has >= h value heads: h is at most the launch ceiling.
    most_groups = min(key_heads, ceiling)
    per_size = {h: launch_for(h) for h in range(1, most_groups + 1)}
    # DP over real key groups covered: (work, launches, parts)
    best: list = [None] * (key_heads + 1)
    best[0] = (0, 0, ())
    for n in range(1, key_heads + 1):
        for h in range(1, min(n, most_groups) + 1):
            prev, cand = best[n - h], per_size[h]
            if prev is None or cand is None:
                continue
            option = (prev[0] + cand[0], prev[1] + 1, prev[2] + ((h,) + cand[1:],))
            if best[n] is None or option[:2] < best[n][:2]:
                best[n] = option
    if best[key_heads] is None or best[key_heads][0] > budget:
        return _none(value_heads, key_heads)
    work, _, parts = best[key_heads]
    detail, start = [], 0
    for h, rp, extra in parts:
        detail.append(Launch(start, h, rp, extra))
        start += h
    padded = any(part.group_size != r or part.inert_groups for part in detail)
    split = len(detail) > 1
    strategy = {(False, False): "native", (True, False): "split",
                (False, True): "pad", (True, True): "split+pad"}[(split, padded)]
    return Plan(strategy, tuple(part.pair for part in detail), work / value_heads,
                value_heads, key_heads, tuple(detail))


def plan_for(value_heads: int, key_heads: int, head_dim: int = caps.MEGA_HEAD_DIM,
             dtype: torch.dtype = torch.float16, predicate: Optional[Callable[[int, int], bool]] = None,
             *, max_overhead: Optional[float] = None) -> Plan:
    """Cheapest exact plan for running ``(value_heads, key_heads)`` on the mega kernel.

    ``predicate(Hv, Hk)`` says which pairs the kernel accepts (default: the installed
    kernel's table).  ``head_dim`` / ``dtype`` outside the kernel's contract give
    ``"none"``.  ``max_overhead`` (a number >= 1, or ``inf`` for no limit) defaults to
    ``SGLANG_ASCEND_HYBRID_GDN_MAX_OVERHEAD``.
    """
    _check_positive("value_heads", value_heads)
    _check_positive("key_heads", key_heads)
    _check_positive("head_dim", head_dim)
    if value_heads % key_heads:
        raise bad_input("value_heads", value_heads, f"a multiple of key_heads ({key_heads})")
    if max_overhead is None:
        max_overhead = ENV.GDN_MAX_OVERHEAD.get()
    if isinstance(max_overhead, bool) or not isinstance(max_overhead, (int, float)) or not max_overhead >= 1.0:
        raise bad_input("max_overhead", repr(max_overhead), "a number >= 1.0 (or inf for no limit)")  # nan too
    max_overhead = float(max_overhead)
    if not caps.mega_supports_layout(head_dim, head_dim, dtype):
        return _none(value_heads, key_heads)
    predicate = caps.mega_pair_predicate() if predicate is None else predicate
    return _best_plan(value_heads, key_heads, predicate, max_overhead)
