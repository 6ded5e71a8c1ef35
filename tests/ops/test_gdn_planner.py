"""Head planner: plans are accepted by the kernel table and as cheap as any plan can be."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from sglang_ascend_hybrid.ops.gdn import capabilities as caps
from sglang_ascend_hybrid.ops.gdn.planner import plan_for

CURRENT = caps.CURRENT_MEGA_ENTRY.supports
QWEN_GLOBAL = [(16, 16), (32, 16), (48, 16), (64, 16)]
EXTRA_PAIRS = [(28, 4), (5, 5), (128, 32), (3, 1)]


def _table_pairs():
    pairs = set()
    for hv, hk in QWEN_GLOBAL:
        for tp in (1, 2, 4, 8, 16):
            pairs.add((hv // tp, hk // tp))
    return sorted(pairs | set(EXTRA_PAIRS))


def _compositions(n):
    if n == 0:
        yield ()
        return
    for first in range(1, n + 1):
        for rest in _compositions(n - first):
            yield (first,) + rest


def _brute_force(hv, hk, predicate, max_overhead):
    """Every plan: split the key groups in any way, pad each part's groups to any size
    and add any number of inert groups; return (min cost, min launches at that cost)."""
    r = hv // hk
    budget = max_overhead * hv
    best = None
    for parts in _compositions(hk):
        options = []
        for h in parts:
            opts = [(hk2 * rp) for rp in range(r, int(budget) + 1) for hk2 in range(h, int(budget) + 1)
                    if hk2 * rp <= budget and predicate(hk2 * rp, hk2)]
            if not opts:
                break
            options.append(min(opts))
        else:
            work = sum(options)
            if work <= budget + 1e-9:
                key = (work / hv, len(parts))
                best = key if best is None or key < best else best
    return best


@pytest.mark.parametrize("pair", _table_pairs())
def test_plans_fit_the_kernel_and_are_minimal(pair):
    hv, hk = pair
    plan = plan_for(hv, hk, 128, torch.float16, CURRENT, max_overhead=1.5)
    if hk > 8:  # too many splits to enumerate; cost 1.0 is the floor, one launch the fewest
        assert plan.overhead == 1.0 and all(CURRENT(a, b) for a, b in plan.launches)
        assert len(plan.launches) == 1 or not CURRENT(hv, hk)
        assert len(plan.launches) <= 2
        return
    expected = _brute_force(hv, hk, CURRENT, 1.5)
    if expected is None:
        assert plan.strategy == "none" and plan.launches == () and math.isinf(plan.overhead)
        return
    assert all(CURRENT(a, b) for a, b in plan.launches)
    assert math.isclose(plan.overhead, expected[0])
    assert len(plan.launches) == expected[1]
    # the detail covers every real key group exactly once
    covered = [g for l in plan.detail for g in range(l.key_start, l.key_start + l.key_count)]
    assert covered == list(range(hk))
    assert sum(l.value_heads for l in plan.detail) == round(plan.overhead * hv)


@pytest.mark.parametrize("pair,strategy,launches", [
    ((16, 16), "native", [(16, 16)]),
    ((48, 16), "native", [(48, 16)]),
    ((6, 2), "pad", [(8, 2)]),
    ((28, 4), "pad", [(32, 4)]),
    ((128, 32), "split", [(64, 16), (64, 16)]),
    ((4, 4), "none", []),
    ((3, 1), "none", []),
    ((5, 5), "none", []),
])
def test_known_plans(pair, strategy, launches):
    plan = plan_for(*pair, 128, torch.float16, CURRENT, max_overhead=1.5)
    assert plan.strategy == strategy
    assert list(plan.launches) == launches


def test_split_plus_pad_and_inert_groups():
    # Only (8, 4)-sized launches exist: 12 key groups of 1 value head -> three padded launches.
    only = lambda hv, hk: (hv, hk) == (8, 4)
    plan = plan_for(12, 12, 128, torch.float16, only, max_overhead=2.0)
    assert plan.strategy == "split+pad" and list(plan.launches) == [(8, 4)] * 3
    assert plan.overhead == 2.0
    # Inert key groups: (6, 3) -> (8, 4) adds one whole inert group.
    plan = plan_for(6, 3, 128, torch.float16, only, max_overhead=1.5)
    assert plan.strategy == "pad" and plan.detail[0].inert_groups == 1 and plan.overhead == pytest.approx(8 / 6)


def test_overhead_limit_comes_from_env(monkeypatch):
    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_GDN_MAX_OVERHEAD", "1.2")
    assert plan_for(6, 2, 128, torch.float16, CURRENT).strategy == "none"
    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_GDN_MAX_OVERHEAD", "1.4")
    assert plan_for(6, 2, 128, torch.float16, CURRENT).strategy == "pad"


def test_layout_outside_the_kernel_contract_has_no_plan():
    assert plan_for(16, 16, 64, torch.float16, CURRENT).strategy == "none"
    assert plan_for(16, 16, 128, torch.float32, CURRENT).strategy == "none"
    assert plan_for(16, 16, 128, torch.bfloat16, CURRENT).strategy == "native"


@pytest.mark.parametrize("args,needle", [
    ((0, 1), "value_heads=0"),
    ((6, 4), "multiple of key_heads"),
    ((4, -1), "key_heads=-1"),
])
def test_bad_pairs_raise(args, needle):
    with pytest.raises(ValueError, match=needle):
        plan_for(*args, 128, torch.float16, CURRENT)


def test_kernel_table_lookup_by_version():
    assert caps.mega_pair_predicate("0.1.0")(6, 2) is False
    assert caps.mega_pair_predicate("0.1.0")(8, 2) is True
    assert caps.mega_entry(None) is caps.CURRENT_MEGA_ENTRY
