"""Head planner: plans are accepted by the kernel table and as cheap as any plan can be."""

from __future__ import annotations

import math

import pytest
import torch

from sglang_ascend_hybrid.ops.gdn import contract as caps
from sglang_ascend_hybrid.ops.gdn.prefill import planner
from sglang_ascend_hybrid.ops.gdn.prefill.planner import plan_for

CURRENT = caps.MEGA_CURRENT.supports
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
    covered = [g for part in plan.detail for g in range(part.key_start, part.key_start + part.key_count)]
    assert covered == list(range(hk))
    assert sum(part.value_heads for part in plan.detail) == round(plan.overhead * hv)


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
    ((0, 1), "value_heads=0: expected a positive integer"),
    ((6, 4), r"value_heads=6: expected a multiple of key_heads \(4\)"),
    ((4, -1), "key_heads=-1: expected a positive integer"),
])
def test_bad_pairs_raise(args, needle):
    with pytest.raises(ValueError, match=f"^{needle}$"):
        plan_for(*args, 128, torch.float16, CURRENT)


def test_kernel_table_lookup_by_version():
    assert caps.mega_pair_predicate("2026.6.1")(6, 2) is False
    assert caps.mega_pair_predicate("2026.6.1")(8, 2) is True
    # 0.1.0 (setup.py's default before config.ini) has no mega kernel: the strictest known set, not the newest
    assert caps.mega_pair_predicate("0.1.0")(8, 2) is False and caps.mega_pair_predicate("0.1.0")(16, 8) is True
    assert caps.mega_entry(None) is caps.MEGA_CURRENT


# ---------------------------------------------------------------------------
# The overhead limit: inf means no limit, nan / < 1 / non-numbers are refused
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("pair", _table_pairs() + [(1, 1), (2, 2), (7, 7), (9, 3)])
@pytest.mark.parametrize("limit", [math.inf, 1e300])
def test_no_limit_gives_the_cheapest_plan_the_table_accepts(pair, limit):
    """With the current table (launches of <= 64 value heads, each holding >= 1 real head) no plan
    can cost more than 64x: an unlimited search equals a search with limit 64, and never "none"
    for a layout the table can hold at all."""
    hv, hk = pair
    plan = plan_for(hv, hk, 128, torch.float16, CURRENT, max_overhead=limit)
    assert plan == plan_for(hv, hk, 128, torch.float16, CURRENT, max_overhead=64.0)
    assert plan.strategy != "none" and all(CURRENT(a, b) for a, b in plan.launches)
    assert 1.0 <= plan.overhead <= 64.0
    if hk <= 4:
        expected = _brute_force(hv, hk, CURRENT, 64.0)
        assert math.isclose(plan.overhead, expected[0]) and len(plan.launches) == expected[1]


def test_no_limit_plans_padding_the_limited_planner_refuses():
    assert plan_for(3, 1, 128, torch.float16, CURRENT, max_overhead=1.5).strategy == "none"
    plan = plan_for(3, 1, 128, torch.float16, CURRENT, max_overhead=math.inf)
    assert plan.strategy == "pad" and list(plan.launches) == [(8, 2)] and plan.overhead == pytest.approx(8 / 3)
    plan = plan_for(1, 1, 128, torch.float16, CURRENT, max_overhead=math.inf)
    assert list(plan.launches) == [(8, 8)] and plan.overhead == 8.0


@pytest.mark.parametrize("raw", ["inf", "Infinity", "1e300", "1e308"])
def test_env_no_limit_does_not_overflow(monkeypatch, raw):
    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_GDN_MAX_OVERHEAD", raw)
    assert plan_for(3, 1, 128, torch.float16, CURRENT).launches == ((8, 2),)


def test_search_is_finite_for_a_predicate_that_accepts_nothing():
    never = lambda hv, hk: False  # no max_value_heads: searched up to UNKNOWN_PREDICATE_MAX_HEADS
    assert planner.launch_ceiling(never) == planner.UNKNOWN_PREDICATE_MAX_HEADS
    assert plan_for(24, 24, 128, torch.float16, never, max_overhead=math.inf).strategy == "none"
    assert planner.launch_ceiling(CURRENT) == max(caps.MEGA_CURRENT.value_heads)


def test_declared_ceiling_bounds_the_search():
    def big(hv, hk):
        return hv == 96 and hk == 96

    def big_declared(hv, hk):
        return hv == 96 and hk == 96

    big_declared.max_value_heads = 64  # says it accepts nothing above 64 (wrongly): never searched
    assert plan_for(2, 2, 128, torch.float16, big, max_overhead=math.inf).launches == ((96, 96),)
    assert plan_for(2, 2, 128, torch.float16, big_declared, max_overhead=math.inf).strategy == "none"


@pytest.mark.parametrize("bad", [math.nan, 0.99, 0, -1.0, -math.inf, "2", None.__class__, True, [2.0]])
def test_bad_max_overhead_is_refused_naming_it(bad):
    with pytest.raises(ValueError, match=r"max_overhead=.*expected a number >= 1\.0 \(or inf for no limit\)"):
        plan_for(6, 2, 128, torch.float16, CURRENT, max_overhead=bad)


@pytest.mark.parametrize("raw", ["nan", "0.5", "-inf", "many"])
def test_bad_env_limit_is_refused_naming_the_variable(monkeypatch, raw):
    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_GDN_MAX_OVERHEAD", raw)
    with pytest.raises(ValueError, match=f"SGLANG_ASCEND_HYBRID_GDN_MAX_OVERHEAD={raw!r}: expected a number >= 1"):
        plan_for(6, 2, 128, torch.float16, CURRENT)


def test_gdn_prefill_runs_the_unlimited_plan(monkeypatch):
    """GDN prefill with SGLANG_ASCEND_HYBRID_GDN_MAX_OVERHEAD=inf: no OverflowError, the mega
    kernel gets the padded plan, and the result equals the torch path's."""
    from sglang_ascend_hybrid.emulators.gdn_mega import make_mega_emulator
    from sglang_ascend_hybrid.ops import seam
    from sglang_ascend_hybrid.ops.gdn import chunk_gated_delta_rule
    from sglang_ascend_hybrid.ops.gdn.contract import OP_MEGA

    monkeypatch.setenv("SGLANG_ASCEND_HYBRID_GDN_MAX_OVERHEAD", "inf")
    mega, seen = make_mega_emulator(), []

    def recording(q, k, v, *args, **kwargs):
        seen.append((v.shape[2], q.shape[2]))
        return mega(q, k, v, *args, **kwargs)

    hv, hk, T = 3, 1, 12
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, T, hk, 128, generator=gen).half()
    k = torch.nn.functional.normalize(torch.randn(1, T, hk, 128, generator=gen), dim=-1).half()
    v = torch.randn(1, T, hv, 128, generator=gen).half()
    g = -torch.rand(1, T, hv, generator=gen) * 0.1
    beta = torch.rand(1, T, hv, generator=gen).half()
    cu = torch.tensor([0, 5, 12])
    with seam.install_emulators({OP_MEGA: recording}):
        o, final = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu)
    assert seen == [(8, 2)]
    o_ref, final_ref = chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, backend="torch")
    torch.testing.assert_close(o.float(), o_ref.float(), atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(final, final_ref, atol=2e-2, rtol=2e-2)
