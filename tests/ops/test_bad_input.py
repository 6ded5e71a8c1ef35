"""The one helper for an op's input errors: the argument, the value and what was expected."""

import pytest
import torch

from sglang_ascend_hybrid.ops.errors import bad_input, shown
from sglang_ascend_hybrid.ops.gdn.prefill.planner import plan_for


def test_bad_input_names_the_argument_the_value_and_the_expectation():
    assert str(bad_input("cu_seqlens", [0, 3, 2], "non-decreasing offsets")) == \
        "cu_seqlens=[0, 3, 2]: expected non-decreasing offsets"
    err = bad_input("q", "shape (2, 3)", "[1, T, Hk, K]", op="GDN decode")
    assert isinstance(err, ValueError) and str(err) == "GDN decode: q=shape (2, 3): expected [1, T, Hk, K]"


@pytest.mark.parametrize("value,text", [
    (torch.zeros(2, 3, dtype=torch.bfloat16), "shape (2, 3) bfloat16"),      # never a tensor's values
    (list(range(17)), "[0, 1, 2, 3, 4, 5, 6, 7]... (17 entries)"),            # a long list: its first 8
    (list(range(16)), str(list(range(16)))),
    ("'silu'", "'silu'"),                                                    # a str as the caller rendered it
    (torch.float16, "torch.float16"),
    (None, "None"),
    ("x" * 300, "x" * 197 + "..."),                                          # one line of at most 200 characters
])
def test_values_are_shown_short(value, text):
    assert shown(value) == text
    assert str(bad_input("a", value, "b", op="op")) == f"op: a={text}: expected b"


def test_the_gdn_planner_says_its_bad_input_the_same_way():
    with pytest.raises(ValueError, match=r"^value_heads=0: expected a positive integer$"):
        plan_for(0, 2)
