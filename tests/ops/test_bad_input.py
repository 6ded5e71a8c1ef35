"""The one helper for an op's input errors: the argument, the value and what was expected."""

from sglang_ascend_hybrid.ops.errors import bad_input
from sglang_ascend_hybrid.ops.gdn.prefill.planner import plan_for


def test_bad_input_names_the_argument_the_value_and_the_expectation():
    assert str(bad_input("cu_seqlens", [0, 3, 2], "non-decreasing offsets")) == \
        "cu_seqlens=[0, 3, 2]: expected non-decreasing offsets"
    err = bad_input("q", "shape (2, 3)", "[1, T, Hk, K]", op="GDN decode")
    assert isinstance(err, ValueError) and str(err) == "GDN decode: q=shape (2, 3): expected [1, T, Hk, K]"


def test_the_gdn_planner_says_its_bad_input_the_same_way():
    import pytest

    with pytest.raises(ValueError, match=r"^value_heads=0: expected a positive integer$"):
        plan_for(0, 2)
